"""One bounded cache of parsed runbooks, shared by the runner and what front-ends read."""

from __future__ import annotations

import dataclasses
import gc
import weakref

from bot.engine.facts import RunbookFacts
from bot.runbook.source import PARSED_RUNBOOKS, ParseCache
from tests.fakes.engine_harness import runbook

STEPS = """
- id: look
  title: "Look at {n}"
  action: fake.read
  with: {name: x}
- id: change
  title: Change it
  action: fake.set
  with: {name: x, value: "on"}
"""


def book(n: int) -> str:
    return runbook(f"b{n}", STEPS.replace("{n}", str(n)))


def test_the_cache_keeps_the_most_recently_used_texts_up_to_its_size() -> None:
    assert PARSED_RUNBOOKS == 256
    cache = ParseCache(None, size=2)
    first = cache.parse(book(1), file="b1.yaml")
    assert cache.parse(book(1), file="b1.yaml") is first  # parsed once
    cache.parse(book(2), file="b2.yaml")
    cache.parse(book(1), file="b1.yaml")  # used again: b2 is now the oldest
    cache.parse(book(3), file="b3.yaml")
    assert len(cache) == 2
    assert cache.parse(book(1), file="b1.yaml") is first
    assert cache.parse(book(2), file="b2.yaml") is not cache.parse(book(3), file="b3.yaml")


def test_runs_of_many_runbooks_keep_no_more_parsed_runbooks_than_the_cache_holds(make_engine):
    e = make_engine({f"b{n}": book(n) for n in range(6)})
    source = e.runner.runbooks
    source.parsed = ParseCache(source.catalog, size=2)
    facts = RunbookFacts(runbooks=source, catalog=e.catalog)
    alive = []
    for n in range(6):
        run = e.start(f"b{n}", by="alice")  # plans, then waits for an approval of "change"
        state = e.state(run)
        assert facts.titles(state) == [("look", f"Look at {n}"), ("change", "Change it")]
        alive.append(weakref.ref(facts.runbook(state)))
        assert e.approve(run, "bob").ok  # the runner reads the runbook again to go on
        assert e.state(run).status == "succeeded"
    gc.collect()
    assert sum(ref() is not None for ref in alive) == 2  # the runner keeps no copies of its own


def test_which_steps_are_destructive_comes_from_the_engine(make_engine):
    e = make_engine({"b1": book(1)})
    facts = RunbookFacts(runbooks=e.runner.runbooks, catalog=e.catalog)
    run = e.start("b1", by="alice")
    state = e.state(run)
    assert [facts.action_destructive(a) for a in ("fake.set", "fake.read", None, "no.such")] == [
        True, False, False, False]
    assert not facts.step_destructive(state, "look") and facts.step_destructive(state, "change")
    assert facts.step_destructive(state, "nope")  # unknown: the careful answer
    # a step the engine has not started yet: from the runbook the run started with
    state.steps["change"] = dataclasses.replace(state.steps["change"], action=None, destructive=False)
    assert facts.step_destructive(state, "change")
    state.runbook_text = "not: a runbook"
    assert facts.titles(state) is None and facts.step_destructive(state, "change")
