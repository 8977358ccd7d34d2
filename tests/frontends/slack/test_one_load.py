"""An Approve click loads its run once: the channel rule, the fresh read of the approver groups,
the engine's decision and the drive up to the next wait all work on that one load, under one
lease (``bot.runtime.facade.Runtime.decide``)."""

from __future__ import annotations

import threading
from typing import Any

from tests.frontends.slack.conftest import BOB, Bot


class CountingStore:
    """The real store, counting the runs it loads (and the leases it hands out)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._guard = threading.Lock()
        self.loads: list[str] = []
        self.claims = 0

    def load(self, run_id: str) -> Any:
        with self._guard:
            self.loads.append(run_id)
        return self._inner.load(run_id)

    def claim(self, run_id: str, **kw: Any) -> bool:
        with self._guard:
            self.claims += 1
        return bool(self._inner.claim(run_id, **kw))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_an_approve_click_loads_its_run_once(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    run = bot.run_id()
    message = bot.approval("change")
    counting = CountingStore(bot.db)
    bot.runner.store = counting
    bot.runner.leases.store = counting
    bot.click(message, "rb_approve", user=BOB)
    assert bot.world.get("web-1") == "on"  # approved, applied, and driven on to the next wait
    assert bot.db.load(run).steps["taint"].status == "awaiting_approval"
    assert counting.loads == [run]
    assert counting.claims == 1


def test_a_typed_approval_loads_its_run_once_too(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    run = bot.run_id()
    counting = CountingStore(bot.db)
    bot.runner.store = counting
    bot.runner.leases.store = counting
    bot.command(f"approve {run} change", user=BOB)
    assert bot.world.get("web-1") == "on"
    assert counting.loads == [run] and counting.claims == 1


def test_a_click_from_another_channel_loads_once_and_claims_nothing_more(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    run = bot.run_id()
    message = bot.approval("change")
    counting = CountingStore(bot.db)
    bot.runner.store = counting
    bot.runner.leases.store = counting
    bot.click(message, "rb_approve", user=BOB, channel="C0ELSEWHERE")
    assert "belongs to" in bot.fake.ephemerals(BOB)[-1]["text"]
    assert counting.loads == [run] and bot.world.get("web-1") is None
