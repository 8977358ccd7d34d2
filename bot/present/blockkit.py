"""Block Kit for runs: the run card, approval messages, thread replies and modals, as plain dicts.

Slack is one of the destinations of the platform-free views (``views.py``); this module renders
them and nothing else knows Block Kit's shapes. Slack rejects a whole message (``invalid_blocks``)
or modal (``invalid_arguments``) when one field is a character too long, so every builder here
stays inside the documented limits by construction: text is cut with a pointer to the thread, a
too-long block list collapses its tail into one line, and ids and values that are data raise
instead of being cut. The tests' fake Slack Web API checks every payload the app sends against the
same limits table (``tests/fakes/blockkit_limits.py``).

Limits (docs.slack.dev Block Kit reference): 50 blocks per message, 100 per modal, section text
3000, button text 75, value 2000, action_id/block_id 255, confirm title 100 / text 300 / buttons
30, modal title, submit and close 24, header text 150, 10 section fields of 2000, 25 elements per
actions block, 10 per context block. Button ``style`` is ``primary`` or ``danger``.

Every string that comes from people or the world goes through ``esc`` in blocks and in the
``text`` fallbacks alike: Slack draws (and notifies on) both.

The primitives that keep every block within those limits (text, sections, buttons, confirm
dialogs) are in ``blockkit_base.py`` and importable from here.

People are shown through a ``who`` function (identity -> mrkdwn), so the Slack front-end can turn
``slack:U123`` into a mention while this module stays free of any platform.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from bot.engine.provenance import suggested_words
from bot.engine.state import RUN_TERMINAL
from bot.present import times
from bot.present.agents import agent_evidence, agent_line
from bot.present.blockkit_base import (
    BUTTON_STYLES,
    ELLIPSIS,
    LIMITS,
    THREAD_POINTER,
    Block,
    actions,
    approve_button,
    button,
    confirm_dialog,
    context,
    divider,
    header,
    limit_blocks,
    mrkdwn,
    plain,
    section,
    truncate,
)
from bot.present.dryrun import dry_run_verdict
from bot.present.views import ICONS, RunView, StepView, held_text
from bot.present.words import Skipped, collapse, wait_text
from bot.runbook.model import Param, Runbook

# the primitives of blockkit_base are importable from here, where they were defined before
__all__ = ["ACTION_APPROVE", "ACTION_CONFIRM", "ACTION_REJECT", "BUTTON_STYLES", "DATE_TOKENS",
           "ELLIPSIS", "FINISHED", "LIMITS", "REASON_BLOCK", "STATUS_WORDS", "THREAD_POINTER",
           "VIEW_REJECT", "VIEW_RUN", "Block", "Who", "actions", "ago", "approval_message",
           "approve_button", "button", "button_value", "card_text", "confirm_dialog", "context",
           "decision_line", "divider", "esc", "expiry", "final_summary", "full_plan", "header",
           "hhmm", "limit_blocks", "links_line", "mrkdwn", "param_block_id", "params_modal",
           "plain", "plan_needs_thread", "progress_text", "prose", "reject_modal", "run_card",
           "runbook_blocks", "runbook_list", "runs_list", "section", "slack_date", "span",
           "step_line", "step_reply", "truncate", "waiting_text", "with_dates"]

# -- rendering runs -----------------------------------------------------------------------------

Who = Callable[[str], str]

STATUS_WORDS: Final[Mapping[str, str]] = {
    "pending": "starting", "running": "running", "awaiting_approval": "waiting for a person",
    "waiting": "waiting", "succeeded": "succeeded", "failed": "failed", "aborted": "aborted",
    "partial": "partial",
}
FINISHED: Final = frozenset(str(s) for s in RUN_TERMINAL)
ACTION_APPROVE: Final = "rb_approve"
ACTION_REJECT: Final = "rb_reject"
ACTION_CONFIRM: Final = "rb_confirm"
VIEW_RUN: Final = "rb_run"
VIEW_REJECT: Final = "rb_reject_reason"


# mrkdwn has no escape for its formatting characters: they are drawn as look-alikes instead
_INERT = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "*": "\u2217", "`": "\u02cb",
                        "~": "\u223c"})


def esc(text: object) -> str:
    """Text from the world (params, titles, reasons, errors, pod names) made inert in mrkdwn: no
    mentions (``<!channel>``, ``<@U…>``), no links, no bold, code or strike-through."""
    return str(text).translate(_INERT)


def _plain_who(identity: str) -> str:
    return esc(identity)


# -- times: Slack shows each reader their own local time -----------------------------------------

DATE_TOKENS: Final = "{date_short_pretty} {time}"  # "today 12:03 PM", "Jan 4, 2027 09:15"
_ISO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?")


def _instant(iso: str | datetime) -> datetime | None:
    if isinstance(iso, datetime):
        when = iso
    else:
        try:
            when = datetime.fromisoformat(iso.replace("Z", "+00:00"))
        except ValueError:
            return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def slack_date(iso: str | datetime | None, *, tokens: str = DATE_TOKENS) -> str:
    """A time as Slack's date formatting, ``<!date^UNIX^{date_short_pretty} {time}|fallback>``:
    each reader sees it in their own time zone; the fallback (UTC) is for clients that cannot."""
    if iso and _instant(iso) is None:
        return esc(iso)
    return times.slack(iso, tokens=tokens)


def with_dates(text: str) -> str:
    """Escaped text with every ISO-8601 time in it shown as a Slack date."""
    return _ISO_TIME.sub(lambda m: slack_date(m.group(0)), text)


def prose(text: object) -> str:
    """Text from the world, inert (``esc``), its times shown in each reader's own time."""
    return with_dates(esc(text))


