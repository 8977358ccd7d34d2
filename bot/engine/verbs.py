"""The verbs people type, in one table: every front-end's grammar is generated from it.

A verb has a name, its arguments (with their kind, type and help) and, when it decides something,
the engine command it builds. Slack's ``/runbook`` parser and its usage text, and the terminal's
subcommands, are generated from this table, so ``/runbook reject rb-7k3qa stale lock`` and
``runbook-bot reject rb-7k3qa stale lock`` are the same command by construction, and a new verb is
one row here. Front-ends keep only what is theirs: who the person is (the actor) and where they
are (``via``), plus options that only make sense there (the terminal's ``--follow``).

The grammar, the same everywhere: arguments that are ``positional`` may be given in order, and
every argument but the first word may also be given as ``--name VALUE`` (or ``--name=VALUE``); a
``rest`` argument (a reason) takes the remaining words, a ``pairs`` argument takes ``key=value``
words, a ``flag`` is ``--name`` alone. Parsing in two halves: each front-end gathers raw words per
argument its own way (Slack from the text, the terminal through argparse), then ``finish`` checks
and converts them with one set of rules and messages.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from bot.engine import commands as c
from bot.engine.ids import parse_run_id
from bot.engine.provenance import Provenance
from bot.errors import RunbookBotError

Kind = Literal["word", "rest", "pairs", "flag"]
ArgType = Literal["text", "run_id", "count", "person", "choice"]
Values = Mapping[str, Any]
Via = Mapping[str, Any] | None
Built = c.Command | c.StartRun


class VerbError(RunbookBotError, ValueError):
    """What was typed is not a command; the message says what would be."""


@dataclass(frozen=True)
class Arg:
    name: str  # the key of its value, and its option spelling (``--name``, ``_`` as ``-``)
    help: str
    metavar: str = ""
    kind: Kind = "word"
    type: ArgType = "text"
    positional: bool = True  # may be given by position, in order
    required: bool = False
    missing: str = ""  # what is said when a required argument is not given
    choices: tuple[str, ...] = ()
    default: Any = None
    aliases: tuple[str, ...] = ()  # other spellings of its option (Slack's bare ``dry-run``)

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def shown(self) -> str:
        return self.metavar or self.name.upper()


@dataclass(frozen=True)
class Verb:
    name: str
    help: str
    args: tuple[Arg, ...] = ()
    # the engine command it builds from its values, the actor and where they are (None: a query)
    build: Callable[[Values, str, Via], Built] | None = None
    # where it may be typed; the API's routes are generated from the rows that name "api"
    front_ends: frozenset[str] = frozenset({"slack", "terminal", "api"})
    check: Callable[[Values], None] | None = None  # a rule across its arguments

    def usage(self, prefix: str = "") -> str:
        """``reject RUN_ID REASON...`` (after ``prefix``: ``/runbook ``, ``runbook-bot ``)."""
        words = [prefix + self.name]
        for a in self.args:
            if not a.positional:
                words.append(f"[{a.option}{'' if a.kind == 'flag' else ' ' + a.shown}]")
                continue
            shown = a.shown + ("..." if a.kind in ("rest", "pairs") else "")
            words.append(shown if a.required else f"[{shown}]")
        return " ".join(words)

    def arg(self, name: str) -> Arg:
        return next(a for a in self.args if a.name == name)


# -- the arguments verbs share ------------------------------------------------------------------

RUN_ID = Arg("run_id", "the run", "RUN_ID", type="run_id", required=True)
STEP = Arg("step", "the step (default: the one waiting)", "STEP")
STEP_OPTION = Arg("step", "the step (default: the one waiting)", "STEP", positional=False)


def _reason(required: bool) -> Arg:
    return Arg("reason", "why (recorded in the audit)", "REASON", kind="rest", required=required,
               missing="a reason (it is audited)")


# -- what each decision builds ------------------------------------------------------------------

def _approve(v: Values, actor: str, via: Via) -> Built:
    return c.Approve(run_id=v["run_id"], actor=actor, step=v.get("step"), via=via)


def _confirm(v: Values, actor: str, via: Via) -> Built:
    return c.Confirm(run_id=v["run_id"], actor=actor, step=v.get("step"), via=via)


def _retry(v: Values, actor: str, via: Via) -> Built:
    return c.Retry(run_id=v["run_id"], actor=actor, step=v.get("step"), via=via)


def _reject(v: Values, actor: str, via: Via) -> Built:
    return c.Reject(run_id=v["run_id"], actor=actor, reason=v["reason"], step=v.get("step"),
                    via=via)


def _break_glass(v: Values, actor: str, via: Via) -> Built:
    return c.BreakGlass(run_id=v["run_id"], actor=actor, reason=v["reason"], step=v.get("step"),
                        via=via, nodes=v.get("nodes"))


def _abort(v: Values, actor: str, via: Via) -> Built:
    return c.Abort(run_id=v["run_id"], actor=actor, reason=v["reason"], via=via)


def _handover(v: Values, actor: str, via: Via) -> Built:
    return c.Handover(run_id=v["run_id"], actor=actor, to=v["to"], reason=v.get("reason") or "",
                      via=via)


def _start(v: Values, actor: str, via: Via) -> Built:
    return c.StartRun(runbook=v["name"], params=dict(v.get("params") or {}), requester=actor,
                      dry_run=bool(v.get("dry_run")), origin=dict(via or {}),
                      provenance=Provenance(incident=v.get("incident")))


DIAGNOSE_KEYS = ("node", "pod", "namespace", "cluster")
EXPORT_FORMATS = ("md", "html", "json")


def _diagnose_scope(v: Values) -> None:
    scope = v.get("scope") or {}
    for key, value in scope.items():
        if key not in DIAGNOSE_KEYS or not value:
            raise VerbError(f"`/runbook diagnose` takes {', '.join(k + '=...' for k in DIAGNOSE_KEYS)}; "
                            f"got `{key}={value}`")
    if "pod" in scope and "node" in scope:
        raise VerbError("`/runbook diagnose` looks at a pod or a node, not both")


VERBS: tuple[Verb, ...] = (
    Verb("help", "this text", front_ends=frozenset({"slack"})),
    Verb("list", "the runbooks you can run", front_ends=frozenset({"slack"})),
    Verb("show", "a runbook's params and steps",
         (Arg("name", "the runbook", "NAME", required=True, missing="one runbook name"),),
         front_ends=frozenset({"slack"})),
    Verb("run", "start a run here (a form opens for missing or invalid params)", (
        Arg("name", "the runbook to run", "NAME", required=True, missing="a runbook name"),
        Arg("params", "a run parameter (repeat for several)", "KEY=VALUE", kind="pairs",
            aliases=("-p", "--param")),
        Arg("dry_run", "plan every step, change nothing", kind="flag", positional=False,
            aliases=("dry-run", "--dry_run")),
        Arg("incident", "the incident this run belongs to: an id (INC-123), a channel or a link",
            "REF", positional=False, missing="an id (INC-123), a channel or a link"),
    ), build=_start),
    Verb("status", "a run step by step (default: the latest run in this channel)",
         (Arg("run_id", "the run", "RUN_ID", type="run_id"),), front_ends=frozenset({"slack"})),
    Verb("runs", "the active runs in this channel", front_ends=frozenset({"slack"})),
    Verb("approve", "approve the step waiting for approval", (RUN_ID, STEP), build=_approve),
    Verb("confirm", "confirm a manual step is done", (RUN_ID, STEP), build=_confirm),
    Verb("retry", "plan a blocked step again (after fixing its cause)", (RUN_ID, STEP),
         build=_retry),
    Verb("reject", "reject the step waiting for approval; the run stops",
         (RUN_ID, STEP_OPTION, _reason(True)), build=_reject),
    Verb("break-glass", "override the interlock blocking a step (two people, each with a reason)", (
        RUN_ID, STEP_OPTION,
        Arg("nodes", "for an interlock that counts nodes (blast-radius): how many nodes the "
            "override allows out of service at once", "N", type="count", positional=False,
            missing="N is the number of nodes the override allows, a whole number from 1"),
        _reason(True)), build=_break_glass),
    Verb("abort", "stop a run; nothing more is applied", (RUN_ID, _reason(True)), build=_abort),
    Verb("handover", "make someone else the run's owner (incident commander)", (
        RUN_ID,
        Arg("to", "the new owner: a Slack user (@user, U0123ABCD or slack:U0123ABCD) or, at a "
            "terminal, a terminal user", "USER", type="person", required=True,
            missing="the new owner"),
        _reason(False)), build=_handover),
    Verb("export", "the run's transcript, uploaded into its thread", (
        RUN_ID, Arg("fmt", "the format", "md|html|json", type="choice", choices=EXPORT_FORMATS,
                    default="md")), front_ends=frozenset({"slack"})),
    Verb("diagnose", "scan the cluster read-only, and what to run for each finding (only you "
         "see it)", (Arg("scope", "what to look at", "node=NODE|pod=POD|namespace=NS|cluster=NAME",
                         kind="pairs"),),
         front_ends=frozenset({"slack"}), check=_diagnose_scope),
)
BY_NAME: dict[str, Verb] = {v.name: v for v in VERBS}


def verbs_for(front_end: str) -> tuple[Verb, ...]:
    return tuple(v for v in VERBS if front_end in v.front_ends)


def decisions() -> tuple[Verb, ...]:
    """The verbs that build an engine command, in every front-end."""
    return tuple(v for v in VERBS if v.build is not None)


# -- parsing: gather words per argument, then finish ----------------------------------------------

_USER_ID = re.compile(r"(?:slack:)?([UW][A-Z0-9]{2,20})")
Person = Callable[[str], str]


def slack_person(word: str) -> str:
    """A Slack user: a mention (already unescaped to ``slack:U…``) or a bare user id."""
    m = _USER_ID.fullmatch(word)
    if m is None:
        raise VerbError(f"needs the new owner as a mention (pick them from the list after @) or "
                        f"their user id (U0123ABCD); got `{word}`")
    return f"slack:{m.group(1)}"


def terminal_person(word: str) -> str:
    """A terminal user as typed, or a Slack user as ``slack:U0123ABCD``."""
    return word


def _option(verb: Verb, word: str) -> tuple[Arg, str | None] | None:
    """The argument a word names as an option (and its ``=VALUE``), or None."""
    name, eq, value = word.partition("=")
    for a in verb.args:
        if a is verb.args[0] and a.positional:
            continue
        if name == a.option or name in a.aliases:
            return a, (value if eq else None)
    return None


def gather(verb: Verb, words: Sequence[str], prefix: str = "") -> dict[str, Any]:
    """Raw values per argument from typed words: a word, or a list of words (``rest``,
    ``pairs``), or True (a flag). Options are read until a ``rest`` argument has begun, so a
    reason may contain anything."""
    raw: dict[str, Any] = {}
    queue = list(words)
    slots = [a for a in verb.args if a.positional]
    in_rest = False
    while queue:
        word = queue.pop(0)
        named = None if in_rest else _option(verb, word)
        if named is not None:
            _take_option(verb, named, queue, raw)
            continue
        slots = [a for a in slots if a.kind in ("rest", "pairs") or a.name not in raw]
        if not slots:
            raise VerbError(f"`{verb.usage(prefix)}` takes nothing more; got `{word}`")
        a = slots[0]
        if a.kind in ("rest", "pairs"):
            raw.setdefault(a.name, []).append(word)
            in_rest = a.kind == "rest"
        else:
            raw[a.name] = word
    return raw


def _take_option(verb: Verb, named: tuple[Arg, str | None], queue: list[str],
                 raw: dict[str, Any]) -> None:
    a, value = named
    if a.kind == "flag":
        raw[a.name] = True
        return
    if value is None:
        value = queue.pop(0) if queue else ""
    if not value:
        raise VerbError(f"`{a.option}` needs a value: {a.missing or a.shown}")
    if a.kind in ("rest", "pairs"):
        raw.setdefault(a.name, []).append(value)
    else:
        raw[a.name] = value


def finish(verb: Verb, raw: Mapping[str, Any], person: Person, prefix: str = "") -> dict[str, Any]:
    """The verb's values from raw words, checked and converted: one set of rules and messages
    whichever front-end gathered them. VerbError names what is wrong and what would be valid."""
    values: dict[str, Any] = {}
    for a in verb.args:
        given = raw.get(a.name)
        if given in (None, [], "", False):
            if a.required:
                raise VerbError(f"`{verb.usage(prefix)}` needs {a.missing or a.shown}")
            values[a.name] = {"flag": False, "pairs": {}, "rest": ""}.get(a.kind, a.default)
            continue
        values[a.name] = _convert(verb, a, given, person, prefix)
    if verb.check is not None:
        verb.check(values)
    return values


def _convert(verb: Verb, a: Arg, given: Any, person: Person, prefix: str) -> Any:
    if a.kind == "flag":
        return True
    if a.kind == "rest":
        return " ".join(given if isinstance(given, list) else [given])
    if a.kind == "pairs":
        return _pairs(given if isinstance(given, list) else [given], f"`{verb.usage(prefix)}`: ")
    word = str(given)
    if a.type == "run_id":
        try:
            return str(parse_run_id(word))
        except ValueError as e:
            raise VerbError(str(e)) from None
    if a.type == "count":
        if not word.isdigit() or int(word) < 1:
            raise VerbError(f"`{prefix}{verb.name} {a.option} {a.shown}`: {a.missing}; "
                            f"got `{word}`")
        return int(word)
    if a.type == "person":
        try:
            return person(word)
        except VerbError as e:
            raise VerbError(f"`{verb.usage(prefix)}` {e}") from None
    if a.type == "choice" and word.lower() not in a.choices:
        raise VerbError(f"`{verb.usage(prefix)}`: {a.help} is one of {', '.join(a.choices)}; "
                        f"got `{word}`")
    return word.lower() if a.type == "choice" else word


def _pairs(words: Sequence[str], usage: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for word in words:
        if "=" not in word:
            raise VerbError(f"{usage}expected key=value, got `{word}`")
        key, value = word.split("=", 1)
        out[key.strip()] = value.strip()
    return out


def parse_words(words: Sequence[str], person: Person, *, front_end: str,
                prefix: str = "") -> tuple[Verb, dict[str, Any]]:
    """A verb and its values from words (``["reject", "rb-7k3qa", "stale", "lock"]``); errors
    quote the usage after ``prefix``."""
    if not words:
        raise VerbError("no command given")
    verb = BY_NAME.get(words[0].lower())
    if verb is None or front_end not in verb.front_ends:
        raise VerbError(f"unknown command `{words[0]}`{nearest(words[0], front_end, prefix)}")
    return verb, finish(verb, gather(verb, words[1:], prefix), person, prefix)


def nearest(word: str, front_end: str, prefix: str = "") -> str:
    """``: did you mean `approve`?`` for the verb closest to ``word``; ``""`` when none is close."""
    names = [v.name for v in verbs_for(front_end)]
    close = difflib.get_close_matches(word.lower(), names, n=1, cutoff=0.6)
    if close:
        return f": did you mean `{prefix}{close[0]}`?"
    return f"; `{prefix}help` lists every command" if "help" in names else ""


def usage_lines(front_end: str, prefix: str) -> list[str]:
    """One line per verb: ``prefix usage``: help."""
    return [f"• `{prefix}{v.usage()}`: {v.help}" for v in verbs_for(front_end)]


@dataclass(frozen=True)
class Parsed:
    """A verb and its values, as a front-end hands it on."""

    verb: Verb
    values: Mapping[str, Any] = field(default_factory=dict)

    def command(self, actor: str, via: Via = None) -> Built:
        assert self.verb.build is not None, f"{self.verb.name} decides nothing"
        return self.verb.build(self.values, actor, via)

    def decision(self, actor: str, via: Via = None) -> c.Command:
        """The engine command of a decision verb (``approve``, ``reject``...)."""
        built = self.command(actor, via)
        assert not isinstance(built, c.StartRun), "run starts a run, it decides nothing"
        return built

    def start(self, actor: str, via: Via = None) -> c.StartRun:
        """The run that ``run`` starts."""
        built = self.command(actor, via)
        assert isinstance(built, c.StartRun), f"{self.verb.name} starts no run"
        return built
