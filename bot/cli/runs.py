"""``run``, ``approve``, ``reject``, ``confirm``, ``break-glass``, ``retry``, ``abort``,
``handover``, ``runs``, ``status`` and ``worker``: the terminal front-end's commands.

They build the same commands Slack does and go through the same runner and policy. ``run`` drives
the run in the foreground, printing each plan and the progress of waits; where a step needs an
approval and an eligible approver is at the keyboard it asks, otherwise it leaves the run awaiting
approval and says how to approve it. Any other terminal (or Slack) can then approve, and ``worker``
(or ``slack serve``) carries the run on.
"""

from __future__ import annotations

import argparse
import sys
import threading
from dataclasses import replace
from datetime import datetime
from typing import Any

from bot.cli import EXIT_PARTIAL, EXIT_REFUSED, logs
from bot.cli.grammar import add_verb, values
from bot.cli.ops import add_side_port_arguments
from bot.cli.remote import add_server_option, check_local_write, server_of

ACTOR_HELP = "act as USER (only where policy.allow_impersonation is set: demos and tests)"


def register(sub: Any) -> None:
    p = add_verb(sub, "run", description="Start a run of runbook NAME with params, then follow "
                 "it: plans, approvals, progress. Exit 0 when it succeeded or waits for an "
                 "approval, 3 when it ended partial (its runbook's outcome rules say the "
                 "incident is only partly resolved), 1 when it failed or was aborted (a dry "
                 "run: 1 when a real run would stop).")
    p.add_argument("--no-follow", action="store_true",
                   help="start the run and return; a worker carries it on")
    p.add_argument("--yes", action="store_true",
                   help="approve prompts without asking (only steps you are eligible for)")
    # what suggested the run (alert:<ref>, diagnosis:<ref>): set by the tools that suggest runs
    p.add_argument("--suggested-by", metavar="REF", help=argparse.SUPPRESS)
    p.add_argument("--as", dest="as_user", metavar="USER", help=ACTOR_HELP)
    add_server_option(p)
    p.set_defaults(handler=cmd_run)

    p = add_verb(sub, "handover", description="Hand run RUN_ID over to USER, who becomes its "
                 "owner (the incident commander). The current owner or the requester may. The "
                 "owner never approves the run's steps, nor does the requester.")
    p.add_argument("--as", dest="as_user", metavar="USER", help=ACTOR_HELP)
    add_server_option(p)
    p.set_defaults(handler=cmd_decide, follow=False)

    # the decisions: their arguments come from the verb table, the same as Slack's /runbook
    for name in ("approve", "confirm", "retry", "reject", "abort", "break-glass"):
        p = add_verb(sub, name)
        p.add_argument("--as", dest="as_user", metavar="USER", help=ACTOR_HELP)
        add_server_option(p)
        if name in ("reject", "abort"):
            p.set_defaults(follow=False)
        else:
            _follow_arguments(p)
        p.set_defaults(handler=cmd_decide)

    p = sub.add_parser("follow", help="follow a run live, whoever drives it",
                       description="Print a run's steps as they happen, whoever drives it (a "
                       "worker, Slack, another terminal), until it finishes. Only reads: Ctrl-C "
                       "stops following and leaves the run as it is. Exit 0 when the run "
                       "succeeded, 3 when it ended partial, 1 when it failed or was aborted.")
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between polls (default 1)")
    add_server_option(p)
    p.set_defaults(handler=cmd_follow)

    p = sub.add_parser("runs", help="a table of runs", description="List runs, newest first.")
    p.add_argument("--all", action="store_true", help="include finished runs")
    p.add_argument("--limit", type=int, default=50)
    add_server_option(p)
    p.set_defaults(handler=cmd_runs)

    p = sub.add_parser("notices", help="what the node watcher noticed, newest first",
                       description="List the node watcher's recent notices from the store (every "
                       "replica's: each is claimed once): when, the cluster, the node or zone, "
                       "the verdict (dead, hung, sick, recovered, zone) and when its Lease went "
                       "stale. docs/watcher.md.")
    p.add_argument("--limit", type=int, default=50)
    p.set_defaults(handler=cmd_notices)

    p = sub.add_parser("status", help="each step of a run, who approved what, what is pending",
                       description="Show a run step by step.")
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("--watch", action="store_true",
                   help="show it again each time it changes, until it finishes (Ctrl-C stops "
                   "watching; the run carries on)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between polls (default 1)")
    add_server_option(p)
    p.set_defaults(handler=cmd_status)

    p = sub.add_parser("worker", help="carry on every unfinished run until interrupted",
                       description="Resume every unfinished run and drive runs as their waits "
                       "end and approvals arrive, until interrupted.")
    p.add_argument("--once", action="store_true", help="drive what is due once, then exit")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between polls")
    add_side_port_arguments(p, what="")
    logs.add_arguments(p, here=True)
    p.set_defaults(handler=cmd_worker, default_log_level="info")


