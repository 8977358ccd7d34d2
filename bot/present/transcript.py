"""Post-incident transcripts of a run: one platform-free model, rendered as Markdown, HTML or JSON.

A postmortem needs the whole story of a run in one document that can be trusted: what was asked
for, what each step planned to change and on what evidence, who approved which plan (by hash), the
API calls made, what stayed in place, and whether the audit chain behind all of it verifies. The
model (``Transcript``) is built from the run's state, its audit events, the chain's stored head and
the verify verdict, merged by time with the human conversation of the run's Slack thread when the
caller has it. Front-ends and the CLI only fetch those inputs; everything shown is decided here.

Rendering:

- Markdown and HTML come from the Jinja2 templates ``transcript.md.j2`` and ``transcript.html.j2``
  in ``templates/`` (``bot.present.templates``: where they are found, strict undefined, HTML
  autoescape, and the ``md`` filter that escapes every untrusted value in Markdown).
- JSON is the model plus every audit event exactly as stored, in the export shape
  ``{"run": {"run_id": ...}, "events": [...], "head": {"seq", "hash"}}`` that
  ``runbook-bot audit verify --file`` checks offline (schema: docs/transcript.schema.json).

Times are ISO-8601 in UTC unless a zone (an IANA name such as ``Europe/Paris``) is given; the audit
events themselves are never converted, since their stored text is what the chain hashes.
"""

from __future__ import annotations

import gc
import heapq
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from bot.engine.events import EventType
from bot.engine.runstate import RunState
from bot.errors import ConfigError
from bot.present.chart import Row, timeline_svg
from bot.present.clock import Clock, slack_time
from bot.present.decision_summary import DecisionSummary, build_summary
from bot.present.dryrun import dry_run_verdict
from bot.present.events import describe
from bot.present.recovery import Stage, recovery_of, recovery_svg
from bot.present.templates import environment, when_text, zone
from bot.present.views import params_as_written, run_view, stored_runbook
from bot.present.words import Worded
from bot.store.audit import HMAC_MODE, Event, Verdict
from bot.store.db import Database
from bot.store.integrity import INTACT, document_seal, sealing_key, verdict_status, verify_run

FORMAT = "runbook-bot/transcript"
VERSION = 1
FORMATS = ("md", "html", "json")
TEMPLATES = {"md": "transcript.md.j2", "html": "transcript.html.j2"}


# -- the model ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunSummary:
    run_id: str
    runbook: str
    title: str
    runbook_file: str
    requester: str
    cluster: str | None
    params: dict[str, Any]  # the normal form, as run.created records it (bot.runbook.params)
    params_written: dict[str, Any]  # the same as people write them (a duration is 6m)
    dry_run: bool
    status: str
    outcome: str
    created_at: str
    started_at: str | None
    finished_at: str | None
    duration_seconds: float | None
    origin: dict[str, Any]
    # provenance, as the audit chain records it (run.linked, run.handed_over)
    owner: str = ""
    parent: str | None = None
    incident: str | None = None
    suggested_by: str | None = None


@dataclass(frozen=True)
class ContextRecord:
    """What the run acted on and as whom on one cluster (its ``run.context`` event ``seq``)."""

    seq: int
    at: str
    cluster: str
    region: str
    kube_context: str
    api_server: str
    account: str
    caller_arn: str
    writes_as: dict[str, Any]
    bot_version: str
    runbook_digest: str
    problems: list[str]


@dataclass(frozen=True)
class Fact:
    subject: str
    name: str
    value: Any
    read_at: str | None


@dataclass(frozen=True)
class PlanRecord:
    seq: int | None  # the step.planned event that recorded it (None: known only from the state)
    at: str | None
    hash: str | None
    action: str
    summary: str
    params: dict[str, Any]
    changes: list[dict[str, Any]]
    facts: list[Fact]


@dataclass(frozen=True)
class PlanRef:
    """One recording of a step's plan (its full text is in the step.planned event ``seq``)."""

    seq: int
    at: str
    hash: str | None
    summary: str