def span(seconds: float) -> str:
    """``1680`` -> ``28 minutes``; ``5400`` -> ``1 hour 30 minutes``."""
    s = round(abs(seconds))
    if s < 60:
        return f"{s} second{'s' if s != 1 else ''}"
    minutes = s // 60
    if minutes < 60:
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    hours, minutes = divmod(minutes, 60)
    out = f"{hours} hour{'s' if hours != 1 else ''}"
    return out + (f" {minutes} minute{'s' if minutes != 1 else ''}" if minutes else "")


def expiry(iso: str, now: datetime | None) -> str:
    """``expires in 28 minutes (at 12:30)``, in each reader's time; ``expired`` once past."""
    when = _instant(iso)
    at = slack_date(iso, tokens="{time}")
    if when is None or now is None:
        return f"expires {slack_date(iso)}"
    left = (when - now).total_seconds()
    if left <= 0:
        return f"expired {span(left)} ago ({at})"
    return f"expires in {span(left)} (at {at})"


def waiting_text(step: StepView, now: datetime | None) -> str:
    """What a step waits for, for Slack: an approval's expiry relative to ``now``, a wait's words
    and progress, times as dates."""
    if step.status == "waiting":
        return wait_text(step, now=now, at=lambda t: times.slack(t, tokens="{time}")) if (
            now is not None) else prose(step.pending)
    if (step.status == "awaiting_approval" and step.needs_approval and not step.blocked
            and step.expires_at and not step.pending.startswith("approved")):
        groups = ", ".join(step.groups) or "any approver group"
        return (f"approval {len(step.approvers)} of {step.min_approvers} from {esc(groups)}, "
                f"{expiry(step.expires_at, now)}")
    return prose(step.pending)


def hhmm(iso: str | None) -> str:
    """When something happened, as a Slack date (each reader's own time)."""
    return slack_date(iso)