def exit_of(status: str) -> int:
    """The exit status of a finished run: 0 succeeded, 3 partial (its runbook's outcome rules
    say the incident is only partly resolved), 1 failed or aborted."""
    return {"succeeded": 0, "partial": EXIT_PARTIAL}.get(status, EXIT_REFUSED)


def _follow_arguments(p: Any) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument("--follow", dest="follow", action="store_true", default=None,
                       help="carry the run on here, through its waits, until it finishes or "
                       "needs someone else")
    group.add_argument("--no-follow", dest="follow", action="store_false",
                       help="leave the run to a worker")


def _settings() -> Any:
    from bot.config import load_settings

    return load_settings()


def _follow(runner: Any, run_id: str, *, actor: str, interactive: bool, yes: bool,
            via: dict[str, Any] | None = None) -> int:
    """Drive the run here until it finishes or needs someone who is not at this keyboard."""
    from bot.engine.commands import Approve, Confirm

    stop = threading.Event()
    asked: set[tuple[str, str | None]] = set()
    while True:
        state = runner.drive(run_id)
        if state.status in ("succeeded", "partial", "failed", "aborted"):
            if state.dry_run and state.status == "succeeded":
                from bot.present.dryrun import dry_run_verdict
                from bot.present.views import run_view

                return 0 if dry_run_verdict(run_view(state)).would_succeed else 1
            return exit_of(state.status)
        if state.status == "awaiting_approval":
            s = next((x for x in state.steps.values() if x.status == "awaiting_approval"), None)
            if s is None or (s.key, s.plan_hash) in asked:
                continue
            asked.add((s.key, s.plan_hash))
            why_not = runner.eligibility(state, s.key, actor)
            if why_not is None and (yes or interactive) and not s.blocked:
                verb = "Confirm" if s.needs_confirmation and not s.needs_approval else "Approve"
                if yes or _ask(f"{verb} step {s.key} as {actor}? [y/N] "):
                    cmd = (Confirm(run_id=run_id, actor=actor, step=s.key, via=via)
                           if verb == "Confirm" else
                           Approve(run_id=run_id, actor=actor, step=s.key, plan_hash=s.plan_hash,
                                   via=via))
                    out = runner.submit(cmd)
                    if out.ok:
                        continue
                    print(f"  {out.message}")
            print(f"run {run_id} is waiting at step {s.key}"
                  + (f" ({why_not})" if why_not and not s.blocked else "")
                  + f": `runbook-bot status {run_id}` shows it; it carries on when someone acts")
            return 0
        # waiting: sleep until the next check (the run is durable; Ctrl-C leaves it for a worker)
        if state.next_check_at:
            delay = (datetime.fromisoformat(state.next_check_at) - runner.clock.now()).total_seconds()
            stop.wait(max(0.05, min(delay, 5.0)))
        else:  # another worker holds the run right now: look again shortly
            stop.wait(0.2)


