"""What each audit event says, in words: one row per event type, for every place that shows one.

The engine records events of the types in ``bot.engine.events.EventType``; this module is the one
place that turns them into text. Each type has one ``EventText`` row in ``TEXTS``:

- ``line``: the sentence of a timeline (transcripts, any history of a run), from the payload alone;
- ``live``: the lines a terminal prints as the run goes, from the event and the run as it is now
  (none: the terminal shows the event through the state, or not at all);
- ``chat``: the text of the thread reply a chat front-end posts for it, in Slack mrkdwn, when the
  reply is just that text (none: the front-end draws the step's state instead).

Front-ends only lay these out. An event type this module does not know yet (a newer engine's) is
shown in a timeline as its payload's fields (payloads as recorded by ``bot/engine/conductor.py``
and ``bot/engine/apply_commands.py``), so a newer engine never breaks an older export.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.engine.events import COMMANDS, EventType
from bot.engine.ports import StoredEvent
from bot.engine.provenance import suggested_words
from bot.engine.runstate import AuditDraft, RunState, StepState
from bot.present.blockkit import esc
from bot.present.console import clock_text, plan_lines
from bot.present.dryrun import verdict_lines
from bot.present.views import relative, run_view, step_view
from bot.present.words import plain_message
from bot.store.audit import Event

T = EventType
Payload = Mapping[str, Any]


def value_text(v: Any) -> str:
    """Plain data as one line of text: strings as they are, anything else as compact JSON."""
    if isinstance(v, str):
        return v
    return json.dumps(v, ensure_ascii=False, sort_keys=True, default=str)


def short_hash(h: Any) -> str:
    """The first 12 characters of a hash, enough to tell plans apart when reading."""
    return str(h)[:12] if h else "-"


def _fields(p: Payload) -> str:
    return ", ".join(f"{k}={value_text(v)}" for k, v in p.items())


@dataclass(frozen=True)
class Moment:
    """An event as it happens, with the run as it is now (what the terminal prints from)."""

    state: RunState
    actor: str
    payload: Payload
    ts: str = ""  # when the event happened

    @property
    def key(self) -> str:
        return str(self.payload.get("step", ""))

    @property
    def step(self) -> StepState | None:
        return self.state.steps.get(self.key)

    def title(self) -> str:
        s = self.step
        return s.title if s else self.key


Line = Callable[[Payload], str]
Live = Callable[[Moment], list[str]]
Chat = Callable[[Payload], str]


@dataclass(frozen=True)
class EventText:
    line: Line
    live: Live | None = None
    chat: Chat | None = None


# -- the timeline's sentences -----------------------------------------------------------------------

def _run_created(p: Payload) -> str:
    params = ", ".join(f"{k}={value_text(v)}" for k, v in (p.get("params") or {}).items())
    return (f"started runbook {p.get('runbook', '')}" + (f" with {params}" if params else "")
            + (" (dry run)" if p.get("dry_run") else ""))


def _linked(p: Payload) -> str:
    """``run.linked``: what the run follows on from, its incident, what suggested it."""
    parts = []
    if p.get("parent"):
        parts.append(f"follows on from run {p['parent']}"
                     + (f" ({p['parent_why']})" if p.get("parent_why") else ""))
    if p.get("incident"):
        parts.append(f"incident {p['incident']}")
    if p.get("suggested_by"):
        parts.append(f"suggested by {suggested_words(p['suggested_by'])}")
    if p.get("detected_at"):
        parts.append(f"trouble detected at {p['detected_at']}")
    if p.get("shown_at"):
        parts.append(f"card shown at {p['shown_at']}")
    return "linked: " + "; ".join(parts)


def _handed_over(p: Payload) -> str:
    voided = ", ".join(f"{v.get('by')} on {v.get('step')}" for v in p.get("voided") or ())
    return (f"handed over from {p.get('from', '')} to {p.get('to', '')}"
            + (f": {p['reason']}" if p.get("reason") else "")
            + (f"; approvals that no longer count: {voided}" if voided else ""))


def _person(identity: object) -> str:
    """A person in a chat reply: a Slack user as a mention (they are told), anyone else as text."""
    text = str(identity)
    if re.fullmatch(r"slack:[UW][A-Z0-9]{2,20}", text):
        return f"<@{text.removeprefix('slack:')}>"
    return esc(text)


def _chat_handed_over(p: Payload) -> str:
    return (f"👤 Owner is now {_person(p.get('to', ''))} (was "
            f"{_person(p.get('from', ''))})"
            + (f": {esc(p['reason'])}" if p.get("reason") else ""))


def _chat_linked(p: Payload) -> str:
    return "🔗 " + esc(_linked(p)[len("linked: "):])
def _context(p: Payload) -> str:
    """``run.context``: the cluster, its API server and the AWS identity the run acts as."""
    where = f"cluster {p.get('cluster', '')} (context {p.get('kube_context') or '-'}, " \
            f"API server {p.get('api_server') or '-'})"
    who = (f"AWS account {p.get('account') or '-'} as {p.get('caller_arn') or '-'}"
           + (f", writes as {p['writes_as'].get('role_arn')} session "
              f"{p['writes_as'].get('session_name')}" if p.get("writes_as") else ""))
    problems = "; ".join(p.get("problems") or ())
    return (f"acting on {where}, {who}; runbook-bot {p.get('bot_version', '')}, runbook "
            f"{short_hash(str(p.get('runbook_digest', '')).removeprefix('sha256:'))}"
            + (f"; not resolved: {problems}" if problems else ""))


def _chain_key(mode: Any) -> str:
    """How a chain is written, as ``audit.key_rotated`` records it: a key id, or no key."""
    if isinstance(mode, Mapping) and mode.get("key_id"):
        return f"key {mode['key_id']}"
    return "no key (plain SHA-256)"


STAGE_WORDS = {"fenced": "fenced: the machine is off", "tainted": "tainted out-of-service",
               "attachments_gone": "VolumeAttachments gone",
               "volume_attached": "volume attached elsewhere",
               "pod_running": "pod Running and Ready on another node"}


def _stage(p: Payload) -> str:
    """``stage.reached``: a stage of the recovery, what it concerns and what observed it."""
    subjects = ", ".join(f"{k} {p[k]}" for k in ("node", "volume", "pod") if p.get(k))
    return (f"recovery stage: {STAGE_WORDS.get(str(p.get('stage')), str(p.get('stage', '')))}"
            + (f" ({subjects})" if subjects else "")
            + f" at {p.get('at', '?')}, seen by {p.get('source', '?')}")


def _key_rotated(p: Payload) -> str:
    old, new = _chain_key(p.get("previous")), _chain_key(p.get("chain"))
    return (f"audit key rotated from {old} to {new}: this event is signed with {old}, the next "
            f"ones with {new}" if old.startswith("key") else
            f"audit key set: {new} signs the events after this one")


def _asked(p: Payload) -> str:
    if "text" in p:
        return f"asked a person to confirm: {p['text']}"
    groups = ", ".join(p.get("groups") or ()) or "any approver group"
    until = f", until {p['expires_at']}" if p.get("expires_at") else ""
    return (f"asked {p.get('min_approvers', 0)} approver(s) from {groups} for plan "
            f"{short_hash(p.get('plan_hash'))}{until}: {p.get('reason', '')}")


def _invalidated(p: Payload) -> str:
    voided = ", ".join(p.get("voided") or ()) or "none"
    if p.get("old_hash") == p.get("new_hash"):  # the plan stands; the people may no longer count
        return f"approvals voided: {voided}: {p.get('reason', '')}"
    return (f"plan changed {short_hash(p.get('old_hash'))} → {short_hash(p.get('new_hash'))}; "
            f"approvals voided: {voided}")


def _dropped(p: Payload) -> str:
    return "; ".join(f"{k} ({v})" for k, v in (p.get("dropped") or {}).items()) or "none"


def _planned(p: Payload) -> str:
    text = f"planned {short_hash(p.get('plan_hash'))}: {p.get('summary', '')}"
    if p.get("narrowed_from"):
        text += (f"; narrowed from the approved {short_hash(p.get('narrowed_from'))}, dropped "
                 f"{_dropped(p)}: the rest applies as approved")
    return text


def _applying(p: Payload) -> str:
    approvers = ", ".join(p.get("approvers") or ())
    return (f"applying plan {short_hash(p.get('plan_hash'))} (attempt {p.get('attempt', 1)})"
            + (f", approved by {approvers}" if approvers else ""))


def _called(what: str) -> Line:
    """``step.applied`` and ``step.polled``: the API calls made, and what the action said."""
    def line(p: Payload) -> str:
        extra = p.get("message") or p.get("progress") or ""
        return (f"{what}: {len(p.get('calls') or [])} API call(s)"
                + (" (already done)" if p.get("already_done") else "")
                + ("" if p.get("done", True) else ", not done yet") + (f": {extra}" if extra else ""))
    return line


def _command(t: str) -> Line:
    """A person's command (``command.approve``...) with what they passed."""
    name = t[len("command."):].replace("_", "-")

    def line(p: Payload) -> str:
        args = ", ".join(f"{k}={value_text(v)}" for k, v in p.items() if k != "step")
        return name + (f" ({args})" if args else "")
    return line


