"""A step that writes has its attempt in the audit chain before the call, destructive or not.

A non-destructive write (a cordon) used to be saved only with its result, so a process that died
in the middle of the call left no trace of the attempt in the chain. The apply below reads the
real store while it runs, as a crash at that moment would leave it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from bot.actions.authoring import action
from bot.engine.plan import Change, Plan, Result
from bot.runbook.source import TextSource
from tests.fakes.engine_harness import Engine, runbook
from tests.fakes.engine_world import FakeCatalog, make_registry


class CordonParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str


def _engine(db_url: str, tmp_path: Any) -> tuple[Engine, list[list[str]]]:
    texts = {"cordon": runbook("cordon", """\
        - id: read
          title: Read x
          action: fake.read
          with: {name: x}
        - id: cordon
          title: Cordon n1
          action: fake.cordon
          with: {name: n1}
        """)}
    e = Engine(db_url, tmp_path, texts)
    seen: list[list[str]] = []
    reg = make_registry(e.world)

    def plan(p: CordonParams, env: Any) -> Plan:
        return Plan(action="fake.cordon", params={"name": p.name},
                    changes=(Change("Node", p.name, "cordon"),))

    def apply(plan: Plan, p: CordonParams, env: Any) -> Result:
        run_id = e.db.runs()[0].run_id
        seen.append([f"{ev.type}:{ev.payload.get('step', '')}" for ev in e.db.events(run_id)])
        return Result(data={"cordoned": p.name})

    reg.add(action("fake.cordon", CordonParams, destructive=False, summary="Cordon {{ name }}",
                   description="Cordon a node.", plan=plan, apply=apply))

    e.catalog = FakeCatalog(reg)
    e.runner.catalog = e.catalog
    e.runner.runbooks = TextSource(texts, catalog=reg)
    return e, seen


def test_a_non_destructive_write_is_in_the_chain_before_its_call(db_url, tmp_path):
    e, seen = _engine(db_url, tmp_path)
    run = e.start("cordon")
    assert e.state(run).status == "succeeded", e.state(run).outcome
    [stored] = seen
    assert "step.applying:cordon" in stored  # saved before the call
    assert "step.applied:cordon" not in stored
    assert e.verified(run)
    e.db.close()
