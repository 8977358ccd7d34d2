"""Exporting a transcript of a long run, in each format.

A run of 1,000 approved steps with 10 audit events each (plan, two guard checks, approval request,
command, approval, applying, applied with API calls, a poll, success): 10,002 events with the run's
creation and end, on durable SQLite with an HMAC chain, plus 100 messages of its Slack thread. Each
format is timed end to end as ``runbook-bot export`` does it: load the run and its chain, verify
the chain, build the transcript, render it. Target: at most 1 s per format (best of 5 runs; the
CPU time is printed beside it, since on a busy machine the wall time is mostly waiting for a core).

    python bench/export.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.engine.plan import ApiCall, Change, Fact, Plan
from bot.engine.runstate import AuditDraft, RunState, StepState, Vote
from bot.engine.state import RunStatus, StepStatus
from bot.present.transcript import export
from bot.store.db import Database

STEPS = 1_000
MESSAGES = 100
TARGET_S = 1.0
START = datetime(2026, 1, 1, tzinfo=UTC)


def _iso(seconds: float) -> str:
    return (START + timedelta(seconds=seconds)).isoformat()


def _step(i: int) -> tuple[StepState, list[AuditDraft]]:
    node = f"ip-10-0-{i // 250}-{i % 250}"
    at = _iso(i * 10)
    plan = Plan(action="kube.taint_node", params={"node": node},
                changes=(Change(target_kind="Node", target=node, operation="taint",
                                before="", after="node.kubernetes.io/out-of-service"),),
                facts=(Fact(subject=f"node {node}", name="Ready", value="Unknown", read_at=at),
                       Fact(subject=f"instance i-{i:017x}", name="state", value="stopped",
                            read_at=at)),
                summary=f"Taint node {node} out-of-service")
    h = plan.hash()
    calls = [ApiCall(service="kubernetes", operation="patch_node", targets=(node,),
                     request_id=f"req-{i}").__dict__,
             ApiCall(service="kubernetes", operation="read_node", targets=(node,)).__dict__]
    result = {"node": node, "tainted": True}
    s = StepState(key=f"s{i}", step_id=f"s{i}", position=i * 10_000, status=StepStatus.SUCCEEDED,
                  title=f"Taint {node}", plan=plan.to_dict(), plan_hash=h,
                  guards=[{"expr": "plan.facts[0].value != 'True'", "ok": True, "message": ""}],
                  needs_approval=True, min_approvers=1, groups=["sre"],
                  votes=[Vote(by="bob", at=at, kind="approve", plan_hash=h)], approved=True,
                  result=result, message=f"tainted {node}", started_at=at, finished_at=_iso(i * 10 + 9))
    step = {"step": s.key}
    drafts = [
        AuditDraft("step.planned", "runbook-bot", at, step | {"plan": s.plan, "plan_hash": h,
                                                              "summary": plan.summary}),
        AuditDraft("guard.passed", "runbook-bot", at, step | {"expr": s.guards[0]["expr"]}),
        AuditDraft("approval.requested", "runbook-bot", at, step | {
            "plan_hash": h, "min_approvers": 1, "groups": ["sre"], "expires_at": _iso(i * 10 + 1800),
            "reason": "destructive action: approval is always required", "already": []}),
        AuditDraft("command.approve", "bob", _iso(i * 10 + 2), step),
        AuditDraft("approval.granted", "bob", _iso(i * 10 + 2), step | {"plan_hash": h, "count": 1,
                                                                        "needed": 1}),
        AuditDraft("guard.passed", "runbook-bot", _iso(i * 10 + 3), step | {"expr": s.guards[0]["expr"]}),
        AuditDraft("step.applying", "runbook-bot", _iso(i * 10 + 3), step | {
            "attempt": 1, "plan_hash": h, "approvers": ["bob"]}),
        AuditDraft("step.applied", "runbook-bot", _iso(i * 10 + 4), step | {
            "calls": calls, "message": f"tainted {node}", "already_done": False, "done": False}),
        AuditDraft("step.polled", "runbook-bot", _iso(i * 10 + 9), step | {
            "calls": calls[1:], "progress": "taint visible", "done": True}),
        AuditDraft("step.succeeded", "runbook-bot", _iso(i * 10 + 9), step | {
            "result": result, "outputs": {}, "message": f"tainted {node}"}),
    ]
    return s, drafts


def build_run(db: Database) -> str:
    st = RunState(run_id="rb-bench", runbook="node-dead-ngns", runbook_text="", runbook_file="",
                  title="Recover a dead node", params={"cluster": "prod-eu", "node": "many"},
                  requester="alice", created_at=_iso(0), status=RunStatus.SUCCEEDED,
                  started_at=_iso(0), finished_at=_iso(STEPS * 10), outcome="every step finished",
                  compensations=["1,000 nodes stay tainted out-of-service until replaced"])
    drafts: list[AuditDraft] = []
    for i in range(STEPS):
        s, d = _step(i)
        st.steps[s.key] = s
        drafts += d
    drafts.append(AuditDraft("run.finished", "runbook-bot", _iso(STEPS * 10), {
        "status": "succeeded", "outcome": st.outcome, "compensations": st.compensations,
        "duration_seconds": float(STEPS * 10)}))
    db.create(st, [AuditDraft("run.created", "alice", _iso(0), {
        "runbook": st.runbook, "file": "", "params": st.params, "dry_run": False, "origin": {},
        "title": st.title})])
    db.claim(st.run_id, owner="bench", now=START, ttl=3600)
    for b in range(0, len(drafts), 1_000):
        db.save(st, owner="bench", steps=[], events=drafts[b:b + 1_000], next_check_at=None,
                lease_until=START + timedelta(hours=1))
    return st.run_id


def thread() -> list[dict[str, Any]]:
    return [{"ts": f"{START.timestamp() + i * 100 + 5:.6f}", "user": "UBOB", "name": "bob",
             "text": f"update {i}: looking at the next node"} for i in range(MESSAGES)]


def main() -> int:
    ok = True
    with tempfile.TemporaryDirectory(prefix="rb-bench-") as tmp:
        db = Database(f"sqlite:///{Path(tmp) / 'export.db'}", audit_key="bench-key")
        t0 = time.perf_counter()
        run_id = build_run(db)
        n = len(db.events(run_id, payloads=False))
        print(f"run of {STEPS} steps, {n} audit events, {MESSAGES} Slack messages: "
              f"built in {time.perf_counter() - t0:.2f} s")
        messages = thread()
        for fmt in ("md", "html", "json"):
            best = cpu = float("inf")
            size = 0
            for _ in range(5):
                t1, c1 = time.perf_counter(), time.process_time()
                text = export(db, run_id, fmt=fmt, thread=messages)
                best = min(best, time.perf_counter() - t1)
                cpu = min(cpu, time.process_time() - c1)
                size = len(text.encode())
            passed = best <= TARGET_S
            ok &= passed
            print(f"  export --format {fmt:<4}: {best:.3f} s (cpu {cpu:.3f} s), {size / 1e6:.1f} MB "
                  f"(target <= {TARGET_S} s) {'PASS' if passed else 'FAIL'}")
        print(f"  load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        db.close()
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
