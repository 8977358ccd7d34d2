"""The terminal as the bot's client: ``run``, the decisions, ``follow``, ``status``, ``runs``,
``export`` and ``audit verify`` through its API when a server is configured (``server.url``,
``RUNBOOK_BOT_SERVER`` or ``--server URL``).

The server holds the powers (the database, the audit key, the cloud and cluster credentials); the
terminal holds a bearer token and prints. A decision's body is the verb table's values
(``bot.engine.verbs``, gathered by ``bot.cli.grammar``) without the run id; the server decides who
the token is, so ``--as`` is refused here. Runs are printed as the terminal prints them in local
mode: the run the API returns is rebuilt (``state_of``) and each event of the events stream is
laid out by ``bot.present.events.live_lines``, ``status`` and ``runs`` by ``bot.present.console``.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot.cli.client import ApiClient
    from bot.config import ServerConfig, Settings
    from bot.engine.runstate import RunState, StepState
    from bot.present.views import RunView

SERVER_HELP = ("the bot's API (https://...): this command goes through it, with your token "
               "(default: server.url in the config, or $RUNBOOK_BOT_SERVER)")
# after these, a run waits for people: `run` stops following and says how to carry it on
WAITS = frozenset({"approval.requested", "confirmation.requested", "interlock.blocked"})


def add_server_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server", metavar="URL", help=SERVER_HELP)


def server_of(args: argparse.Namespace, settings: Settings) -> ServerConfig | None:
    """The server this command goes through, or None for local mode."""
    from bot.config import server_at

    url = getattr(args, "server", None)
    if url:
        return server_at(url, settings.server)
    return settings.server


def client(server: ServerConfig) -> ApiClient:
    from bot.cli.client import ApiClient

    return ApiClient(server)


def no_impersonation(args: argparse.Namespace) -> None:
    from bot.errors import PolicyError

    if getattr(args, "as_user", None):
        raise PolicyError("--as is refused with a server: the server knows you by your token")


# -- runs as the API gives them ------------------------------------------------------------------

def view_of(raw: Mapping[str, Any]) -> RunView:
    """A ``RunView`` from its JSON (``dataclasses.asdict`` of one); unknown members ignored."""
    from bot.present.views import ChildView, FactView, RunView, StepView

    def build(cls: Any, data: Mapping[str, Any]) -> Any:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    steps = tuple(build(StepView, {
        **s, "approvers": tuple(s.get("approvers") or ()), "changes": tuple(s.get("changes") or ()),
        "facts": tuple(build(FactView, f) for f in s.get("facts") or ()),
        "guards": tuple(s.get("guards") or ()), "groups": tuple(s.get("groups") or ()),
        "votes": tuple(s.get("votes") or ()), "guard_words": tuple(s.get("guard_words") or ()),
        "details": tuple(s.get("details") or ())}) for s in raw.get("steps") or ())
    return build(RunView, {
        **raw, "compensations": tuple(raw.get("compensations") or ()), "steps": steps,
        "not_reached": tuple(tuple(x) for x in raw.get("not_reached") or ()),
        "children": tuple(build(ChildView, c) for c in raw.get("children") or ()),
        "params": dict(raw.get("params") or {})})


def _change(line: str) -> dict[str, Any]:
    """A change whose line (``present.views._change_line``) reads as ``line`` again."""
    op, kind, target = [*line.split(" ", 2), "", ""][:3]
    return {"operation": op, "target_kind": kind, "target": target}


def _step_of(i: int, s: Any) -> StepState:
    from bot.engine.runstate import StepState, Vote
    from bot.engine.state import StepStatus

    plan = None if s.plan_hash is None and not (s.summary or s.changes) else {
        "summary": s.summary, "changes": [_change(c) for c in s.changes], "action": s.action,
        "facts": [f.__dict__ for f in s.facts]}
    return StepState(
        key=s.key, step_id=s.key.split("[")[0], position=i, action=s.action,
        destructive=s.destructive, status=StepStatus(s.status), title=s.title, plan=plan,
        plan_hash=s.plan_hash, guards=list(s.guards), needs_approval=s.needs_approval,
        needs_confirmation=s.needs_confirmation, approval_text=s.approval_text,
        min_approvers=s.min_approvers, groups=list(s.groups), expires_at=s.expires_at,
        votes=[Vote(**{k: v for k, v in dict(x).items() if k in {f.name for f in fields(Vote)}})
               for x in s.votes],
        blocked=dict(s.blocked) if s.blocked else None, result=s.result, message=s.message,
        error=s.error, progress=s.progress, next_check_at=s.next_check_at)


def state_of(view: RunView) -> RunState:
    """The run as far as the terminal's printer reads it, from its view."""
    from bot.engine.runstate import RunState
    from bot.engine.state import RunStatus

    return RunState(
        run_id=view.run_id, runbook=view.runbook, runbook_text="", runbook_file="",
        title=view.title, params=dict(view.params), requester=view.requester,
        created_at=view.created_at, dry_run=view.dry_run, status=RunStatus(view.status),
        owner=view.owner, parent=view.parent, incident=view.incident,
        suggested_by=view.suggested_by, started_at=view.started_at,
        finished_at=view.finished_at, outcome=view.outcome,
        compensations=list(view.compensations),
        steps={s.key: _step_of(i, s) for i, s in enumerate(view.steps)})