def _ask(prompt: str) -> bool:
    try:
        return input(prompt).strip().lower() in ("y", "yes")
    except EOFError:
        return False


def cmd_run(args: argparse.Namespace) -> int:
    from bot.cli.wiring import build_runner, identity, open_store
    from bot.engine.provenance import Provenance
    from bot.engine.verbs import BY_NAME, Parsed
    from bot.frontends.term.identity import whereabouts
    from bot.frontends.term.printer import TerminalPrinter
    from bot.runtime.facade import Origin, Runtime

    given = values(args)
    settings = _settings()
    if (server := server_of(args, settings)) is not None:
        from bot.cli import remote

        return remote.cmd_run(args, server, given)
    actor = identity(settings, args.as_user)
    store = open_store(settings)
    check_local_write(store, settings)
    runner = build_runner(settings, store=store, notifiers=[TerminalPrinter()])
    start = Parsed(BY_NAME["run"], given).start(actor, whereabouts(as_user=args.as_user))
    # who may start it (policy.start): a refusal is recorded, printed as an error line, exit 1
    state = Runtime(runner, refusals=store.refusals).start(replace(start, provenance=Provenance(
        incident=given["incident"], suggested_by=args.suggested_by)), origin=Origin("terminal"))
    if args.no_follow:
        print(state.run_id)
        return 0
    try:
        return _follow(runner, state.run_id, actor=actor, interactive=sys.stdin.isatty(),
                       yes=args.yes, via=dict(state.origin))
    except KeyboardInterrupt:
        print(f"\nleft run {state.run_id} as it is; `runbook-bot worker` carries it on",
              file=sys.stderr)
        return 130


def cmd_decide(args: argparse.Namespace) -> int:
    from bot.cli.wiring import build_runner, identity, open_store
    from bot.engine.verbs import BY_NAME, Parsed
    from bot.frontends.term.identity import whereabouts
    from bot.frontends.term.printer import TerminalPrinter

    given = values(args)
    settings = _settings()
    if (server := server_of(args, settings)) is not None:
        from bot.cli import remote

        return remote.cmd_decide(args, server, given)
    actor = identity(settings, args.as_user)
    run_id, name = given["run_id"], args.verb
    store = open_store(settings)
    check_local_write(store, settings)
    runner = build_runner(settings, store=store, notifiers=[TerminalPrinter()])
    via = whereabouts(as_user=args.as_user)
    cmd = Parsed(BY_NAME[name], given).decision(actor, via)
    out = runner.submit(cmd)
    print(out.message)
    if not out.ok:
        return 1
    if name == "handover":
        return 0
    if name in ("reject", "abort"):
        runner.drive(run_id)
        return 0
    follow = args.follow
    if follow is None:  # by default a live worker carries the run on and the terminal is free
        from bot.frontends.workers import live_workers

        workers = live_workers(store, runner.clock.now())
        if workers:
            print(f"worker {workers[0]} carries run {run_id} on; `runbook-bot follow {run_id}` "
                  "watches it")
            return 0
        print(f"no worker is running, so this terminal carries run {run_id} on (a running "
              "`runbook-bot worker` would free it; --no-follow leaves the run for one)")
    elif not follow:
        print(f"left run {run_id} for a worker; `runbook-bot follow {run_id}` watches it")
        return 0
    return _follow(runner, run_id, actor=actor, interactive=sys.stdin.isatty(), yes=False, via=via)


def _poll_sleep() -> Any:
    return threading.Event().wait  # a wait Ctrl-C interrupts


def cmd_follow(args: argparse.Namespace) -> int:
    from bot.cli.wiring import open_store, run_id_arg
    from bot.frontends.term.follow import Follower

    settings = _settings()
    run_id = run_id_arg(args.run_id)
    if (server := server_of(args, settings)) is not None:
        from bot.cli import remote

        return remote.cmd_follow(args, server, run_id)
    store = open_store(settings)
    store.load(run_id)  # NotFound before anything is printed
    print(f"following run {run_id}; Ctrl-C stops following (the run carries on)", flush=True)
    try:
        state = Follower(store, out=sys.stdout, sleep=_poll_sleep(),
                         interval=args.interval).events(run_id)
    except KeyboardInterrupt:
        print(f"\nstopped following run {run_id}; it carries on as it is", file=sys.stderr)
        return 130
    return exit_of(state.status)


