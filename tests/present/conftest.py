"""A deterministic run for transcript tests: fixed run id, manual clock, keyed audit chain.

The run reads a value, fences a (fake) node with an approval and leaves a compensation open,
retries a flaky step, waits on a slow one, and ends; two people talk in its Slack thread meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from bot.actions.authoring import action
from bot.engine.commands import StartRun
from bot.engine.plan import ApiCall, Change, Fact, Plan, Result
from bot.errors import RetryableError
from bot.present.transcript import Transcript, build
from bot.store.integrity import sealing_key, verify_run
from tests.fakes.engine_harness import Engine, make_engine, runbook

RUN_ID = "rb-3k7qx"
EXPORTED_AT = datetime(2026, 1, 1, 2, 0, tzinfo=UTC)

RUNBOOK = runbook("fence-node", """
- id: read
  title: "Read {{ params.node }}"
  action: tx.read
  with: {node: "{{ params.node }}"}
  outputs:
    ready: result.ready
- id: fence
  title: "Fence {{ params.node }}"
  action: tx.fence
  with: {node: "{{ params.node }}"}
  guards:
    - expr: plan.facts[0].value != 'True'
      message: "{{ params.node }} is Ready: do not fence it"
  approval: {required: true, description: "Fence {{ params.node }} in {{ params.cluster }}."}
- id: flaky
  title: Settle
  action: tx.flaky
  with: {node: "{{ params.node }}"}
  retries: {count: 2, backoff: 10}
- id: slow
  title: Wait for the volumes
  action: tx.slow
  with: {node: "{{ params.node }}"}
""", params="""
node: {type: string, required: true}
cluster: {type: string, default: prod-eu}
""", approvals="""
groups: [sre]
""")


class NodeParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    node: str


def add_actions(e: Engine) -> None:
    """This module's own fake actions, so the golden files change only when the transcript does.

    ``tx.read`` reads, ``tx.fence`` is destructive, reports an API call and leaves a compensation
    open, ``tx.flaky`` fails once with a retryable error, ``tx.slow`` needs a second poll.
    """
    tries: dict[str, int] = {}

    def once(name: str) -> int:
        tries[name] = tries.get(name, 0) + 1
        return tries[name]

    def plan_nothing(name: str) -> Callable[[NodeParams, Any], Plan]:
        return lambda p, env: Plan(action=name, params={})

    def apply_read(plan: Plan, p: NodeParams, env: Any) -> Result:
        return Result(data={"node": p.node, "ready": "Unknown"})

    def plan_fence(p: NodeParams, env: Any) -> Plan:
        return Plan(action="tx.fence", params={},
                    changes=(Change(target_kind="Instance", target=f"i-{p.node}",
                                    operation="stop", before="running", after="stopped"),),
                    facts=(Fact(subject=f"node {p.node}", name="Ready", value="Unknown",
                                read_at=env.now_iso()),
                           Fact(subject=f"instance i-{p.node}", name="state",
                                value="running", read_at=env.now_iso())))

    def apply_fence(plan: Plan, p: NodeParams, env: Any) -> Result:
        env.ctx.calls.append(ApiCall(service="ec2", operation="StopInstances",
                                     targets=(f"i-{p.node}",), request_id="req-0001"))
        return Result(data={"instance": f"i-{p.node}", "compensation":
                            f"instance i-{p.node} stays stopped: start it once {p.node} "
                            "is replaced"}, message=f"stopped i-{p.node}")

    def apply_flaky(plan: Plan, p: NodeParams, env: Any) -> Result:
        if once("flaky") == 1:
            env.ctx.calls.append(ApiCall(service="kubernetes", operation="list_pods",
                                         targets=(p.node,), outcome="TooManyRequests"))
            raise RetryableError("the API server is busy", service="kubernetes",
                                 operation="list_pods", code="TooManyRequests")
        return Result(data={"settled": True})

    def apply_slow(plan: Plan, p: NodeParams, env: Any) -> Result:
        n = once("slow")
        return Result(data={"polls": n}, done=n >= 2, retry_after=30,
                      progress=f"{n} of 2 volumes detached")

    for reg in (e.catalog.reg, e.runner.runbooks.catalog):
        for name, destructive, summary, plan, apply in (
                ("tx.read", False, "Read node {{ node }}", plan_nothing("tx.read"), apply_read),
                ("tx.fence", True, "Fence node {{ node }}", plan_fence, apply_fence),
                ("tx.flaky", False, "Settle {{ node }}", plan_nothing("tx.flaky"), apply_flaky),
                ("tx.slow", False, "Wait for the volumes of {{ node }}", plan_nothing("tx.slow"),
                 apply_slow)):
            reg.add(action(name, NodeParams, destructive=destructive, summary=summary,
                           description=summary, plan=plan, apply=apply))


def thread(node: str = "ip-10-0-1-7") -> list[dict[str, str]]:
    base = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    return [
        {"ts": f"{base + 30:.6f}", "user": "UBOB", "name": "bob",
         "text": f"looking at {node} now"},
        {"ts": f"{base + 90:.6f}", "user": "UALICE", "name": "alice",
         "text": "volumes are detaching, waiting"},
    ]


def run_scenario(e: Engine, monkeypatch: pytest.MonkeyPatch, *, node: str = "ip-10-0-1-7",
                 run_id: str = RUN_ID) -> str:
    add_actions(e)
    monkeypatch.setattr("bot.runtime.runner.new_run_id", lambda: run_id)
    run = e.runner.start(StartRun(runbook="fence-node", params={"node": node}, requester="alice",
                                  origin={"frontend": "slack", "channel": "C0INCIDENT",
                                          "thread": "1767225600.000100"})).run_id
    e.runner.drive(run)
    e.clock.advance(60)
    out = e.approve(run, "bob")
    assert out.ok, out.message
    e.advance(10)  # the flaky step's retry
    e.advance(30)  # the slow step's second poll
    assert e.state(run).status == "succeeded", e.state(run).outcome
    return run


def transcript_of(e: Engine, run: str, *, tz: str | None = None,
                  messages: list[dict[str, str]] | None = None) -> Transcript:
    events = e.db.events(run)
    seq, hash_, mac = e.db.signed_head(run)
    verdict = verify_run(e.db, run, key=e.db.keyring)
    return build(state=e.state(run), events=events, head=(seq, hash_), verdict=verdict, keyed=True,
                 head_mac=mac, seal_key=sealing_key(verdict, e.db.keyring),
                 thread=thread() if messages is None else messages, tz=tz,
                 exported_at=EXPORTED_AT)


@pytest.fixture
def scenario(make_engine, monkeypatch):
    """The engine and run id of the deterministic run."""
    e = make_engine({"fence-node": RUNBOOK})
    run = run_scenario(e, monkeypatch)
    return e, run

__all__ = ["make_engine"]
