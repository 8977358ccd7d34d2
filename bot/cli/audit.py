"""``audit verify``, ``audit head``, ``audit show`` and ``audit refusals``: check and read the audit logs.

``verify RUN_ID`` reads the chain from the store (and checks the header the run shows against it);
``verify --file export.json`` checks an exported transcript offline, with no database, seal
included. Both exit 0 on an intact chain, 1 naming the first bad seq after any edit, deletion,
insertion, reordering or truncation (or a keyed chain rewritten without its key), and 2 when the
chain was written with a key that was not given ("written with key K, you gave none / another"),
or a document was sealed without it, which says nothing about tampering (``exit_status``; the
same rule as ``export``). ``--head SEQ:HASH`` compares with a head published earlier. The keys are
``RUNBOOK_BOT_AUDIT_KEY`` and those of ``RUNBOOK_BOT_AUDIT_PREVIOUS_KEYS``: a chain whose key was
rotated while its run was open needs each key it was written with.

``head RUN_ID`` prints the run's head, to paste where the database's writers cannot reach (the
incident ticket) for a run that had no Slack thread.

``refusals [--limit N]`` lists requests refused before any run existed (``bot.store.refusals``) and
verifies their chain: exit 0 intact, 1 naming the first changed refusal, 2 without a key it needs.
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
    p.add_argument("--head", metavar="SEQ:HASH", type=_published,
                   help="a head published earlier (`audit head`, the Slack summary, the "
                   "transcript): the chain must contain it")
    from bot.cli.remote import add_server_option

    add_server_option(p)
    p.set_defaults(handler=cmd_verify)
    p = asub.add_parser("head", help="print a run's audit head, to publish out of the database",
                        description="Print the audit head of RUN_ID (last seq, hash and its "
                        "signature) as one line to paste into the incident ticket; `audit verify "
                        "RUN_ID --head SEQ:HASH` checks the chain against it later.")
    p.add_argument("run_id", metavar="RUN_ID")
    add_server_option(p)
    p.set_defaults(handler=cmd_head)
    p = asub.add_parser("show", help="print a run's audit events",
                        description="Print every audit event of RUN_ID, one per line.")
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    add_server_option(p)
    p.set_defaults(handler=cmd_show)
    p = asub.add_parser("refusals", help="list refused requests and verify their chain",
                        description="Requests refused before any run existed (a start the "
                        "policy does not allow, an API call without valid credentials), newest "
                        "last, and whether their hash chain verifies: exit 0 intact, 1 naming "
                        "the first changed refusal, 2 when a key it was signed with is not given.")
    p.add_argument("--limit", type=int, default=50, metavar="N",
                   help="show the newest N (default 50); the whole chain is verified")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(handler=cmd_refusals)


def _published(text: str) -> tuple[int, str]:
    seq, _, hash_ = text.partition(":")
    if not seq.isdigit() or int(seq) < 1 or len(hash_) < 12 or not all(
            c in "0123456789abcdef" for c in hash_.lower()):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a head: expected SEQ:HASH as `audit head` prints it, e.g. "
            "25:3f2a9c0d1e4b (at least 12 hex digits of the hash)")
    return int(seq), hash_.lower()


def cmd_verify(args: argparse.Namespace) -> int:
    from bot.config import load_settings
    from bot.errors import ConfigError
    from bot.store.audit import Keyring
    from bot.store.integrity import exit_status, verify_document, verify_run

    settings = load_settings()
    from bot.cli.remote import server_of

    if args.run_id and not args.file and (server := server_of(args, settings)) is not None:
        from bot.cli import remote
        from bot.cli.wiring import run_id_arg

        return remote.cmd_verify(args, server, run_id_arg(args.run_id))
    key = Keyring(settings.audit_key.encode() if settings.audit_key else None,
                  tuple(k.encode() for k in settings.audit_previous_keys))
    if args.file:
        try:
            doc = json.loads(Path(args.file).read_text(encoding="utf-8"))
            verdict = verify_document(doc, key=key, published=args.head)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ConfigError(f"{args.file} is not an exported JSON transcript: {e}") from e
        head_hash = (doc.get("head") or {}).get("hash")
        where = args.file
    elif args.run_id:
        from bot.cli.wiring import open_store, run_id_arg

        store = open_store(settings)
        try:
            run_id = run_id_arg(args.run_id)
            verdict = verify_run(store, run_id, key=key, published=args.head)
            head_hash = store.head(run_id)[1]
        finally:
            store.close()
        where = run_id
    else:
        raise ConfigError("give a RUN_ID or --file EXPORT.json")
    notes = "".join(f" ({n})" for n in verdict.notes)
    code = exit_status(verdict)
    if code == 0:
        how = (f"HMAC-SHA256, key {verdict.key_id}" if verdict.key_id
               else "HMAC-SHA256" if key.current else
               "plain SHA-256, not HMAC: no RUNBOOK_BOT_AUDIT_KEY")
        print(f"{where}: audit chain intact: {verdict.count} events, head {head_hash or '-'} "
              f"({how}){notes}")
    elif code == 2:
        print(f"{where}: cannot verify: {verdict.reason}")
    else:
        at = f" at seq {verdict.first_bad_seq}" if verdict.first_bad_seq is not None else ""
        print(f"{where}: audit chain BROKEN{at}: {verdict.reason} "
              f"({verdict.count} events before it verify){notes}")
    return code


def cmd_head(args: argparse.Namespace) -> int:
    from bot.cli.wiring import open_store, run_id_arg
    from bot.config import load_settings

    settings = load_settings()
    from bot.cli.remote import server_of

    if (server := server_of(args, settings)) is not None:
        from bot.cli import remote

        return remote.cmd_head(server, run_id_arg(args.run_id))
    store = open_store(settings)
    try:
        run_id = run_id_arg(args.run_id)
        seq, hash_, mac = store.signed_head(run_id)
        mode = store.head_mode(run_id)  # after a key rotation, the key that signs now
    finally:
        store.close()
    kid = f" key {mode['key_id']}" if mode and "key_id" in mode else ""
    print(f"{run_id} audit head {seq}:{hash_ or '-'}{kid}" + (f" mac {mac}" if mac else ""))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from bot.cli.wiring import open_store, run_id_arg
    from bot.config import load_settings

    settings = load_settings()
    from bot.cli.remote import server_of

    if (server := server_of(args, settings)) is not None:
        from bot.cli import remote

        return remote.cmd_show(server, run_id_arg(args.run_id), as_json=args.json)
    store = open_store(settings)
    for ev in store.events(run_id_arg(args.run_id)):
        if args.json:
            print(json.dumps(ev.to_dict(), ensure_ascii=False))
        else:
            step = ev.payload.get("step")
            print(f"{ev.seq:>5} {ev.ts}  {ev.type:<28} {ev.actor:<14}"
                  + (f" step={step}" if step else ""))
    return 0


def cmd_refusals(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from bot.cli.wiring import open_store
    from bot.config import load_settings
    from bot.store.refusals import verify_refusals

    store = open_store(load_settings())
    try:
        rows = store.refusals.rows()
    finally:
        store.close()
    for r in rows[-max(args.limit, 0):] if args.limit > 0 else []:
        if args.json:
            print(json.dumps(asdict(r), ensure_ascii=False, default=dict))
        else:
            via = " ".join(f"{k}={v}" for k, v in sorted(r.via.items()))
            print(f"{r.seq:>5} {r.ts}  {r.actor}  {r.what}: {r.reason}" + (f"  [{via}]" if via else ""))
    verdict = verify_refusals(rows, store.keyring)
    if verdict.ok:
        how = "HMAC-SHA256" if any(r.kid for r in rows) else "plain SHA-256"
        print(f"refusals chain intact: {verdict.count} refusals ({how})")
        return 0
    if verdict.kind == "key":
        print(f"refusals: cannot verify: {verdict.reason}")
        return 2
    print(f"refusals chain BROKEN at refusal {verdict.first_bad_seq}: {verdict.reason} "
          f"({verdict.count} refusals before it verify)")
    return 1