def ago(read_at: str, now: datetime | None) -> str:
    """How long ago a fact was read, as approvers want it: ``read 2 s ago``."""
    if not read_at:
        return ""
    if now is None:
        return f"read {hhmm(read_at)}"
    try:
        seconds = max(0, int((now - datetime.fromisoformat(read_at)).total_seconds()))
    except ValueError:
        return ""
    if seconds < 120:
        return f"read {seconds} s ago"
    if seconds < 7200:
        return f"read {seconds // 60} min ago"
    return f"read {seconds // 3600} h ago"


def _params_line(params: Mapping[str, Any]) -> str:
    shown = [f"`{esc(k)}={esc(v)}`" for k, v in params.items() if v is not None]
    return " ".join(shown) or "no params"


def step_line(step: StepView, who: Who = _plain_who) -> str:
    status = STATUS_WORDS.get(step.status, step.status.replace("_", " "))
    line = f"{step.icon} *{esc(step.key)}* {esc(step.title)} · _{esc(status)}_"
    if step.approvers:
        line += " · approved by " + ", ".join(who(a) for a in step.approvers)
    if step.status == "waiting" and step.progress:
        line += f" · {prose(step.progress)}"
    if step.not_needed and step.message:
        line += f": {prose(step.message)}"
    return line


def _chunks(lines: Sequence[str], limit: int) -> list[str]:
    """Join lines into as few texts of at most ``limit`` characters as fit."""
    out: list[str] = []
    current = ""
    for line in lines:
        line = truncate(line, limit, pointer="")
        if current and len(current) + 1 + len(line) > limit:
            out.append(current)
            current = line
        else:
            current = f"{current}\n{line}" if current else line
    if current:
        out.append(current)
    return out


def links_line(view: RunView) -> str:
    """The run's links as one mrkdwn line: incident, parent, what suggested it, runs after it."""
    parts = []
    if view.incident:
        parts.append(f"Incident {prose(view.incident)}")
    if view.parent:
        parts.append(f"follows on from `{esc(view.parent)}`")
    if view.suggested_by:
        parts.append(f"suggested by {prose(suggested_words(view.suggested_by))}")
    if view.children:
        parts.append("followed by " + ", ".join(
            f"`{esc(c.run_id)}` {esc(c.runbook)} ({esc(STATUS_WORDS.get(c.status, c.status))})"
            for c in view.children[:5]))
    return " · ".join(parts)


def run_card(view: RunView, *, who: Who = _plain_who, now: datetime | None = None) -> list[Block]:
    """The run card: title, params, owner and requester, status, links, and one line per step
    with its approvers."""
    status = STATUS_WORDS.get(view.status, view.status)
    blocks: list[Block] = [header(view.title + (" (dry run)" if view.dry_run else ""))]
    blocks += [section(t) for t in (agent_line(view.agent_request),) if t]
    people = [mrkdwn(f"*Owner*\n{who(view.owner or view.requester)}")]
    if view.handed_over:
        people.append(mrkdwn(f"*Requested by*\n{who(view.requester)}"))
    blocks.append({"type": "section", "fields": [
        mrkdwn(f"*Run*\n`{esc(view.run_id)}`"),
        mrkdwn(f"*Status*\n{esc(status)}"),
        *people,
        mrkdwn(f"*Runbook*\n`{esc(view.runbook)}`"),
    ]})
    blocks.append(context(truncate("Params: " + _params_line(view.params), LIMITS["context_text"])))
    links = links_line(view)
    if links:
        blocks.append(context(truncate(links, LIMITS["context_text"], pointer="")))
    lines = [f"{ICONS['skipped']} _{esc(s.line())}_" if isinstance(s, Skipped) else step_line(s, who)
             for s in collapse(view.steps)]
    lines += [f"· {esc(t)} · _not reached_" for t in view.pending_steps]
    if lines:
        blocks.append(divider())
        # several steps per section: a 60-step runbook stays far below the 50-block limit
        blocks += [section(text, pointer="") for text in _chunks(lines, 2900)]
    waiting = view.waiting_on
    if waiting is not None and view.status not in FINISHED:
        blocks.append(context(f"Waiting for: {waiting_text(waiting, now)}"))
    if view.outcome:
        outcome = dry_run_verdict(view).headline if view.dry_run else view.outcome
        blocks.append(section(f"*Outcome:* {prose(outcome)}"))
    for c in view.compensations[:5]:
        blocks.append(context(f"Still in place: {prose(c)}"))
    blocks.append(context("Plans, approvals and details are in the thread."))
    # only a runbook of well over a thousand steps comes near: then the export lists every one
    return limit_blocks(blocks, pointer=f"(`/runbook export {view.run_id}` lists every step)")