# -- the terminal's lines as a run goes -------------------------------------------------------------

def _live_created(m: Moment) -> list[str]:
    return [f"run {m.state.run_id}: {m.state.title}"
            + (" (DRY RUN: plans only, nothing is changed)" if m.state.dry_run else "")]


def _live_planned(m: Moment) -> list[str]:
    if m.step is None:
        return []
    view = step_view(m.step)
    if not view.changes:  # a change to make: show exactly what, and the evidence for it
        return []
    cluster = m.state.params.get("cluster")  # one bot, several clusters: the one it acts on
    return [f"  ▶ {m.step.title}" + (f" (cluster {cluster})" if cluster else ""), *plan_lines(view)]


def _expiry(expires_at: Any, now: str) -> str:
    """``in 30m (2026-01-01 00:30:00 UTC)``: relative to the event, then the time itself."""
    if not expires_at:
        return "never"
    at = clock_text(str(expires_at))
    try:
        return f"{relative(str(expires_at), datetime.fromisoformat(now))} ({at})"
    except ValueError:
        return at


def _live_asked(m: Moment) -> list[str]:
    s, p, key, run = m.step, m.payload, m.key, m.state.run_id
    if s is None or s.blocked:
        return []
    out = [f"  ? {key} needs {p.get('min_approvers')} approval(s) from "
           f"{', '.join(p.get('groups') or []) or 'any approver group'} "
           f"({p.get('reason')}); expires {_expiry(p.get('expires_at'), m.ts)}"]
    if s.approval_text:
        out.append(f"    why: {s.approval_text}")
    return [*out, f"    approve with: runbook-bot approve {run} --step {key}"]


