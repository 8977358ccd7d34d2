"""``audit verify`` and ``audit show``: check and read a run's hash-chained audit log.

``verify RUN_ID`` reads the chain from the store; ``verify --file export.json`` checks an exported
transcript offline, with no database. Both exit 0 on an intact chain and 1 naming the first bad
seq after any edit, deletion, insertion, reordering or truncation.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    audit = sub.add_parser("audit", help="verify or read a run's audit log",
                           description="The audit log of a run: a hash chain of every event.")
    asub = audit.add_subparsers(dest="audit_command", metavar="COMMAND", required=True)
    p = asub.add_parser("verify", help="check a run's audit chain (exit 1 names the first bad seq)",
                        description="Check the audit chain of RUN_ID in the store, or of an "
                        "exported JSON transcript with --file.")
    p.add_argument("run_id", nargs="?", metavar="RUN_ID")
    p.add_argument("--file", metavar="EXPORT.json", help="an exported JSON transcript")
    p.set_defaults(handler=cmd_verify)
    p = asub.add_parser("show", help="print a run's audit events",
                        description="Print every audit event of RUN_ID, one per line.")
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(handler=cmd_show)


def cmd_verify(args: argparse.Namespace) -> int:
    from bot.config import load_settings
    from bot.errors import ConfigError
    from bot.store.audit import Event, verify_events

    settings = load_settings()
    key = settings.audit_key.encode() if settings.audit_key else None
    if args.file:
        try:
            doc = json.loads(Path(args.file).read_text(encoding="utf-8"))
            run_id = str(doc["run"]["run_id"] if "run_id" in doc["run"] else doc["run"]["id"])
            events = [Event.from_dict(e) for e in doc["events"]]
            head = doc.get("head") or {}
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"{args.file} is not an exported JSON transcript: {e}") from e
        head_seq, head_hash = head.get("seq"), head.get("hash")
        where = args.file
    elif args.run_id:
        from bot.cli.wiring import open_store, run_id_arg

        store = open_store(settings)
        run_id = run_id_arg(args.run_id)
        head_seq, head_hash = store.head(run_id)
        events = store.events(run_id, payloads=False)
        where = run_id
    else:
        raise ConfigError("give a RUN_ID or --file EXPORT.json")
    verdict = verify_events(run_id=run_id, events=events, head_seq=head_seq, head_hash=head_hash,
                            key=key)
    if verdict.ok:
        print(f"{where}: audit chain intact: {verdict.count} events, head {head_hash or '-'}"
              + ("" if key else " (no RUNBOOK_BOT_AUDIT_KEY: plain SHA-256, not HMAC)"))
        return 0
    print(f"{where}: audit chain BROKEN at seq {verdict.first_bad_seq}: {verdict.reason} "
          f"({verdict.count} events before it verify)")
    return 1


def cmd_show(args: argparse.Namespace) -> int:
    from bot.cli.wiring import open_store, run_id_arg
    from bot.config import load_settings

    store = open_store(load_settings())
    for ev in store.events(run_id_arg(args.run_id)):
        if args.json:
            print(json.dumps(ev.to_dict(), ensure_ascii=False))
        else:
            step = ev.payload.get("step")
            print(f"{ev.seq:>5} {ev.ts}  {ev.type:<28} {ev.actor:<14}"
                  + (f" step={step}" if step else ""))
    return 0
