"""What the explorer's checks make of an override (a break-glass explains a fence of the boot
its people saw, never one of a machine someone started again after they broke glass), and of
a timeout detach (the world's when the bot deleted no pod)."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from bot.sim.explore.checks import Evidence, sandbox_invariants
from tests.sim.test_verdict import GLASS, STOP, Ev


def _evidence(started: list[tuple[str, datetime]]) -> Evidence:
    used = Ev("interlock.overridden", "2026-01-01T00:06:20+00:00",
              {"step": "fence", "rule": "fence-live", "approvers": ["bob", "carol"]})
    sb: Any = SimpleNamespace(violations=[STOP])
    return Evidence(sandbox=sb, status="succeeded", events=[*GLASS, used], requester="alice",
                    group=frozenset(), world_started=started)


def test_a_fence_the_break_glass_let_through_is_overridden_not_a_violation():
    assert sandbox_invariants(_evidence([])) == []
    before = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)  # started before the people broke glass
    assert sandbox_invariants(_evidence([("i-1", before)])) == []


def test_a_fence_of_a_machine_started_again_after_the_break_glass_is_a_violation():
    after = datetime(2026, 1, 1, 0, 6, 15, tzinfo=UTC)  # granted 00:06:12, stopped 00:06:20
    [found] = sandbox_invariants(_evidence([("i-1", after)]))
    assert found.invariant == "fence-of-live" and "boot before" in found.details
    other = sandbox_invariants(_evidence([("i-2", after)]))  # another machine started: no matter
    assert other == []


def _timeout_detach(api_writes: list[str]) -> Evidence:
    from bot.sim.invariants import Violation

    v = Violation("2026-01-01T00:12:00Z", "detach-from-live",
                  "vol-1 detached from running i-1 while node n1 last reported it mounted (the "
                  "attach/detach controller's timeout detach after the pod left the unhealthy node)")
    sb: Any = SimpleNamespace(violations=[v], api_writes=api_writes)
    return Evidence(sandbox=sb, status="failed", events=[], requester="alice", group=frozenset())


def test_the_timeout_detach_of_a_pod_someone_else_deleted_is_not_the_bots():
    kubectl = "DELETE /api/v1/namespaces/search/pods/es-data-0 by kubernetes-admin"
    assert sandbox_invariants(_timeout_detach([kubectl])) == []


def test_the_timeout_detach_after_the_bot_deleted_a_pod_is_the_bots():
    bot = ("DELETE /api/v1/namespaces/search/pods/es-data-0 by "
           "system:serviceaccount:runbook-bot:runbook-bot")
    [found] = sandbox_invariants(_timeout_detach([bot]))
    assert found.invariant == "detach-from-live" and "timeout detach" in found.details
