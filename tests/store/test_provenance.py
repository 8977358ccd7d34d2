"""The store's provenance queries on both databases: the runs that follow on from a run, and the
run holding a compensation that a later run lifts (what names a node-recovered run's parent)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.engine.provenance import out_of_service_hold
from bot.engine.runstate import AuditDraft, RunState
from bot.engine.state import RunStatus
from bot.store.db import Database

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _run(db: Database, rid: str, runbook: str, minute: int, *, parent: str | None = None,
         holds: list[str] | None = None, dry_run: bool = False,
         status: RunStatus = RunStatus.SUCCEEDED) -> None:
    st = RunState(run_id=rid, runbook=runbook, runbook_text="x", runbook_file="r.yaml", title="R",
                  params={}, requester="alice", created_at=(T0 + timedelta(minutes=minute)).isoformat(),
                  dry_run=dry_run, status=status, parent=parent, incident="INC-1",
                  compensations=list(holds or ()))
    db.create(st, [AuditDraft(type="run.created", actor="alice", ts=T0.isoformat(),
                              payload={"runbook": runbook})])


def test_the_newest_run_holding_a_compensation_until_it_is_lifted(db_url):
    db = Database(db_url)
    hold = out_of_service_hold("ip-10-0-1-2.ec2.internal")
    other = out_of_service_hold("ip-10-0-1-22.ec2.internal")  # a prefix of no other node name
    _run(db, "rb-old11", "node-dead-ngns", 1, holds=[hold])
    _run(db, "rb-new11", "node-dead-ngns", 2, holds=[hold])
    _run(db, "rb-dry11", "node-dead-ngns", 3, holds=[hold], dry_run=True)
    _run(db, "rb-oth11", "node-dead-ngns", 4, holds=[other])
    assert db.holding(hold, lifted_by="node-recovered") == "rb-new11"
    assert db.holding(out_of_service_hold("ip-10-0-1-%"), lifted_by="node-recovered") is None
    _run(db, "rb-fai11", "node-recovered", 5, parent="rb-new11", status=RunStatus.FAILED)
    assert db.holding(hold, lifted_by="node-recovered") == "rb-new11"  # a failed one lifts nothing
    _run(db, "rb-rec11", "node-recovered", 6, parent="rb-new11")
    # lifted: the older run's record of the same taint is not open either
    assert db.holding(hold, lifted_by="node-recovered") is None
    assert [c.run_id for c in db.children("rb-new11")] == ["rb-fai11", "rb-rec11"]
    assert db.children("rb-rec11") == []
    db.close()
