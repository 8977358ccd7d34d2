"""``alerts serve``: the Alertmanager webhook without Slack, and the worker loop, in one process.

With ``pagerduty.webhook_secrets`` configured, PagerDuty's V3 webhooks are taken on the same port
(``/pagerduty``, docs/pagerduty.md), with or without Alertmanager's credentials.

For teams without Slack: ``POST /alertmanager`` on the alerts port (``listen.alerts_port``,
``--port``; ``/healthz``, ``/readyz`` and ``/metrics`` on the ops port, ``listen.ops_port``)
records and deduplicates alerts like ``slack serve`` does, logs one line per alert naming the
runbook and the command line that answers it, and starts the runbooks that opted into read-only
auto-runs. SIGTERM (or Ctrl-C) drains: no new requests, the ticks in hand finish, exit 0.
"""

from __future__ import annotations

import argparse
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bot.cli import logs
from bot.cli.ops import add_serve_arguments, add_side_port_arguments, chosen, start_side_server


def register(sub: Any) -> None:
    p = sub.add_parser("alerts", help="the Alertmanager webhook, without Slack",
                       description="Receive Alertmanager's webhook (see docs/alerts.md).")
    s = p.add_subparsers(dest="alerts_command", metavar="COMMAND")
    serve = s.add_parser("serve", help="serve POST /alertmanager and carry runs on",
                         description="Serve Alertmanager's webhook on /alertmanager (with "
                         "/healthz, /readyz and /metrics on the ops port) and drive runs, until "
                         "interrupted.")
    add_serve_arguments(serve, port="alerts_port", threads=4)
    add_side_port_arguments(serve)
    logs.add_arguments(serve, here=True)
    serve.set_defaults(handler=cmd_serve, default_log_level="info")
    p.set_defaults(handler=lambda args: p.print_help() or 2)


def cmd_serve(args: argparse.Namespace) -> int:
    from bot.cli.wiring import build_runner, open_store, ops_endpoints, scanner
    from bot.config import load_settings
    from bot.errors import ConfigError
    from bot.frontends.alerts import AlertIntake, LogCards, listener, webhook_app
    from bot.frontends.metrics import Metrics
    from bot.frontends.term.printer import TerminalPrinter
    from bot.runtime.drain import stop_on_signals
    from bot.runtime.facade import Origin, Runtime
    from bot.store.alerts import AlertLog

    settings = load_settings()
    if not settings.alerts.enabled and not settings.pagerduty.enabled:
        raise ConfigError("the Alertmanager webhook has no credentials to check: set "
                          "alerts.bearer_tokens or alerts.basic_auth in the config file, or "
                          "RUNBOOK_BOT_ALERTS_TOKEN (see docs/alerts.md); or, for PagerDuty, "
                          "pagerduty.webhook_secrets (docs/pagerduty.md)")
    store = open_store(settings)
    metrics = Metrics()
    runner = build_runner(settings, store=store, notifiers=[TerminalPrinter()], metrics=metrics)
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="alerts")

    # the front-end's one way to runs and runbooks
    runtime = Runtime(runner, refusals=store.refusals)

    def start(cmd: Any) -> Any:  # the bot's system actor: only read-only auto-runs pass
        state = runtime.start(cmd, origin=Origin(frontend="alerts"))
        pool.submit(runtime.drive, state.run_id)
        return state

    names: Any = runtime.runbook_names if runtime.lists_runbooks else (lambda: [])
    intake = AlertIntake(config=settings.alerts, clusters=list(settings.clusters),
                         runbooks=runtime.runbook_source, names=names,
                         alert_log=AlertLog(store.engine), clock=runtime.clock, cards=LogCards(),
                         start=start,
                         submit=pool.submit, diagnoser=scanner(settings), metrics=metrics)
    ops = ops_endpoints(runner, store, metrics, interval=args.interval)
    listen = settings.listen
    host = chosen(args.host, listen.host)
    from bot.frontends.pagerduty import pagerduty_routes

    server = listener(webhook_app(intake, metrics=metrics) if settings.alerts.enabled else None,
                      host=host, port=chosen(args.port, listen.alerts_port), threads=args.threads,
                      more=pagerduty_routes(settings.pagerduty, intake, metrics=metrics))
    worker = threading.Thread(target=runner.serve, kwargs={"interval": args.interval},
                              name="runbook-bot-worker", daemon=True)
    stop = threading.Event()
    try:
        with stop_on_signals(stop.set):
            worker.start()
            side = start_side_server(ops, args, listen)
            server.start()
            source, path = (("Alertmanager", "/alertmanager") if settings.alerts.enabled
                            else ("PagerDuty", "/pagerduty"))
            print(f"runbook-bot: serving {source} on http://{host}:{server.effective_port}"
                  f"{path}; SIGTERM or Ctrl-C drains and stops", flush=True)
            while not stop.wait(0.5):
                pass
            server.stop()
            pool.shutdown(wait=True)
            runner.stop()
            worker.join(timeout=20)
            side.stop()
    except KeyboardInterrupt:
        runner.stop()
        return 130
    print("runbook-bot: stopped", flush=True)
    return 0
