"""The verb table: each verb parses to the same command from a Slack string and from argv.

Pure: no sandbox, no store. The examples are generated from the table itself, so a verb added
there is walked here without a new test.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

import pytest

from bot.cli import build_parser
from bot.cli.grammar import values
from bot.engine import commands as c
from bot.engine.verbs import VERBS, Arg, Parsed, Verb, decisions, verbs_for
from bot.frontends.slack.slash import USAGE, UsageError, parse

EXAMPLE = {"run_id": "rb-7k3qa", "step": "fence", "nodes": "12", "to": "slack:U0DAVE01",
           "name": "node-dead-ngns", "incident": "INC-4411", "fmt": "html"}


def _word(a: Arg) -> list[str]:
    if a.kind == "rest":
        return ["stale", "lock", "INC-4411"]
    if a.kind == "pairs":
        return ["node=ip-10-0-1-2.ec2.internal", "force=true"]
    return [EXAMPLE[a.name]]


def _by_position(verb: Verb) -> list[str]:
    """Every argument: options first, then the positional ones in order."""
    words: list[str] = []
    for a in verb.args:
        if a.positional:
            continue
        words += [a.option] if a.kind == "flag" else [a.option, *_word(a)[:1]]
    return words + [w for a in verb.args if a.positional for w in _word(a)]


def _by_option(verb: Verb) -> list[str]:
    """The first argument in place, every other given as ``--name VALUE``."""
    first, *rest = verb.args
    words = _word(first)
    for a in rest:
        if a.kind == "flag":
            words.append(a.option)
        elif a.kind == "pairs":
            for w in _word(a):
                words += [a.option, w]
        else:
            words += [a.option, " ".join(_word(a))]
    return words


def _terminal(words: list[str], verb: Verb) -> dict[str, Any]:
    args = build_parser().parse_args([verb.name, *words])
    return values(args)


def _slack(words: list[str]) -> dict[str, Any]:
    cmd = parse(shlex.join(words))
    assert cmd.parsed is not None
    return dict(cmd.parsed.values)


SHARED = [v for v in VERBS if {"slack", "terminal"} <= v.front_ends]


@pytest.mark.parametrize("verb", SHARED, ids=lambda v: v.name)
@pytest.mark.parametrize("spelling", [_by_position, _by_option], ids=["position", "option"])
def test_each_verb_parses_to_the_same_command_from_slack_and_from_argv(verb: Verb, spelling: Any) -> None:
    words = spelling(verb)
    from_slack = _slack([verb.name, *words])
    from_terminal = _terminal(words, verb)
    assert from_slack == from_terminal
    for a in verb.args:  # and every argument was understood, not defaulted
        assert from_slack[a.name] not in (None, "", {}, False), a.name
    if verb.build is not None:
        who = "slack:U0ALICE1"
        assert Parsed(verb, from_slack).command(who) == Parsed(verb, from_terminal).command(who)


def test_every_decision_builds_its_engine_command_with_the_actor_and_where_they_are() -> None:
    kinds = {"approve": c.Approve, "confirm": c.Confirm, "retry": c.Retry, "reject": c.Reject,
             "abort": c.Abort, "break-glass": c.BreakGlass, "handover": c.Handover,
             "run": c.StartRun}
    assert {v.name for v in decisions()} == set(kinds)
    for verb in decisions():
        built = Parsed(verb, _slack([verb.name, *_by_position(verb)])).command(
            "slack:U0ALICE1", {"front_end": "terminal"})
        assert isinstance(built, kinds[verb.name])
        who = built.requester if isinstance(built, c.StartRun) else built.actor
        assert who == "slack:U0ALICE1"


def test_the_slack_usage_lists_every_slack_verb_from_the_table() -> None:
    for verb in verbs_for("slack"):
        assert f"`{verb.usage()}`: {verb.help}" in USAGE


def test_every_terminal_verb_is_a_subcommand_generated_from_the_table() -> None:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for verb in verbs_for("terminal"):
        p = sub.choices[verb.name]
        assert p.get_default("verb") == verb.name
        shown = p.format_help()
        for a in verb.args:
            assert (a.option if a.kind == "flag" else a.shown) in shown
            assert a.help in " ".join(shown.split()) or f"the same as {a.shown}" in shown


@pytest.mark.parametrize("words, says", [
    ("reject rb-7k3qa", "needs a reason (it is audited)"),
    ("break-glass rb-7k3qa --nodes 0 outage", "a whole number from 1"),
    ("handover rb-7k3qa", "needs the new owner"),
    ("approve nope!", "is not a run id"),
    ("run node-dead-ngns node", "expected key=value, got `node`"),
])
def test_a_mistake_gets_the_same_words_in_slack_and_at_the_terminal(
        words: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError, match=says.replace("(", r"\(").replace(")", r"\)")) as slack:
        parse(words)
    assert "`/runbook " in str(slack.value) or "run id" in says
    argv = shlex.split(words)
    with pytest.raises(SystemExit) as exit_:
        values(build_parser().parse_args(argv))
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert says in err and ("`runbook-bot " in err or "run id" in says)
