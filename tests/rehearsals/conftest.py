"""Rehearsals run the shipped runbooks against sandbox scenarios, approvals scripted from a second
identity. Each test gets a fresh sandbox (one per process at a time: moto's state is global)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("moto", reason="rehearsals need the sandbox: pip install runbook-bot[sim]")

from bot.sim.rehearsal import Rehearsal


@pytest.fixture
def rehearse(tmp_path):
    opened: list[Rehearsal] = []

    def start(scenario: str, policy: dict[str, Any] | None = None, *, role_arn: str | None = None,
              **options: Any) -> Rehearsal:
        """``options``: the sandbox's; ``role_arn``: the cluster's, so EC2 writes go through
        the run's assumed-role sessions."""
        r = Rehearsal(scenario, options=options, workdir=tmp_path / f"r{len(opened)}",
                      policy=policy or {}, role_arn=role_arn)
        r.start()
        opened.append(r)
        return r

    yield start
    for r in opened:
        r.stop()


def taint_keys(node: dict[str, Any]) -> list[str]:
    return [t["key"] for t in (node.get("spec") or {}).get("taints") or ()]


def types(r: Rehearsal, run_id: str) -> list[tuple[str, str]]:
    return [(e.type, str(e.payload.get("step", ""))) for e in r.events(run_id)]


def assert_overridden(r: Rehearsal, run_id: str, *, rule: str) -> list[str]:
    """What a rehearsal that broke glass must show: an intact audit chain, no unexplained
    violation, no call IAM would refuse, and every violation explained by an override of
    ``rule`` naming two people and their reasons. Returns the overrides in words."""
    assert r.verified(run_id)
    verdict = r.judge(run_id)
    assert verdict.violations == (), verdict.violations
    assert verdict.overridden and not verdict.clean
    assert all(o.rule == rule and len(set(o.approvers)) == 2 and all(o.reasons)
               for o in verdict.overridden), verdict.overridden
    assert r.sandbox.ec2.refused == [], r.sandbox.ec2.refused
    return [o.words() for o in verdict.overridden]


def assert_clean(r: Rehearsal, run_id: str, *, repaired: str | None = None) -> None:
    """What every rehearsal must show: an intact audit chain, no invariant violated, no call that
    production's IAM policy would refuse.

    ``repaired`` names a node a person repaired while it still carried the out-of-service taint:
    that window (instance running, taint on) is expected until node-recovered removes the taint.
    """
    assert r.verified(run_id)
    verdict = r.judge(run_id)
    bad = [v for v in verdict.violations
           if not (repaired and v.kind == "oos-taint-on-running" and repaired in v.details)]
    assert bad == [], bad
    # a write made under break-glass is not a pass: a test that breaks glass says so
    assert verdict.overridden == (), [o.words() for o in verdict.overridden]
    assert r.sandbox.ec2.refused == [], r.sandbox.ec2.refused  # IAM would have refused these