def card_text(view: RunView) -> str:
    """The notification text of a card (what Slack shows where blocks cannot be drawn)."""
    return truncate(f"{view.run_id} {esc(view.title)}: "
                    f"{STATUS_WORDS.get(view.status, view.status)}", 3000)


def button_value(run_id: str, step: str, plan_hash: str | None) -> str:
    import json

    return json.dumps({"r": run_id, "s": step, "h": plan_hash}, separators=(",", ":"))


def _plan_text(step: StepView, now: datetime | None) -> str:
    parts = []
    if step.summary:
        parts.append(f"*Plan:* {esc(step.summary)}")
    if step.changes:
        parts.append("```" + "\n".join(esc(c) for c in step.changes) + "```")
    elif step.summary:
        parts.append("_no change needed: the world is already as this step wants it_")
    if step.plan_hash and step.changes:
        parts.append(f"plan hash `{esc(step.plan_hash[:12])}`")
    return "\n".join(parts)


def _evidence(step: StepView, now: datetime | None) -> list[str]:
    lines = []
    for f in step.facts:
        when = ago(f.read_at, now)
        value = (slack_date(f.value) if isinstance(f.value, str) and _ISO_TIME.fullmatch(f.value)
                 else f"`{esc(_short(f.value))}`")
        lines.append(f"• {esc(f.subject)} {esc(f.name)}: {value}" + (f", {when}" if when else ""))
    for g in step.guards:
        mark = "✓" if g.get("ok") else "✗"
        lines.append(f"{mark} guard `{esc(g.get('expr', ''))}`"
                     + (f": {esc(g.get('message'))}" if not g.get("ok") and g.get("message") else ""))
    return lines


def _short(value: object) -> str:
    text = str(value)
    return text if len(text) <= 200 else text[:199] + ELLIPSIS


def approval_message(view: RunView, step: StepView, *, destructive: bool, now: datetime | None,
                     who: Who = _plain_who, decision: str | None = None) -> list[Block]:
    """An approval request: plan, guard evidence, and Approve / Reject, or the decision made."""
    if step.needs_confirmation and not step.needs_approval:
        title = f"*Confirm step `{esc(step.key)}`*: {esc(step.title)}"
    else:
        title = (f"*Approval needed for step `{esc(step.key)}`*: {esc(step.title)}"
                 + (" · :warning: *destructive*" if destructive else ""))
    if view.params.get("cluster"):  # one bot, several clusters: say which one the plan acts on
        title += f" · cluster `{esc(view.params['cluster'])}`"
    blocks: list[Block] = [section(title)]
    blocks += [section(t) for t in (agent_line(view.agent_request),
                                    agent_evidence(view.agent_request)) if t]
    if step.approval_text:
        blocks.append(section(f"_{esc(step.approval_text)}_"))
    plan = _plan_text(step, now)
    if plan:
        blocks.append(section(plan))
    evidence = _evidence(step, now)
    if evidence:
        blocks.append(section("*Evidence*\n" + "\n".join(evidence)))
    if held_text(step.blocked):  # a timed hold plans itself again: nobody needs to retry
        blocks.append(section(f":hourglass: *{esc(held_text(step.blocked))}* (interlock "
                              f"`{esc((step.blocked or {}).get('rule'))}`): "
                              f"{esc((step.blocked or {}).get('message'))}\nBreak glass, "
                              "`/runbook retry` or abort at any time."))
    elif step.blocked:
        blocks.append(section(f":no_entry: *Blocked by interlock `{esc(step.blocked.get('rule'))}`:* "
                              f"{esc(step.blocked.get('message'))}\nAn approval cannot override "
                              "it: fix the cause and `/runbook retry`, abort, or break glass."))
    if decision is not None:
        blocks.append(context(decision))
        return limit_blocks(blocks)
    if step.pending:
        blocks.append(context(waiting_text(step, now)))
    if step.blocked:
        return limit_blocks(blocks)
    value = button_value(view.run_id, step.key, step.plan_hash)
    if step.needs_confirmation and not step.needs_approval:
        elements = [button(text="Confirm done", action_id=ACTION_CONFIRM, value=value, style="primary")]
    else:
        summary = step.summary or step.title
        if step.changes:
            summary += ": " + "; ".join(step.changes)
        elements = [approve_button(action_id=ACTION_APPROVE, value=value, destructive=destructive,
                                   summary=summary),
                    button(text="Reject", action_id=ACTION_REJECT, value=value)]
    blocks.append(actions(elements, block_id=f"decide:{step.key}"[: LIMITS["block_id"]]))
    return limit_blocks(blocks)


