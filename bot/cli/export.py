"""``export RUN_ID``: the post-incident transcript of a run, as Markdown, HTML or JSON.

The transcript is built from the store (the run, its audit chain and head) and the chain is
verified on the way, so the document states whether its record is intact, broken (naming the first
bad seq), or unverified (written with an audit key this process was not given). The exit status is
``audit verify``'s: 0 intact, 1 tampered, 2 cannot verify; the document is written in every case,
and a line on standard error says why the status is not 0. The JSON format carries every audit
event, so ``audit verify --file`` can check the export later without a database.

The run's Slack conversation is merged into the timeline when given with ``--thread FILE``: the
messages of the thread as a JSON list of ``{"ts", "user", "name", "text"}`` (what the Slack
front-end collects with ``conversations.replies`` and resolved names).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("export", help="a run's post-incident transcript (md, html, json)",
                       description="Export the transcript of RUN_ID: summary, every step's plan, "
                       "evidence, approvals and API calls, the timeline, open compensations and "
                       "the audit chain's verify result.")
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("--format", "-f", dest="fmt", choices=("md", "html", "json"), default="md",
                   help="Markdown (default), a self-contained HTML file, or JSON with every audit "
                   "event (checkable offline with `audit verify --file`)")
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of standard output")
    p.add_argument("--tz", metavar="ZONE", help="show times in ZONE (an IANA name such as "
                   "Europe/Paris); default UTC")
    p.add_argument("--thread", metavar="FILE.json",
                   help="the run's Slack thread messages, to merge into the timeline")
    from bot.cli.remote import add_server_option

    add_server_option(p)
    p.set_defaults(handler=cmd_export)


def _thread(path: str | None) -> list[dict[str, Any]]:
    from bot.errors import ConfigError

    if not path:
        return []
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read the thread messages in {path}: {e}") from e
    if not isinstance(raw, list) or not all(isinstance(m, dict) and "ts" in m for m in raw):
        raise ConfigError(f"{path}: expected a JSON list of messages with ts, user, name and text")
    return raw


def cmd_export(args: argparse.Namespace) -> int:
    from bot.cli.wiring import open_store, run_id_arg
    from bot.config import load_settings
    from bot.errors import ConfigError
    from bot.present.transcript import export_verified
    from bot.store.integrity import exit_status

    settings = load_settings()
    from bot.cli.remote import server_of

    if (server := server_of(args, settings)) is not None:
        from bot.cli import remote

        data, code = remote.cmd_export(args, server, run_id_arg(args.run_id))
        _write(args, data)
        return code
    thread = _thread(args.thread)
    store = open_store(settings)
    try:
        text, verdict = export_verified(store, run_id_arg(args.run_id), fmt=args.fmt, tz=args.tz,
                                        thread=thread)
    finally:
        store.close()
    if not args.output:
        sys.stdout.write(text)
    else:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"cannot write {args.output}: {e}") from e
        print(f"wrote {args.output} ({args.fmt}, {len(text.encode()):,} bytes)", file=sys.stderr)
    code = exit_status(verdict)
    if code == 2:
        print(f"{args.run_id}: audit chain unverified, cannot verify: {verdict.reason}",
              file=sys.stderr)
    elif code == 1:
        at = f" at seq {verdict.first_bad_seq}" if verdict.first_bad_seq is not None else ""
        print(f"{args.run_id}: audit chain BROKEN{at}: {verdict.reason}", file=sys.stderr)
    return code


def _write(args: argparse.Namespace, data: bytes) -> None:
    from bot.errors import ConfigError

    if not args.output:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    try:
        Path(args.output).write_bytes(data)
    except OSError as e:
        raise ConfigError(f"cannot write {args.output}: {e}") from e
    print(f"wrote {args.output} ({args.fmt}, {len(data):,} bytes)", file=sys.stderr)
