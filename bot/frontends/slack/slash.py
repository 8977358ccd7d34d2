"""``/runbook`` subcommands: parse what a person typed, and do it off the request thread.

Parsing is pure and fast, so the listener can answer usage mistakes in its acknowledgement. The
work itself (starting a run, reading the store, submitting a decision, uploading an export) runs
on the front-end's worker pool after the ack and answers with ephemerals and the run card. Every
decision becomes an engine command, the same one the terminal builds: this module checks nothing
about who may do what.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from bot.engine.ids import parse_run_id

USAGE = """\
*`/runbook` commands*
• `help`: this text
• `list`: the runbooks you can run
• `show NAME`: a runbook's params and steps
• `run NAME key=value ...`: start a run here (a form opens for missing or invalid params); \
add `--dry-run` to only plan, `--incident INC-123` (or a channel, a link) to link it to an incident
• `status [RUN_ID]`: a run step by step (default: the latest run in this channel)
• `runs`: the active runs in this channel
• `approve RUN_ID [STEP]`, `reject RUN_ID reason...`: decide without the buttons
• `confirm RUN_ID [STEP]`, `retry RUN_ID [STEP]`: confirm a manual step, plan a blocked step again
• `break-glass RUN_ID [--nodes N] reason...`: override the interlock blocking a step (two \
people); `--nodes N` for the out-of-service cap: how many nodes the override allows
• `abort RUN_ID reason...`: stop a run; nothing more is applied
• `handover RUN_ID @user [reason...]`: make someone else the run's owner (incident commander)
• `export RUN_ID [md|html|json]`: the run's transcript, uploaded into its thread
• `diagnose [node=NODE | pod=POD [namespace=NS] | namespace=NS] [cluster=NAME]`: scan the \
cluster read-only, and what to run for each finding (only you see it)"""

EXPORT_FORMATS = ("md", "html", "json")
DIAGNOSE_KEYS = ("node", "pod", "namespace", "cluster")


class UsageError(ValueError):
    """What was typed is not a command; the message says what would be."""


@dataclass(frozen=True)
class Slash:
    verb: str
    name: str = ""  # runbook name (show, run)
    run_id: str | None = None
    step: str | None = None
    reason: str = ""
    params: dict[str, str] = field(default_factory=dict)
    dry_run: bool = False
    fmt: str = "md"
    nodes: int | None = None  # break-glass of a rule that counts nodes: how many it allows
    incident: str | None = None
    to: str = ""  # handover: the new owner's identity


def _run_id(word: str | None, verb: str) -> str:
    if not word:
        raise UsageError(f"`/runbook {verb}` needs a run id, like `/runbook {verb} rb-7k3q2`")
    try:
        return parse_run_id(word)
    except ValueError as e:
        raise UsageError(str(e)) from None


# what Slack escapes in a command's text (``should_escape: true``), as people typed it
_LINK = re.compile(r"<(?:https?|mailto):[^|>]*\|([^>]*)>|<((?:https?|mailto):[^|>]*)>")
_CHANNEL = re.compile(r"<#(C[A-Z0-9]+)(?:\|([^>]*))?>")
_USER = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")
_USER_ID = re.compile(r"(?:slack:)?([UW][A-Z0-9]{2,20})")


def unescaped(text: str) -> str:
    """The text with Slack's escaping undone: a link as its text, a channel as ``#name`` (or its
    id), a user as ``slack:U…``, so ``node=ip-10-0-1-2.ec2.internal`` is a param, not a link."""
    text = _LINK.sub(lambda m: m.group(1) if m.group(1) is not None else m.group(2), text)
    text = _CHANNEL.sub(lambda m: f"#{m.group(2)}" if m.group(2) else f"#{m.group(1)}", text)
    return _USER.sub(lambda m: f"slack:{m.group(1)}", text)


def _user(word: str | None) -> str:
    if word:
        m = _USER_ID.fullmatch(word)
        if m:
            return f"slack:{m.group(1)}"
    raise UsageError("`/runbook handover RUN_ID @user [reason...]` needs the new owner as a "
                     "mention (pick them from the list after @) or their user id (U0123ABCD)")


def parse(text: str) -> Slash:
    """``run node-dead-ngns node=ip-10-0-1-2`` -> Slash(verb="run", ...); UsageError if not valid."""
    try:
        words = shlex.split(unescaped(text.strip()))
    except ValueError as e:
        raise UsageError(f"could not read that: {e}") from None
    if not words:
        return Slash("help")
    verb, rest = words[0].lower(), words[1:]
    if verb in ("help", "list", "runs"):
        if rest:
            raise UsageError(f"`/runbook {verb}` takes nothing after it")
        return Slash(verb)
    if verb == "show":
        if len(rest) != 1:
            raise UsageError("`/runbook show NAME` takes one runbook name")
        return Slash(verb, name=rest[0])
    if verb == "run":
        if not rest:
            raise UsageError("`/runbook run NAME key=value ...` needs a runbook name")
        params: dict[str, str] = {}
        dry_run = False
        incident: str | None = None
        words_ = iter(rest[1:])
        for word in words_:
            if word in ("--dry-run", "dry-run", "--dry_run"):
                dry_run = True
                continue
            if word == "--incident" or word.startswith("--incident="):
                incident = word.partition("=")[2] or next(words_, "")
                if not incident:
                    raise UsageError("`--incident` needs a value: an id (INC-123), a channel or "
                                     "a link")
                continue
            if "=" not in word:
                raise UsageError(f"expected key=value, got `{word}`")
            key, value = word.split("=", 1)
            params[key.strip()] = value.strip()
        return Slash(verb, name=rest[0], params=params, dry_run=dry_run, incident=incident)
    if verb == "status":
        if len(rest) > 1:
            raise UsageError("`/runbook status [RUN_ID]` takes at most a run id")
        return Slash(verb, run_id=_run_id(rest[0], verb) if rest else None)
    if verb in ("approve", "confirm", "retry"):
        if len(rest) not in (1, 2):
            raise UsageError(f"`/runbook {verb} RUN_ID [STEP]`")
        return Slash(verb, run_id=_run_id(rest[0], verb), step=rest[1] if len(rest) == 2 else None)
    if verb in ("reject", "abort", "break-glass"):
        run_id = _run_id(rest[0] if rest else None, verb)
        words, nodes = rest[1:], None
        if verb == "break-glass" and words[:1] == ["--nodes"]:
            if len(words) < 2 or not words[1].isdigit() or int(words[1]) < 1:
                raise UsageError("`/runbook break-glass RUN_ID --nodes N reason...`: N is the "
                                 "number of nodes the override allows, a whole number from 1")
            nodes, words = int(words[1]), words[2:]
        reason = " ".join(words)
        if not reason:
            raise UsageError(f"`/runbook {verb} RUN_ID reason...` needs a reason (it is audited)")
        return Slash(verb, run_id=run_id, reason=reason, nodes=nodes)
    if verb == "diagnose":
        scope: dict[str, str] = {}
        for word in rest:
            key, sep, value = word.partition("=")
            if not sep or key not in DIAGNOSE_KEYS or not value:
                raise UsageError(f"`/runbook diagnose` takes {', '.join(k + '=...' for k in DIAGNOSE_KEYS)}; "
                                 f"got `{word}`")
            scope[key] = value
        if "pod" in scope and "node" in scope:
            raise UsageError("`/runbook diagnose` looks at a pod or a node, not both")
        return Slash(verb, params=scope)
    if verb == "handover":
        run_id = _run_id(rest[0] if rest else None, verb)
        return Slash(verb, run_id=run_id, to=_user(rest[1] if len(rest) > 1 else None),
                     reason=" ".join(rest[2:]))
    if verb == "export":
        run_id = _run_id(rest[0] if rest else None, verb)
        fmt = rest[1].lower() if len(rest) > 1 else "md"
        if fmt not in EXPORT_FORMATS or len(rest) > 2:
            raise UsageError(f"`/runbook export RUN_ID [{'|'.join(EXPORT_FORMATS)}]`")
        return Slash(verb, run_id=run_id, fmt=fmt)
    raise UsageError(f"unknown command `{verb}`")