def decision_line(step: StepView, *, who: Who = _plain_who, superseded: bool = False) -> str:
    """What replaces the buttons once a step is decided: who, and when."""
    if superseded:
        return ":arrows_counterclockwise: The plan changed before it applied; a new approval is asked below."
    votes = [v for v in step.votes if v.get("plan_hash") in (step.plan_hash, None)]
    rejected = [v for v in votes if v.get("kind") == "reject"]
    if rejected:
        v = rejected[-1]
        return (f":no_entry_sign: Rejected by {who(v['by'])} {hhmm(v.get('at'))}: "
                f"{esc(v.get('reason', ''))}")
    if step.status == "expired":
        return ":hourglass: The approval expired before anyone decided."
    if step.status == "aborted":
        return ":black_square_for_stop: The run was aborted before this step was decided."
    done = [v for v in votes if v.get("kind") in ("approve", "confirm", "break_glass")]
    if done:
        verb = {"approve": "Approved", "confirm": "Confirmed", "break_glass": "Break-glass"}
        return " · ".join(f":white_check_mark: {verb[str(v['kind'])]} by {who(v['by'])} "
                          f"{hhmm(v.get('at'))}" for v in done)
    return f"Decided: {esc(step.status.replace('_', ' '))}"


def step_reply(step: StepView, *, now: datetime | None = None) -> list[Block]:
    """A thread reply about one step: its plan when it applies, and what came of it."""
    icon = step.icon
    if step.status == "failed":
        text = f"{icon} *{esc(step.key)}* failed: {prose(step.error or step.message)}"
    elif step.status == "skipped":
        text = f"{icon} *{esc(step.key)}* {esc(step.title)}: not needed" + (
            f", {prose(step.message)}" if step.message else "")
    else:
        text = f"{icon} *{esc(step.key)}* {esc(step.title)}" + (
            f": {prose(step.message)}" if step.message else "")
    blocks = [section(text)]
    if step.status == "skipped" and step.details:  # the thread is where the expression may show
        blocks.append(context(truncate("; ".join(f"`{esc(d)}`" for d in step.details[:1]),
                                       LIMITS["context_text"], pointer="")))
    plan = _plan_text(step, now)
    if plan and step.status in ("succeeded", "failed") and step.changes:
        blocks.append(section(plan))
    return blocks


def progress_text(step: StepView) -> str:
    line = f"⏳ *{esc(step.key)}* {esc(step.title)}: {prose(step.progress or 'waiting')}"
    if step.status != "waiting":
        line = (f"{step.icon} *{esc(step.key)}* {esc(step.title)}: "
                f"{prose(step.progress or step.status)} (done)")
    return line


