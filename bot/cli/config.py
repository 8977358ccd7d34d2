"""``config path`` and ``config check``: which config file is used, and whether what it names works.

``config check`` is what an operator runs after installing or changing the config, on a laptop or
in the bot's pod (``kubectl exec deploy/runbook-bot -- runbook-bot config check``): it loads the
file, lists the runbooks, opens the state database, and for every cluster loads its kubeconfig
(or the in-cluster ServiceAccount), lists nodes with it, and asks STS who the AWS credentials are
(after ``role_arn``, assumed with the person running the check as its ``SourceIdentity`` and
requester tag). Each line says what was found or why not; the exit status is 1 if anything
that was reachable answered no, 2 if the config itself is invalid.
"""

from __future__ import annotations

import argparse
from typing import Any

from bot.errors import RunbookBotError


def register(sub: Any) -> None:
    p = sub.add_parser("config", help="which config file is used, and check what it names",
                       description="Inspect the configuration.")
    inner = p.add_subparsers(dest="config_command", metavar="SUBCOMMAND")
    q = inner.add_parser(
        "path", help="the config file used and the places looked, in order",
        description="Print the config file that every command reads, how it was found, and the "
        "places looked in order: --config, $RUNBOOK_BOT_CONFIG, ./runbook-bot.yaml, "
        "$XDG_CONFIG_HOME/runbook-bot/config.yaml.")
    q.set_defaults(handler=cmd_path)
    q = inner.add_parser(
        "check", help="load the config and reach every cluster, AWS account and the database",
        description="Load the config, list the runbooks, open the state database, and for each "
        "cluster load its Kubernetes credentials (kubeconfig/context or in-cluster) and list "
        "nodes, and ask STS for the AWS identity (after role_arn). Exit status 0 when everything "
        "answered yes, 1 when something failed, 2 when the config is invalid.")
    q.set_defaults(handler=cmd_check)
    p.set_defaults(handler=lambda _args: p.print_help() or 2)


def cmd_path(args: argparse.Namespace) -> int:
    import os

    from bot.config import config_search, find_config

    path, how = find_config()
    print(f"{path} ({how})" if path else how)
    for where, candidate in config_search(os.environ):
        print(f"  {where}: {candidate if candidate is not None else '(not set)'}")
    return 0


def _ok(what: str, text: str) -> None:
    print(f"ok    {what}: {text}")


def _fail(what: str, text: str) -> None:
    print(f"FAIL  {what}: {text}")


def cmd_check(args: argparse.Namespace) -> int:
    from bot.cli.wiring import open_store
    from bot.config import find_config, load_settings
    from bot.store.db import masked

    path, how = find_config()
    settings = load_settings()  # an invalid config stops here, exit status 2
    _ok("config", f"{path} ({how})" if path else how)
    failed = not _check_runbooks(settings)
    try:
        store = open_store(settings)
    except RunbookBotError as e:
        failed = True
        _fail("database", str(e))
    else:
        _ok("database", f"{masked(settings.database_url)} ({store.engine.dialect.name}), "
                        f"{len(store.runs())} runs")
        store.close()
    if settings.policy.start is None:
        print("warn  policy.start: not set; anyone who can reach the bot (an allowed Slack "
              "channel, the terminal) may start any runbook (docs/slack.md, \"Who may start a "
              "run\")")
    if not settings.clusters:
        print("note  clusters: none configured; actions use the default kubeconfig (or "
              "in-cluster) and the default AWS credentials")
    for name in settings.clusters:
        failed = not _check_cluster(settings.cluster(name)) or failed
    return 1 if failed else 0


def _check_runbooks(settings: Any) -> bool:
    from bot.actions.builtin import builtin_actions
    from bot.runbook.source import DirectorySource

    lines: list[str] = []
    source = DirectorySource(settings.runbooks_dir, catalog=builtin_actions(),
                             on_override=lines.append)
    try:
        index = source.index()
    except RunbookBotError as e:
        _fail("runbooks", str(e))
        return False
    good = sorted(n for n, e in index.entries.items() if e.runbook is not None)
    bad = sorted(str(e.path) for e in index.entries.values() if e.error is not None)
    dirs = ", ".join(map(str, source.directories))
    (_fail if bad else _ok)("runbooks", f"{len(good)} from {dirs}"
                            + (f"; invalid: {', '.join(bad)}" if bad else ""))
    for line in lines:
        print(f"warn  runbooks: {line}")
    return not bad


def _check_cluster(cfg: Any) -> bool:
    ok = True
    what = f"cluster {cfg.name}"
    try:
        from bot.clients.cluster import kube_client
        from bot.frontends.term.identity import os_user

        # with auth: eks, the token is signed by the role session assumed for whoever checks
        kube = kube_client(cfg, request_timeout=min(cfg.request_timeout, 10.0), requester=os_user())
        kube.read_retries = 0
    except RunbookBotError as e:
        _fail(f"{what} kubernetes", str(e))
        ok = False
    else:
        source = (f"EKS tokens for {cfg.eks_name}" if cfg.auth == "eks" else
                  f"kubeconfig {cfg.kubeconfig or '(default)'}, context {cfg.context or '(current)'}"
                  if cfg.kubeconfig or cfg.context else "default kubeconfig or in-cluster")
        host = kube.api.configuration.host
        try:
            nodes = kube.list_nodes()
        except RunbookBotError as e:
            _fail(f"{what} kubernetes", f"{host} ({source}): {e}")
            ok = False
        else:
            _ok(f"{what} kubernetes", f"{host} ({source}), {len(nodes)} nodes")
        finally:
            kube.close()
    from bot.clients.ec2 import caller_identity
    from bot.errors import RetryableError
    from bot.frontends.term.identity import os_user

    role = f", role {cfg.role_arn}" if cfg.role_arn else ""
    try:
        # with role_arn, the session is attributed to whoever runs the check (its SourceIdentity)
        found = caller_identity(cfg, requester=os_user())
    except RetryableError as e:
        print(f"skip  {what} aws: STS not reachable from here, identity not checked ({e})")
    except RunbookBotError as e:
        _fail(f"{what} aws", f"region {cfg.region}{role}: {e}")
        ok = False
    else:
        _ok(f"{what} aws", f"account {found['account']}, {found['arn']} (region {cfg.region}{role})")
    return ok