@dataclass(frozen=True)
class Guard:
    seq: int
    at: str
    expr: str
    ok: bool
    message: str
    words: str = ""  # what the guard makes sure of, as its runbook says it


@dataclass(frozen=True)
class Decision:
    """A person's (or the policy's) decision about a step, bound to the plan hash it covered."""

    seq: int
    at: str
    by: str
    kind: str  # requested, approved, confirmed, rejected, expired, invalidated, break_glass, ...
    plan_hash: str | None
    detail: str


@dataclass(frozen=True)
class Call:
    seq: int
    at: str
    service: str
    operation: str
    targets: list[str]
    outcome: str
    request_id: str


@dataclass(frozen=True)
class Problem:
    seq: int
    at: str
    kind: str  # failed, retrying, blocked, refused
    text: str


@dataclass(frozen=True)
class StepRecord:
    key: str
    title: str
    status: str
    started_at: str | None
    finished_at: str | None
    plan: PlanRecord | None  # the last plan, the one applied (or awaiting approval)
    plans: list[PlanRef]  # every plan recorded for the step, oldest first
    guards: list[Guard]
    decisions: list[Decision]
    calls: list[Call]
    result: Any
    outputs: dict[str, Any]
    message: str
    error: str
    problems: list[Problem]
    skipped_because: str = ""  # a skipped step: why (it never started)
    details: list[str] = field(default_factory=list)  # the expressions behind its words


@dataclass(frozen=True)
class Entry:
    """One line of the timeline: an audit event or a message of the run's Slack thread."""

    at: str
    source: str  # audit, slack
    actor: str
    kind: str  # the event type, or "message"
    step: str | None
    text: str
    seq: int | None = None
    user: str | None = None  # the Slack user id of a message
    code: str = ""  # the expression an event's words stand for


@dataclass(frozen=True)
class Integrity:
    verified: bool
    algorithm: str  # HMAC-SHA256 or SHA-256
    events: int
    head_seq: int
    head_hash: str | None
    first_bad_seq: int | None
    reason: str
    head_mac: str | None = None  # the head's signature under the audit key
    key_id: str | None = None  # the key the chain records it was written with
    notes: tuple[str, ...] = ()
    # intact, broken, or unverified (written with a key the exporter was not given)
    status: str = INTACT

    @property
    def published(self) -> str:
        """The head as ``SEQ:HASH``, what ``audit verify --head`` takes."""
        return f"{self.head_seq}:{self.head_hash or '-'}"


@dataclass(frozen=True)
class Transcript:
    exported_at: str
    timezone: str
    run: RunSummary
    steps: list[StepRecord]
    compensations: list[str]
    timeline: list[Entry]
    integrity: Integrity
    summary: DecisionSummary
    events: Sequence[Event] = field(repr=False)
    seal_key: bytes | None = field(default=None, repr=False)
    context: list[ContextRecord] = field(default_factory=list)
    recovery: list[Stage] = field(default_factory=list)  # time to recovery (present/recovery.py)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document as plain data."""
        data: dict[str, Any] = json.loads(self.to_json())
        return data

    def to_json(self) -> str:
        """The JSON document: one member per line and one array element per line.

        Each element is written by the C encoder in one go (dataclasses through ``default``), so
        a run of many thousands of events exports quickly and still diffs and greps line by line.
        """
        doc: dict[str, Any] = {
            "format": FORMAT, "version": VERSION, "exported_at": self.exported_at,
            "timezone": self.timezone, "run": self.run, "context": self.context,
            "summary": self.summary, "steps": self.steps,
            "compensations": self.compensations, "timeline": self.timeline,
            "integrity": self.integrity, "events": self.events,
            "head": {"seq": self.integrity.head_seq, "hash": self.integrity.head_hash,
                     "mac": self.integrity.head_mac},
        }
        if self.recovery:  # only runs that record their recovery: older exports read as before
            doc["recovery"] = self.recovery
        dumps = json.JSONEncoder(ensure_ascii=False, default=_default).encode
        members = []
        for key, value in doc.items():
            if key == "events" and value:
                body = ",\n  ".join(_event_json(e, dumps) for e in value)
                members.append(f"{dumps(key)}: [\n  {body}\n ]")
            elif isinstance(value, list | tuple) and value:
                body = ",\n  ".join(dumps(v) for v in value)
                members.append(f"{dumps(key)}: [\n  {body}\n ]")
            else:
                members.append(f"{dumps(key)}: {dumps(value)}")
        # the seal covers every member: it is computed over the document as a reader parses it
        unsealed = "{\n " + ",\n ".join(members) + "\n}\n"
        seal = document_seal(json.loads(unsealed), self.seal_key)
        members.append(f'"seal": {dumps(seal)}')
        return "{\n " + ",\n ".join(members) + "\n}\n"