def final_summary(view: RunView, *, who: Who = _plain_who) -> list[Block]:
    """The last reply in a run's thread: how it ended and what is still in place."""
    status = STATUS_WORDS.get(view.status, view.status)
    icon = {"succeeded": ":white_check_mark:", "failed": ":x:", "aborted": ":black_square_for_stop:",
            "partial": ":warning:"}
    if view.dry_run and view.status in ("succeeded", "failed"):
        verdict = dry_run_verdict(view)
        blocks = [section(f"*Dry run `{esc(view.run_id)}`*: {prose(verdict.headline)}; nothing was "
                          "changed"),
                  section("\n".join(f"• `{esc(v.key)}` {prose(v.text)}" for v in verdict.steps
                                     if v.kind != "read")[:2900] or "every step only read")]
    else:
        blocks = [section(f"{icon.get(view.status, '')} *Run `{esc(view.run_id)}` {esc(status)}*: "
                          f"{prose(view.outcome)}")]
    if view.compensations:
        blocks.append(section("*Still in place:*\n" + "\n".join(f"• {prose(c)}" for c in view.compensations)))
    else:
        blocks.append(context("Nothing was left in place."))
    return blocks


def runs_list(views: Sequence[RunView], *, who: Who = _plain_who,
              now: datetime | None = None) -> list[Block]:
    if not views:
        return [section("No active runs in this channel. `/runbook run NAME key=value` starts one.")]
    lines = []
    for v in views:
        waiting = v.waiting_on
        line = (f"`{esc(v.run_id)}` {esc(v.title)} · _{esc(STATUS_WORDS.get(v.status, v.status))}_ · "
                f"{who(v.owner or v.requester)}")
        if v.incident:
            line += f" · {prose(v.incident)}"
        if waiting is not None:
            line += f" · {esc(waiting.key)}: {waiting_text(waiting, now)}"
        lines.append(line)
    return limit_blocks([section(t, pointer="") for t in _chunks(lines, 2900)])


# -- modals -------------------------------------------------------------------------------------


def _param_element(name: str, spec: Param, initial: str | None) -> dict[str, Any]:
    if spec.type in ("enum", "boolean"):
        choices = list(spec.values or ()) if spec.type == "enum" else ["true", "false"]
        options = [{"text": plain(c, 75), "value": c[:150]} for c in choices[:100]]
        element: dict[str, Any] = {"type": "static_select", "action_id": "value",
                                   "placeholder": plain(f"choose {name}", 150), "options": options}
        chosen = next((o for o in options if o["value"] == initial), None)
        if chosen is not None:
            element["initial_option"] = chosen
        return element
    element = {"type": "plain_text_input", "action_id": "value"}
    if initial:
        element["initial_value"] = initial[:3000]
    return element


def param_block_id(name: str) -> str:
    return f"param:{name}"


def params_modal(runbook: Runbook, *, values: Mapping[str, Any], errors: Mapping[str, str],
                 metadata: str) -> dict[str, Any]:
    """A modal with one input per runbook param, prefilled with what was typed or the default."""
    blocks: list[Block] = [section(f"*{esc(runbook.metadata.title)}*"
                                   + (f"\n{esc(runbook.metadata.description)}"
                                      if runbook.metadata.description else ""))]
    for name, spec in runbook.spec.params.items():
        raw = values.get(name, spec.default)
        initial = None if raw is None else str(raw).lower() if isinstance(raw, bool) else str(raw)
        hint = spec.description or spec.type
        if name in errors:
            hint = f"{errors[name]}" + (f" ({spec.description})" if spec.description else "")
        block: Block = {"type": "input", "block_id": param_block_id(name),
                        "label": plain(name, LIMITS["input_label"]),
                        "element": _param_element(name, spec, initial),
                        "optional": not spec.required,
                        "hint": plain(hint, LIMITS["input_hint"])}
        blocks.append(block)
    return {"type": "modal", "callback_id": VIEW_RUN,
            "title": plain("Run a runbook", LIMITS["modal_title"]),
            "submit": plain("Start run", LIMITS["modal_submit"]),
            "close": plain("Cancel", LIMITS["modal_close"]),
            "private_metadata": metadata,
            "blocks": blocks[: LIMITS["modal_blocks"]]}