def fetch(api: ApiClient, run_id: str) -> RunView:
    from bot.cli.client import run_path

    answer = api.get(run_path(run_id))
    return view_of(answer.get("run", answer))


@dataclass(frozen=True)
class _Event:
    """An event of the stream, as ``live_lines`` reads one."""

    seq: int
    ts: str
    actor: str
    type: str
    payload: Mapping[str, Any]
    hash: str = ""


def _event(raw: Mapping[str, Any]) -> _Event:
    payload = raw.get("payload")
    if not isinstance(payload, Mapping):  # the event's fields flat, beside seq and type
        payload = {k: v for k, v in raw.items()
                   if k not in ("seq", "ts", "actor", "type", "hash", "prev_hash", "run_id")}
    return _Event(int(raw["seq"]), str(raw.get("ts") or ""), str(raw.get("actor") or ""),
                  str(raw["type"]), payload, str(raw.get("hash") or ""))


def finished_exit(view: RunView) -> int:
    from bot.cli.runs import exit_of

    if view.dry_run and view.status == "succeeded":
        from bot.present.dryrun import dry_run_verdict

        return 0 if dry_run_verdict(view).would_succeed else 1
    return exit_of(view.status)


def follow(api: ApiClient, run_id: str, *, after: int = 0, stop_at_wait: bool = False) -> int:
    """Print the run's events after ``after`` as the server records them, as the terminal prints
    a run it drives, until it finishes (exit 0, 3, 1) or, with ``stop_at_wait``, waits for people
    (exit 0). A stream the server ends early is opened again after the last event seen."""
    from bot.cli.client import run_path
    from bot.present.events import text_of
    from bot.present.live import LiveText

    live = LiveText()
    seen = after
    pause = threading.Event().wait  # between streams that brought nothing (Ctrl-C interrupts)
    while True:
        before = seen
        for raw in api.stream(run_path(run_id, "events"), after=seen, follow=True):
            ev = _event(raw)
            seen = max(seen, ev.seq)
            row = text_of(ev.type)
            if row is not None and row.live is not None:
                state = state_of(fetch(api, run_id))  # the run as it is now, as the printer reads it
                for line in live.lines(state, ev):
                    print(line, flush=True)
            if stop_at_wait and ev.type in WAITS:
                for line in live.flush():
                    print(line, flush=True)
            if ev.type == "run.finished":
                return finished_exit(fetch(api, run_id))
            if stop_at_wait and ev.type in WAITS:
                step = ev.payload.get("step", "")
                print(f"run {run_id} is waiting at step {step}: `runbook-bot status {run_id}` "
                      "shows it; the bot carries it on when someone acts", flush=True)
                return 0
        view = fetch(api, run_id)
        if view.status in ("succeeded", "partial", "failed", "aborted"):
            return finished_exit(view)
        if seen == before:
            pause(1.0)


# -- the commands ----------------------------------------------------------------------------------

