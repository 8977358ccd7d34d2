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

from bot.engine import verbs
from bot.engine.verbs import usage_lines

USAGE = "*`/runbook` commands*\n" + "\n".join(usage_lines("slack", ""))


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
    parsed: verbs.Parsed | None = None  # the verb and its values, to build the engine command


# what Slack escapes in a command's text (``should_escape: true``), as people typed it
_LINK = re.compile(r"<(?:https?|mailto):[^|>]*\|([^>]*)>|<((?:https?|mailto):[^|>]*)>")
_CHANNEL = re.compile(r"<#(C[A-Z0-9]+)(?:\|([^>]*))?>")
_USER = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")


def unescaped(text: str) -> str:
    """The text with Slack's escaping undone: a link as its text, a channel as ``#name`` (or its
    id), a user as ``slack:U…``, so ``node=ip-10-0-1-2.ec2.internal`` is a param, not a link."""
    text = _LINK.sub(lambda m: m.group(1) if m.group(1) is not None else m.group(2), text)
    text = _CHANNEL.sub(lambda m: f"#{m.group(2)}" if m.group(2) else f"#{m.group(1)}", text)
    return _USER.sub(lambda m: f"slack:{m.group(1)}", text)


def parse(text: str) -> Slash:
    """``run node-dead-ngns node=ip-10-0-1-2`` -> Slash(verb="run", ...); UsageError if not valid.

    The grammar is the verb table's (``bot.engine.verbs``), the terminal's too."""
    try:
        words = shlex.split(unescaped(text.strip()))
    except ValueError as e:
        raise UsageError(f"could not read that: {e}") from None
    if not words:
        return Slash("help")
    try:
        verb, values = verbs.parse_words(words, verbs.slack_person, front_end="slack",
                                         prefix="/runbook ")
    except verbs.VerbError as e:
        raise UsageError(str(e)) from None
    return Slash(verb.name, **{_FIELD.get(k, k): v for k, v in values.items()},
                 parsed=verbs.Parsed(verb, values))


_FIELD = {"scope": "params"}  # the verb table's argument -> the Slash field that holds it