REASON_BLOCK: Final = "reason"


def reject_modal(*, step_title: str, metadata: str) -> dict[str, Any]:
    """Reject asks why: the reason is recorded in the audit and shown in the thread."""
    return {"type": "modal", "callback_id": VIEW_REJECT,
            "title": plain("Reject step", LIMITS["modal_title"]),
            "submit": plain("Reject", LIMITS["modal_submit"]),
            "close": plain("Cancel", LIMITS["modal_close"]),
            "private_metadata": metadata,
            "blocks": [section(f"Reject *{esc(step_title)}*? The run stops and nothing of this "
                               "step is applied."),
                       {"type": "input", "block_id": REASON_BLOCK, "label": plain("Reason"),
                        "element": {"type": "plain_text_input", "action_id": "value",
                                    "multiline": True},
                        "hint": plain("At least 8 characters; recorded in the audit log.")}]}


# -- runbooks -----------------------------------------------------------------------------------


def runbook_list(rows: Sequence[tuple[str, str, int, int]]) -> list[Block]:
    """``/runbook list``: (name, title, steps, destructive steps) per runbook."""
    if not rows:
        return [section("No runbooks are installed.")]
    lines = [f"• `{esc(n)}` {esc(t)} · {s} step{'s' if s != 1 else ''}"
             + (f", {d} destructive" if d else "") for n, t, s, d in rows]
    return limit_blocks([section(t, pointer="") for t in _chunks(lines, 2900)]
                        + [context("`/runbook show NAME` for its steps, `/runbook run NAME` to start")])


def runbook_blocks(runbook: Runbook, *, destructive: Callable[[str | None], bool]) -> list[Block]:
    """``/runbook show NAME``: params, then each step with whether it needs approval."""
    md = runbook.metadata
    blocks: list[Block] = [header(md.title), context(f"`{esc(md.name)}`"
                                                     + (f" · {esc(md.owner)}" if md.owner else ""))]
    if md.description:
        blocks.append(section(esc(" ".join(md.description.split()))))
    if runbook.spec.params:
        lines = []
        for name, p in runbook.spec.params.items():
            bits = [p.type, "required" if p.required else "optional"]
            if p.default is not None:
                bits.append(f"default `{esc(p.default)}`")
            lines.append(f"• `{esc(name)}` ({', '.join(bits)})"
                         + (f": {esc(p.description)}" if p.description else ""))
        blocks.append(section("*Params*\n" + "\n".join(lines)))
    lines = []
    for n, step in enumerate(runbook.spec.steps, 1):
        flag = " · :warning: destructive, needs approval" if destructive(step.action) else (
            " · needs approval" if step.approval and step.approval.required else "")
        kind = f"`{esc(step.action)}`" if step.action else "manual"
        lines.append(f"{n}. *{esc(step.id)}* {esc(step.title)} ({kind}){flag}")
    blocks += [section(t, pointer="") for t in _chunks(["*Steps*", *lines], 2900)]
    return limit_blocks(blocks)


def plan_needs_thread(step: StepView) -> bool:
    """True when a plan is too long for one section, so the whole of it goes in its own reply."""
    return len(_plan_text(step, None)) > LIMITS["section_text"]


def full_plan(step: StepView) -> list[Block]:
    """Every change of a long plan, over as many sections as it takes (up to a message's limit)."""
    lines = [f"*Full plan of `{esc(step.key)}`* ({len(step.changes)} changes)"]
    lines += [f"`{esc(c)}`" for c in step.changes]
    return limit_blocks([section(t, pointer="") for t in _chunks(lines, 2900)],
                        pointer="(the audit log and the export have every change)")