def cmd_run(args: argparse.Namespace, server: ServerConfig, given: Mapping[str, Any]) -> int:
    no_impersonation(args)
    api = client(server)
    answer = api.post("/runs", {"runbook": given["name"], "params": dict(given.get("params") or {}),
                                "dry_run": bool(given.get("dry_run")),
                                "incident": given.get("incident")})
    view = view_of(answer.get("run", answer))
    if args.no_follow:
        print(view.run_id)
        return 0
    try:
        return follow(api, view.run_id, stop_at_wait=True)
    except KeyboardInterrupt:
        print(f"\nstopped following run {view.run_id}; the bot carries it on", file=sys.stderr)
        return 130


def _head_seq(api: ApiClient, run_id: str) -> int:
    from bot.cli.client import run_path

    head = api.get(run_path(run_id, "audit", "head"))
    return int(head.get("seq") or 0) if isinstance(head, Mapping) else 0


def cmd_decide(args: argparse.Namespace, server: ServerConfig, given: Mapping[str, Any]) -> int:
    from bot.cli.client import run_path

    no_impersonation(args)
    api = client(server)
    run_id, name = given["run_id"], args.verb
    follow_on = getattr(args, "follow", False)
    after = _head_seq(api, run_id) if follow_on else 0
    body = {k: v for k, v in given.items() if k != "run_id"}
    answer = api.post(run_path(run_id, name), body, refused_ok=True)
    print(answer.get("message", ""))
    if not answer.get("ok"):
        return 1
    if not follow_on:
        if name not in ("handover", "reject", "abort"):
            print(f"the bot carries run {run_id} on; `runbook-bot follow {run_id}` watches it")
        return 0
    return follow(api, run_id, after=after, stop_at_wait=True)


def cmd_follow(args: argparse.Namespace, server: ServerConfig, run_id: str) -> int:
    api = client(server)
    fetch(api, run_id)  # NotFound before anything is printed
    print(f"following run {run_id}; Ctrl-C stops following (the run carries on)", flush=True)
    try:
        return follow(api, run_id)
    except KeyboardInterrupt:
        print(f"\nstopped following run {run_id}; it carries on as it is", file=sys.stderr)
        return 130


def cmd_runs(args: argparse.Namespace, server: ServerConfig) -> int:
    from bot.present.console import runs_table

    answer = client(server).get("/runs", active=None if args.all else True, limit=args.limit)
    print(runs_table([view_of(r) for r in answer.get("runs", [])]))
    return 0


def cmd_status(args: argparse.Namespace, server: ServerConfig, run_id: str) -> int:
    from bot.present.console import status

    api = client(server)
    view = fetch(api, run_id)
    verbose = bool(getattr(args, "verbose", False))
    print(status(view, verbose=verbose))
    if not args.watch:
        return 0
    wait = threading.Event().wait  # a wait Ctrl-C interrupts
    try:
        while view.status not in ("succeeded", "partial", "failed", "aborted"):
            wait(args.interval)
            again = fetch(api, run_id)
            if again != view:
                print("\n" + status(again, verbose=verbose))
            view = again
    except KeyboardInterrupt:
        print(f"\nstopped watching run {run_id}; it carries on as it is", file=sys.stderr)
        return 130
    return 0


def verdict_of(api: ApiClient, run_id: str) -> dict[str, Any]:
    """The server's ``audit verify`` of the run: ``exit_status`` (0, 1, 2) and its ``message``."""
    from bot.cli.client import run_path

    answer = api.get(run_path(run_id, "audit"))
    return dict(answer) if isinstance(answer, Mapping) else {}


def cmd_export(args: argparse.Namespace, server: ServerConfig, run_id: str) -> tuple[bytes, int]:
    """The transcript as the server renders it, and the exit status of its chain's verify."""
    from bot.cli.client import run_path

    if args.thread or args.tz:
        from bot.errors import ConfigError

        raise ConfigError("--thread and --tz are not sent to a server: export without them (the "
                          "JSON format can be merged and read locally)")
    api = client(server)
    data = api.text(run_path(run_id, "transcript"), format=args.fmt)
    verdict = verdict_of(api, run_id)
    code = int(verdict.get("exit_status", 2))
    if code:
        print(verdict.get("message") or f"{run_id}: the chain does not verify", file=sys.stderr)
    return data, code