def _event_json(e: Event, dumps: Any) -> str:
    """An event in the export shape; the payload is the text the store hashed, not re-encoded."""
    payload = e.payload_text or dumps(dict(e.payload))
    return (f'{{"seq": {e.seq}, "ts": {dumps(e.ts)}, "actor": {dumps(e.actor)}, '
            f'"type": {dumps(e.type)}, "payload": {payload}, "prev_hash": {dumps(e.prev_hash)}, '
            f'"hash": {dumps(e.hash)}}}')


def _default(obj: Any) -> Any:
    if isinstance(obj, Event):
        return obj.to_dict()
    if hasattr(obj, "__dataclass_fields__"):
        return obj.__dict__
    return str(obj)


# -- building -------------------------------------------------------------------------------------

class _StepLog:
    """What the audit events say about one step, gathered in one pass over the chain."""

    def __init__(self) -> None:
        self.plans: list[tuple[PlanRef, Mapping[str, Any]]] = []
        self.guards: list[Guard] = []
        self.decisions: list[Decision] = []
        self.calls: list[Call] = []
        self.problems: list[Problem] = []
        self.skipped = ""
        self.last: Event | None = None


def _facts(raw: Iterable[Mapping[str, Any]], clock: Clock) -> list[Fact]:
    return [Fact(str(f.get("subject", "")), str(f.get("name", "")), f.get("value"),
                 clock.opt(f.get("read_at"))) for f in raw]


def _plan(raw: Mapping[str, Any], *, seq: int | None, at: str | None, clock: Clock) -> PlanRecord:
    return PlanRecord(seq=seq, at=at, hash=raw.get("hash"), action=str(raw.get("action", "")),
                      summary=str(raw.get("summary", "")), params=dict(raw.get("params") or {}),
                      changes=[dict(c) for c in raw.get("changes") or ()],
                      facts=_facts(raw.get("facts") or (), clock))


_DECISIONS: dict[str, str] = {
    EventType.APPROVAL_REQUESTED: "requested", EventType.CONFIRMATION_REQUESTED: "requested",
    EventType.APPROVAL_GRANTED: "approved", EventType.APPROVAL_REJECTED: "rejected",
    EventType.APPROVAL_EXPIRED: "expired", EventType.APPROVAL_INVALIDATED: "invalidated",
    EventType.STEP_CONFIRMED: "confirmed", EventType.INTERLOCK_OVERRIDE_REQUESTED: "break_glass",
    EventType.INTERLOCK_OVERRIDE_GRANTED: "override_granted",
    EventType.INTERLOCK_OVERRIDDEN: "overridden",
}


_PROBLEMS: dict[str, str] = {
    EventType.STEP_FAILED: "failed", EventType.STEP_RETRYING: "retrying",
    EventType.INTERLOCK_BLOCKED: "blocked", EventType.COMMAND_REFUSED: "refused"}