def _live_confirm(m: Moment) -> list[str]:
    s, key = m.step, m.key
    if s is None or s.blocked:
        return []
    text = m.payload.get("text") or s.message or s.title
    return [f"  ? {key} needs a person to confirm: {text}",
            f"    confirm with: runbook-bot confirm {m.state.run_id} --step {key}"]


def _live_succeeded(m: Moment) -> list[str]:
    s, message = m.step, m.payload.get("message")
    if s is None:
        return []
    said = message and (s.plan or {}).get("action") != "notify"  # a notify's message is posted
    return [f"  ✓ {s.title}" + (f": {message}" if said else "")]


def _finished(p: Payload) -> str:
    # the outcome rule that decided is named only when one did: older runs read as they did
    rule = f" (outcome rule {p['rule']}: {p.get('when', '')})" if p.get("rule") else ""
    return f"finished {p.get('status', '')}: {p.get('outcome', '')}{rule}"


def _live_finished(m: Moment) -> list[str]:
    p = m.payload
    if m.state.dry_run and p.get("status") in ("succeeded", "failed"):
        return [*verdict_lines(run_view(m.state)),
                *(f"  still in place: {c}" for c in p.get("compensations") or [])]
    return [f"run {m.state.run_id} {p.get('status')}: {p.get('outcome')}",
            *(f"  still in place: {c}" for c in p.get("compensations") or [])]


def _say(make: Callable[[Moment], str]) -> Live:
    """A live rendering of one line."""
    return lambda m: [make(m)]


# -- a chat thread's replies ------------------------------------------------------------------------

def _chat_retrying(p: Payload) -> str:
    delay = p.get("delay")
    return (f"↻ *{esc(p.get('step', ''))}* failed and is retried"
            + (f" in {float(delay):.0f} s" if isinstance(delay, int | float) else "")
            + f": {esc(p.get('error', ''))}")


# -- the table --------------------------------------------------------------------------------------