def cmd_verify(args: argparse.Namespace, server: ServerConfig, run_id: str) -> int:
    """The server verifies the chain with its keys; its line is printed as ``audit verify``'s.
    A head published earlier (``--head SEQ:HASH``) is checked here, against the chain's event at
    that seq: the server cannot vouch for it, since it reads the very database being checked."""
    from bot.cli.client import run_path

    api = client(server)
    verdict = verdict_of(api, run_id)
    code = int(verdict.get("exit_status", 2))
    if args.head and code == 0:
        seq, published = args.head
        held = next((str(e.get("hash") or "") for e in api.stream(
            run_path(run_id, "events"), after=seq - 1) if e["seq"] == seq), None)
        if held is None or not held.startswith(published):
            print(f"{run_id}: audit chain BROKEN at seq {seq}: the published head "
                  f"{seq}:{published} is not in the chain (it holds {held or 'no such event'})")
            return 1
    print(verdict.get("message") or json.dumps(verdict, ensure_ascii=False, sort_keys=True))
    return code


def cmd_head(server: ServerConfig, run_id: str) -> int:
    """``audit head`` from the server: the line to publish, as ``audit head`` prints it."""
    from bot.cli.client import run_path

    head = client(server).get(run_path(run_id, "audit", "head"))
    print(head.get("line") or f"{run_id} audit head {head.get('seq')}:{head.get('hash') or '-'}")
    return 0


def cmd_show(server: ServerConfig, run_id: str, *, as_json: bool) -> int:
    """``audit show`` from the server: the run's events, as ``audit show`` prints them."""
    from bot.cli.client import run_path

    for ev in client(server).stream(run_path(run_id, "events"), after=0):
        if as_json:
            print(json.dumps(ev, ensure_ascii=False))
            continue
        step = (ev.get("payload") or {}).get("step")
        print(f"{ev['seq']:>5} {ev.get('ts', '')}  {ev['type']:<28} {ev.get('actor', ''):<14}"
              + (f" step={step}" if step else ""))
    return 0


def report_of(raw: Mapping[str, Any]) -> Any:
    """A diagnosis ``Report`` from its JSON (``Report.to_json``)."""
    from datetime import UTC, datetime

    from bot.diagnose.model import Evidence, Finding, Report, Scope, Severity

    scope = raw.get("scope") or {}
    at = raw.get("scanned_at")
    return Report(
        cluster=str(raw.get("cluster") or ""),
        scanned_at=datetime.fromisoformat(at) if at else datetime.now(UTC),
        calls=int(raw.get("calls") or 0),
        scope=Scope(cluster=str(raw.get("cluster") or ""), **scope) if scope else None,
        findings=tuple(Finding(
            kind=f["kind"], severity=Severity(f["severity"]), summary=f["summary"],
            subject=dict(f.get("subject") or {}), runbook=f.get("runbook"),
            params=dict(f.get("params") or {}), command=f.get("command") or "",
            evidence=tuple(Evidence(e["what"], e["source"], datetime.fromisoformat(e["read_at"]))
                           for e in f.get("evidence") or ()))
            for f in raw.get("findings") or ()))


def cmd_diagnose(args: argparse.Namespace, server: ServerConfig) -> int:
    """The bot scans with its credentials; the report is printed as a local scan's."""
    from bot.cli.client import ServerError
    from bot.cli.diagnose import EXIT_FOUND, EXIT_SCAN_FAILED
    from bot.present.diagnosis import report_text

    body = {"cluster": args.cluster or "", "namespace": args.namespace, "pod": args.pod,
            "node": args.node}
    try:
        raw = client(server).post("/diagnose", {k: v for k, v in body.items() if v is not None})
    except ServerError as e:
        if e.status is None or e.status < 500:
            raise
        print(f"runbook-bot: error: the scan failed, nothing was concluded: {e}", file=sys.stderr)
        return EXIT_SCAN_FAILED
    if args.fmt == "json":
        json.dump(raw, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return EXIT_FOUND if raw.get("findings") else 0
    report = report_of(raw)
    sys.stdout.write(report_text(report))
    return EXIT_FOUND if report.findings else 0


def check_local_write(store: Any, settings: Settings) -> None:
    """A local-mode write (a run, a decision) to a database a server serves is refused, naming
    the server, unless ``local_mode_override: true`` (``bot.store.servers``)."""
    if settings.local_mode_override:
        return
    from bot.errors import PolicyError
    from bot.store.servers import refusal, served_by

    url = served_by(store)
    if url is not None:
        raise PolicyError(refusal(url))