def _gather(ev: Event, log: _StepLog, at: str, clock: Clock) -> None:
    p, t = ev.payload, ev.type
    log.last = ev
    if t == EventType.STEP_PLANNED:
        plan = p.get("plan") or {}
        ref = PlanRef(ev.seq, at, p.get("plan_hash") or plan.get("hash"),
                      str(p.get("summary") or plan.get("summary") or ""))
        log.plans.append((ref, plan))
    elif t in (EventType.GUARD_PASSED, EventType.GUARD_FAILED):
        log.guards.append(Guard(ev.seq, at, str(p.get("expr", "")), t == EventType.GUARD_PASSED,
                                str(p.get("message", ""))))
    elif t in _DECISIONS:
        plan_hash = p.get("plan_hash") or p.get("new_hash")
        log.decisions.append(Decision(ev.seq, at, ev.actor, _DECISIONS[t], plan_hash, describe(ev)))
    elif t in _PROBLEMS:
        log.problems.append(Problem(ev.seq, at, _PROBLEMS[t], describe(ev)))
    elif t == EventType.STEP_SKIPPED:
        log.skipped = str(p.get("reason", "")) or "skipped"
    # applies and polls record their calls, and so do failures and refusals (the calls that failed)
    calls = p.get("calls")
    if isinstance(calls, list):
        for c in calls:
            if isinstance(c, Mapping):
                log.calls.append(Call(ev.seq, at, str(c.get("service", "")),
                                      str(c.get("operation", "")),
                                      [str(x) for x in c.get("targets") or ()],
                                      str(c.get("outcome", "")), str(c.get("request_id", ""))))


@dataclass
class _Record:
    """What one pass over a run's audit events gathers for its transcript."""
    links: dict[str, Any]  # owner, parent, incident, suggested_by
    logs: dict[str, _StepLog] = field(default_factory=dict)
    audit: list[tuple[datetime, int, Entry]] = field(default_factory=list)
    context: list[ContextRecord] = field(default_factory=list)
    duration: float | None = None


def _read(events: Sequence[Event], owner: str, clock: Clock, said: Worded) -> _Record:
    rec = _Record(links={"owner": owner})
    logs, audit, links = rec.logs, rec.audit, rec.links
    for ev in events:
        at = clock.convert(ev.ts)
        if ev.type == EventType.RUN_LINKED:
            links |= {k: ev.payload.get(k) for k in ("parent", "incident", "suggested_by")}
        elif ev.type == EventType.RUN_HANDED_OVER:
            links["owner"] = str(ev.payload.get("to") or links["owner"])
        elif ev.type == EventType.RUN_CONTEXT:
            rec.context.append(_context(ev, at))
        step = ev.payload.get("step")
        key = step if isinstance(step, str) else None
        if key is not None:
            log = logs.get(key)
            if log is None:
                log = logs[key] = _StepLog()
            _gather(ev, log, at, clock)
        if ev.type == EventType.RUN_FINISHED:
            d = ev.payload.get("duration_seconds")
            rec.duration = float(d) if isinstance(d, int | float) else None
        text, code = said.timeline(ev.type, ev.payload) or (describe(ev), "")
        audit.append((_instant(ev.ts), 0, Entry(at=at, source="audit", actor=ev.actor,
                                                 kind=ev.type, step=key, text=text,
                                                 seq=ev.seq, code=code)))
    return rec


def _said(thread: Sequence[Mapping[str, Any]], clock: Clock) -> list[tuple[datetime, int, Entry]]:
    """The Slack thread's messages, in time order."""
    said: list[tuple[datetime, int, Entry]] = []
    for m in thread:
        when = slack_time(str(m.get("ts", "")))
        said.append((when, 1, Entry(
            at=when.astimezone(clock.tz).isoformat(), source="slack",
            actor=str(m.get("name") or m.get("user") or ""), kind="message", step=None,
            text=str(m.get("text", "")), user=str(m["user"]) if m.get("user") else None)))
    said.sort(key=lambda x: x[0])
    return said