TEXTS: dict[EventType, EventText] = {
    T.RUN_CREATED: EventText(_run_created, _live_created),
    T.RUN_LINKED: EventText(_linked, _say(lambda m: "  " + _linked(m.payload)), _chat_linked),
    T.RUN_HANDED_OVER: EventText(_handed_over, _say(lambda m: "  " + _handed_over(m.payload)),
                                 _chat_handed_over),
    T.RUN_CONTEXT: EventText(_context),
    T.RUN_ABORTED: EventText(lambda p: f"aborted: {p.get('reason', '')}"),
    T.RUN_FINISHED: EventText(_finished, _live_finished),
    T.AUDIT_KEY_ROTATED: EventText(_key_rotated),
    T.STAGE_REACHED: EventText(_stage),
    T.STEP_PLANNED: EventText(_planned, _live_planned),
    T.GUARD_PASSED: EventText(lambda p: f"guard passed: {p.get('expr', '')}"),
    T.GUARD_FAILED: EventText(
        lambda p: f"guard failed: {p.get('expr', '')}: {p.get('message', '')}",
        _say(lambda m: f"    ✗ guard: {m.payload.get('message')}")),
    T.APPROVAL_REQUESTED: EventText(_asked, _live_asked),
    T.CONFIRMATION_REQUESTED: EventText(_asked, _live_confirm),
    T.APPROVAL_GRANTED: EventText(
        lambda p: (f"approved plan {short_hash(p.get('plan_hash'))} "
                   f"({p.get('count', '?')} of {p.get('needed', '?')})"),
        _say(lambda m: f"    ✓ approved by {m.actor} ({m.payload.get('count')} of "
                       f"{m.payload.get('needed')})")),
    T.APPROVAL_REJECTED: EventText(
        lambda p: f"rejected plan {short_hash(p.get('plan_hash'))}: {p.get('reason', '')}"),
    T.APPROVAL_EXPIRED: EventText(lambda p: f"approval expired at {p.get('expires_at', '')}"),
    T.APPROVAL_INVALIDATED: EventText(
        _invalidated, _say(lambda m: f"    ! the plan of {m.key} changed since it was approved: "
                                     "approval void, asking again")),
    T.STEP_CONFIRMED: EventText(lambda p: "confirmed" + (f": {p['note']}" if p.get("note") else "")),
    T.INTERLOCK_BLOCKED: EventText(
        lambda p: (f"interlock {p.get('rule', '')} refused at {p.get('phase', '')}: "
                   f"{p.get('message', '')}"),
        _say(lambda m: f"    ✗ interlock {m.payload.get('rule')}: {m.payload.get('message')}")),
    T.INTERLOCK_OVERRIDE_REQUESTED: EventText(
        lambda p: (f"break-glass for {p.get('rule', '')}"
                   + (f" up to {p['nodes']} nodes" if p.get("nodes") is not None else "")
                   + f" ({p.get('count', '?')} of {p.get('needed', '?')}): {p.get('reason', '')}")),
    T.INTERLOCK_OVERRIDE_GRANTED: EventText(
        lambda p: (f"break-glass granted for {p.get('rule', '')}"
                   + (f" up to {p['nodes']} nodes" if p.get("nodes") is not None else "") + " by "
                   f"{', '.join(p.get('approvers') or ())}")),
    T.INTERLOCK_OVERRIDDEN: EventText(
        lambda p: f"interlock {p.get('rule', '')} overridden at apply",
        _say(lambda m: f"    ! BREAK GLASS: interlock {m.payload.get('rule')} overridden by "
                       f"{', '.join(m.payload.get('approvers') or [])}")),
    T.STEP_APPLYING: EventText(_applying),
    T.STEP_APPLIED: EventText(_called("applied")),
    T.STEP_POLLED: EventText(_called("polled")),
    T.STEP_RETRYING: EventText(
        lambda p: (f"{p.get('phase', '')} failed (try {p.get('attempt', '?')}), retrying in "
                   f"{p.get('delay', '?')}s: {p.get('error', '')}"),
        _say(lambda m: f"    retrying {m.key} in {m.payload.get('delay'):.0f}s: "
                       f"{m.payload.get('error')}"),
        _chat_retrying),
    T.STEP_SUCCEEDED: EventText(
        lambda p: "succeeded" + (f": {p['message']}" if p.get("message") else ""), _live_succeeded),
    T.STEP_FAILED: EventText(
        lambda p: f"failed: {p.get('error', '')}",
        _say(lambda m: f"  ✗ {m.title()}: failed: {m.payload.get('error')}")),
    T.STEP_SKIPPED: EventText(
        lambda p: f"skipped: {p.get('reason', '')}",
        _say(lambda m: f"  ⤼ {m.title()}: skipped ({plain_message(m.step) if m.step else ''})")),
    T.STEP_GOTO: EventText(lambda p: f"going back to step {p.get('target', '')}"),
    T.COMMAND_REFUSED: EventText(
        lambda p: f"refused {p.get('command', '')}: {p.get('reason', '')}",
        _say(lambda m: f"    refused for {m.actor}: {m.payload.get('reason')}")),
    **{t: EventText(_command(t)) for t in COMMANDS},
}


_BY_TYPE: dict[str, EventText] = {t.value: row for t, row in TEXTS.items()}


def text_of(type_: str) -> EventText | None:
    """The row of an event type; None for a type this module does not know."""
    return _BY_TYPE.get(type_)


def describe(ev: Event) -> str:
    """One line saying what an audit event records, for the timeline."""
    row = text_of(ev.type)
    if row is not None:
        return row.line(ev.payload)
    if ev.type.startswith("command."):  # a command this version does not know yet
        return _command(ev.type)(ev.payload)
    return _fields(ev.payload)


def live_lines(state: RunState, ev: AuditDraft | StoredEvent) -> list[str]:
    """The lines a terminal prints for an event as it happens (often none): one being saved, or
    one read back from the store by a terminal following the run."""
    row = text_of(ev.type)
    if row is None or row.live is None:
        return []
    return row.live(Moment(state, ev.actor, ev.payload, ev.ts))


def chat_text(ev: StoredEvent) -> str | None:
    """The text of a chat thread's reply to an event, when the reply is only that text."""
    row = text_of(ev.type)
    return row.chat(ev.payload) if row is not None and row.chat is not None else None
