"""Engine overhead per step, and the speed of ``audit verify``.

1. A 1,000-step runbook of no-op actions runs to the end with durable SQLite state (WAL, on disk)
   and an HMAC audit chain: every step is planned, recorded as applying, applied and recorded as
   succeeded, two transactions and four audit events per step. Target: at most 2 ms per step.
2. ``verify_events`` over a 100,000-event chain read back from the store. Target: at most 2 s.

    python bench/engine.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.actions.authoring import action
from bot.actions.registry import Registry
from bot.config import PolicyConfig
from bot.engine.commands import StartRun
from bot.engine.plan import Plan, Result
from bot.engine.ports import ManualClock, StepContext
from bot.engine.runstate import AuditDraft, RunState
from bot.runbook.source import TextSource
from bot.runtime.runner import Runner
from bot.store.audit import verify_events
from bot.store.db import Database

STEPS = 1_000
EVENTS = 100_000
STEP_TARGET_MS = 2.0
VERIFY_TARGET_S = 2.0


class NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    n: int = 0


def _unused(*args: Any) -> Any:
    raise AssertionError("NoopCatalog plans and applies itself")


class NoopCatalog:
    def __init__(self) -> None:
        # the catalog plans and applies itself (no Env); the spec is what runbooks are validated on
        self.reg = Registry((action("noop", NoParams, destructive=False, summary="Nothing",
                                    description="Does nothing.", plan=_unused, apply=_unused),))

    def spec(self, name: str) -> Any:
        return self.reg.get(name)

    def plan(self, name: str, params: Any, ctx: StepContext) -> Plan:
        checked = NoParams.model_validate(dict(params))
        return Plan(action=name, params=checked.model_dump(), summary="Nothing")

    def apply(self, name: str, plan: Plan, ctx: StepContext) -> Result:
        return replace(Result(data={"n": plan.params["n"]}), calls=tuple(ctx.calls))

    def cluster_of(self, name: str, params: Any, ctx: StepContext) -> str | None:
        return None  # noop touches no cluster

    def resolve_context(self, cluster: str, ctx: StepContext) -> dict[str, Any]:
        return {}


def runbook_text(n: int) -> str:
    steps = "".join(f"    - {{id: s{i}, title: \"Step {i}\", action: noop, with: {{n: {i}}}}}\n"
                    for i in range(n))
    return ("apiVersion: runbook-bot/v1\nkind: Runbook\nmetadata: {name: long, title: Long}\n"
            f"spec:\n  steps:\n{steps}")


def bench_steps(workdir: Path) -> float:
    catalog = NoopCatalog()
    db = Database(f"sqlite:///{workdir / 'steps.db'}", audit_key="bench-key")
    t0 = time.perf_counter()
    source = TextSource({"long": runbook_text(STEPS)}, catalog=catalog.reg)
    runner = Runner(store=db, catalog=catalog, runbooks=source, policy=PolicyConfig(),
                    clock=ManualClock())
    state = runner.start(StartRun(runbook="long", params={}, requester="bench"))
    load_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    final = runner.drive(state.run_id)
    run_s = time.perf_counter() - t1
    assert final.status == "succeeded", final.outcome
    n_events = len(db.events(state.run_id))
    per_step = run_s / STEPS * 1000
    print(f"runbook of {STEPS} no-op steps: parse+validate+start {load_s:.2f} s")
    print(f"  run to the end: {run_s:.2f} s, {per_step:.2f} ms per step "
          f"(target <= {STEP_TARGET_MS} ms), {n_events} audit events")
    db.close()
    return per_step


def bench_verify(workdir: Path) -> float:
    db = Database(f"sqlite:///{workdir / 'verify.db'}", audit_key="bench-key")
    ts = datetime(2026, 1, 1, tzinfo=UTC).isoformat()
    st = RunState(run_id="rb-bench", runbook="long", runbook_text="", runbook_file="",
                  title="verify", params={}, requester="bench", created_at=ts)
    db.create(st, [])
    db.claim(st.run_id, owner="bench", now=datetime(2026, 1, 1, tzinfo=UTC), ttl=3600)
    batch = 1_000
    for b in range(EVENTS // batch):
        drafts = [AuditDraft(type="step.applied", actor="bench", ts=ts,
                             payload={"step": f"s{b * batch + i}", "calls": [
                                 {"service": "kubernetes", "operation": "read_node",
                                  "targets": ["ip-10-0-1-2"], "outcome": "ok"}]})
                  for i in range(batch)]
        db.save(st, owner="bench", steps=[], events=drafts, next_check_at=None,
                lease_until=datetime(2027, 1, 1, tzinfo=UTC))
    t0 = time.perf_counter()
    events = db.events(st.run_id, payloads=False)
    read_s = time.perf_counter() - t0
    seq, head, mac = db.signed_head(st.run_id)
    t1 = time.perf_counter()
    verdict = verify_events(run_id=st.run_id, events=events, head_seq=seq, head_hash=head, key=db.key,
                            head_mac_=mac)
    verify_s = time.perf_counter() - t1
    assert verdict.ok and verdict.count == EVENTS, verdict
    total = read_s + verify_s
    print(f"audit verify over {EVENTS} events: read {read_s:.2f} s + verify {verify_s:.2f} s "
          f"= {total:.2f} s (target <= {VERIFY_TARGET_S} s)")
    db.close()
    return total


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="rb-bench-") as tmp:
        per_step = bench_steps(Path(tmp))
        verify_s = bench_verify(Path(tmp))
    ok = per_step <= STEP_TARGET_MS and verify_s <= VERIFY_TARGET_S
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