def cmd_runs(args: argparse.Namespace) -> int:
    from bot.cli.wiring import open_store
    from bot.present.console import runs_table
    from bot.present.views import run_view

    settings = _settings()
    if (server := server_of(args, settings)) is not None:
        from bot.cli import remote

        return remote.cmd_runs(args, server)
    store = open_store(settings)
    headers = store.runs(active=None if args.all else True, limit=args.limit)
    views = [run_view(store.load(h.run_id)) for h in headers]
    finished = None if args.all or views else store.count_runs(active=False)
    print(runs_table(views, finished=finished))
    return 0


def cmd_notices(args: argparse.Namespace) -> int:
    from bot.cli.wiring import open_store
    from bot.frontends.notices import notices_table
    from bot.store.node_notices import NoticeLog

    store = open_store(_settings())
    print(notices_table(NoticeLog(store.engine).recent(limit=args.limit)))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from bot.cli.wiring import open_store, run_id_arg
    from bot.present.console import status
    from bot.present.views import run_view, stored_runbook

    settings = _settings()
    if (server := server_of(args, settings)) is not None:
        from bot.cli import remote

        return remote.cmd_status(args, server, run_id_arg(args.run_id))
    store = open_store(settings)
    state = store.load(run_id_arg(args.run_id))
    verbose = bool(getattr(args, "verbose", False))  # also: every skipped step, the expressions
    if not args.watch:
        print(status(run_view(state, stored_runbook(state), children=store.children(state.run_id)),
                     verbose=verbose))
        return 0
    from bot.frontends.term.follow import Follower

    runbook = stored_runbook(state)
    try:
        Follower(store, out=sys.stdout, sleep=_poll_sleep(), interval=args.interval).redraw(
            state.run_id, lambda st: status(run_view(st, runbook, children=store.children(st.run_id)),
                                       verbose=verbose))
    except KeyboardInterrupt:
        print(f"\nstopped watching run {state.run_id}; it carries on as it is", file=sys.stderr)
        return 130
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    """Drive runs until interrupted, answering /metrics, /readyz and /healthz on the ops port."""
    from bot.cli.ops import start_side_server
    from bot.cli.wiring import (
        NodeWatchers,
        build_runner,
        notice_sink,
        open_store,
        ops_endpoints,
        record_worker,
    )
    from bot.frontends.metrics import Metrics
    from bot.frontends.term.printer import TerminalPrinter
    from bot.runtime.drain import stop_on_signals

    settings = _settings()
    store = open_store(settings)
    metrics = Metrics()
    runner = build_runner(settings, store=store, notifiers=[TerminalPrinter()], metrics=metrics)
    if args.once:
        try:
            print(f"drove {runner.run_due()} run(s)")
        finally:
            store.close()  # its connections, now: the process may go on (tests, scripts)
        return 0
    side = start_side_server(ops_endpoints(runner, store, metrics, interval=args.interval), args,
                             settings.listen)
    record = record_worker(runner, store)
    # the node watcher of each cluster, where enabled: cards in Slack where configured, else logs
    watchers = NodeWatchers(settings, store, notice_sink(settings, store, runner), metrics=metrics)
    try:
        with stop_on_signals(runner.stop):
            print("worker: resuming unfinished runs; SIGTERM or Ctrl-C drains and stops", flush=True)
            watchers.start()
            runner.serve(interval=args.interval)
    except KeyboardInterrupt:  # a second signal: stop without waiting for the tick in flight
        runner.stop()
        return 130
    finally:
        watchers.stop()
        record.close()
        side.stop()
    print("worker: stopped", flush=True)
    return 0