def build(*, state: RunState, events: Sequence[Event], head: tuple[int, str | None],
          verdict: Verdict, keyed: bool, thread: Sequence[Mapping[str, Any]] = (),
          tz: str | None = None, exported_at: datetime | None = None,
          head_mac: str | None = None, seal_key: bytes | None = None) -> Transcript:
    """The transcript of a run from what the store holds and what verify said about it."""
    clock = Clock(zone(tz))
    said = Worded(state, stored_runbook(state))  # conditions in the runbook's words
    rec = _read(events, state.requester, clock, said)
    logs, duration, links, context = rec.logs, rec.duration, rec.links, rec.context
    # a merge, not a sort: events keep their chain order even if clocks disagreed, and a message
    # lands after the events of its instant
    timeline = heapq.merge(rec.audit, _said(thread, clock), key=lambda x: (x[0], x[1]))
    if duration is None and state.started_at and state.finished_at:
        duration = round((_instant(state.finished_at) - _instant(state.started_at)).total_seconds(), 3)
    steps = [_step(s.key, logs.pop(s.key) if s.key in logs else _StepLog(), state, clock)
             for s in state.steps.values()]
    # steps a goto removed from the state are still in the record
    steps += [_step(k, log, state, clock) for k, log in logs.items()]
    steps = [said.record(s) for s in steps]
    params = dict(state.params)
    # the cluster the run named, else the one it was resolved to (the only one configured)
    cluster = params.get("cluster") or (context[0].cluster if context else None)
    run = RunSummary(
        run_id=state.run_id, runbook=state.runbook, title=state.title,
        runbook_file=state.runbook_file, requester=state.requester,
        cluster=str(cluster) if cluster is not None else None, params=params,
        params_written=params_as_written(state),
        dry_run=state.dry_run, status=str(state.status), outcome=_outcome(state),
        created_at=clock.convert(state.created_at), started_at=clock.opt(state.started_at),
        finished_at=clock.opt(state.finished_at), duration_seconds=duration,
        origin=dict(state.origin), owner=links["owner"], parent=links.get("parent"),
        incident=links.get("incident"), suggested_by=links.get("suggested_by"))
    # the algorithm the chain records it was written with, else the one it was verified with
    hmac_chain = verdict.mode == HMAC_MODE if verdict.mode is not None else keyed
    integrity = Integrity(verified=verdict.ok, algorithm="HMAC-SHA256" if hmac_chain else "SHA-256",
                          events=len(events), head_seq=head[0], head_hash=head[1],
                          first_bad_seq=verdict.first_bad_seq, reason=verdict.reason,
                          head_mac=head_mac, key_id=verdict.key_id, notes=verdict.notes,
                          status=verdict_status(verdict))
    exported = (exported_at or datetime.now(UTC)).astimezone(clock.tz).isoformat()
    summary = build_summary(events=events, steps=steps, at=clock.convert, status=run.status,
                            outcome=run.outcome, dry_run=run.dry_run, requester=run.requester,
                            compensations=state.compensations,
                            now=run.finished_at or exported)
    return Transcript(exported_at=exported, timezone=str(tz or "UTC"), run=run, steps=steps,
                      compensations=list(state.compensations),
                      timeline=[e for _, _, e in timeline], integrity=integrity, summary=summary,
                      events=events, seal_key=seal_key, context=context,
                      recovery=[replace(x, at=clock.convert(x.at)) for x in recovery_of(events)])


def _context(ev: Event, at: str) -> ContextRecord:
    p = ev.payload
    return ContextRecord(
        seq=ev.seq, at=at, cluster=str(p.get("cluster", "")), region=str(p.get("region", "")),
        kube_context=str(p.get("kube_context", "")), api_server=str(p.get("api_server", "")),
        account=str(p.get("account", "")), caller_arn=str(p.get("caller_arn", "")),
        writes_as=dict(p.get("writes_as") or {}), bot_version=str(p.get("bot_version", "")),
        runbook_digest=str(p.get("runbook_digest", "")),
        problems=[str(x) for x in p.get("problems") or ()])


def _outcome(state: RunState) -> str:
    """How the run ended; for a finished dry run, what a real run would do."""
    if state.dry_run and state.finished_at:
        return dry_run_verdict(run_view(state)).headline
    return state.outcome


@lru_cache(maxsize=4096)
def _instant(ts: str) -> datetime:
    try:
        when = datetime.fromisoformat(ts)
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _step(key: str, log: _StepLog, state: RunState, clock: Clock) -> StepRecord:
    s = state.steps.get(key)
    refs = [ref for ref, _ in log.plans]
    last: PlanRecord | None = None
    if log.plans:
        ref, raw = log.plans[-1]
        last = _plan(dict(raw) | {"hash": ref.hash}, seq=ref.seq, at=ref.at, clock=clock)
    if s is None:  # known only from the events
        status = log.last.type.split(".", 1)[1] if log.last is not None else "unknown"
        return StepRecord(key=key, title=key, status=f"removed after {status}", started_at=None,
                          finished_at=None, plan=last, plans=refs, guards=log.guards,
                          decisions=log.decisions, calls=log.calls, result=None, outputs={},
                          message="", error="", problems=log.problems)
    plan = last
    if s.plan is not None:  # the latest reading of the world, recorded under the same hash
        recorded = next((r for r in reversed(refs) if r.hash == s.plan_hash), None)
        plan = _plan(s.plan | {"hash": s.plan_hash}, seq=recorded.seq if recorded else None,
                     at=recorded.at if recorded else None, clock=clock)
    return StepRecord(key=key, title=s.title, status=str(s.status),
                      started_at=clock.opt(s.started_at), finished_at=clock.opt(s.finished_at),
                      plan=plan, plans=refs, guards=log.guards, decisions=log.decisions,
                      calls=log.calls, result=s.result, outputs=dict(s.outputs), message=s.message,
                      error=s.error, problems=log.problems, skipped_because=log.skipped)


# -- rendering ------------------------------------------------------------------------------------

def render(t: Transcript, fmt: str) -> str:
    """The transcript as ``md``, ``html`` or ``json`` text."""
    if fmt == "json":
        return t.to_json()
    if fmt not in TEMPLATES:
        raise ConfigError(f"unknown transcript format {fmt!r}: choose one of {', '.join(FORMATS)}")
    chart = timeline_svg(
        [Row(s.key, s.title, s.status, s.started_at, s.finished_at) for s in t.steps], t.summary,
        start=t.run.started_at or t.run.created_at, end=t.run.finished_at or t.exported_at,
        label=lambda when: when_text(when, t.timezone))
    recovery = recovery_svg(t.recovery, label=lambda when: when_text(when, t.timezone))
    return environment().get_template(TEMPLATES[fmt]).render(t=t, timezone=t.timezone, chart=chart,
                                                             recovery_chart=recovery)


@contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cyclic collector while a transcript is built and rendered.

    An export creates a few hundred thousand short-lived, acyclic objects (events, rows, strings);
    left on, the collector walks the whole heap again and again and takes about as long as the
    export itself. Reference counting frees everything; the collector resumes afterwards.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def export(store: Database, run_id: str, *, fmt: str, tz: str | None = None,
           thread: Sequence[Mapping[str, Any]] = (), exported_at: datetime | None = None) -> str:
    """The rendered transcript of a stored run, its audit chain verified on the way."""
    return export_verified(store, run_id, fmt=fmt, tz=tz, thread=thread,
                           exported_at=exported_at)[0]


def export_verified(store: Database, run_id: str, *, fmt: str, tz: str | None = None,
                    thread: Sequence[Mapping[str, Any]] = (),
                    exported_at: datetime | None = None) -> tuple[str, Verdict]:
    """The rendered transcript of a stored run and the verdict on its chain it states."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown transcript format {fmt!r}: choose one of {', '.join(FORMATS)}")
    zone(tz)  # an unknown zone fails before any work
    # the people's side of the Slack thread enters the record here: redacted like what they type
    thread = store.redact([dict(m) for m in thread])
    with _no_gc():
        state = store.load(run_id)
        seq, hash_, mac = store.signed_head(run_id)
        events = store.events(run_id)
        verdict = verify_run(store, run_id, key=store.keyring)
        t = build(state=state, events=events, head=(seq, hash_), verdict=verdict,
                  keyed=bool(store.key), thread=thread, tz=tz, exported_at=exported_at,
                  head_mac=mac, seal_key=sealing_key(verdict, store.keyring))
        return render(t, fmt), verdict
