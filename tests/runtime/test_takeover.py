"""Two replicas as two hosts on one PostgreSQL: the one applying a step is SIGKILLed mid-apply, and
the other takes the run over within 10 seconds and finishes it, each change applied once; then
SIGTERM drains a replica that is PID 1 of its own PID namespace, in the middle of a tick."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from bot.store.db import Database
from bot.store.integrity import verify_run
from tests.fakes.engine_world import World
from tests.runtime.replica import DESTRUCTIVE, can_unshare, launch, start_run, takeover_trial

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not can_unshare(), reason="needs unshare (util-linux) as root")]


@pytest.mark.postgres
def test_a_replica_killed_mid_run_is_taken_over_by_another_host_within_ten_seconds(pg_url, tmp_path):
    trial = takeover_trial(pg_url, tmp_path)
    # it died holding the run: the survivor had to wait for the lease, not see a dead PID
    assert trial.lease_at_death is not None and trial.lease_at_death.startswith(f"{trial.dead}:")
    assert trial.takeover <= 10.0, trial
    assert trial.finish <= 10.0, trial
    world = World(tmp_path / "world.json")
    assert sorted((e["step"], e["name"]) for e in world.effects) == sorted(DESTRUCTIVE)  # once each
    db = Database(pg_url, audit_key="k")
    try:
        events = db.events(trial.run_id)
        assert verify_run(db, trial.run_id, key=db.key).ok
        applied = [e.payload for e in events if e.type == "step.applied"
                   and e.payload["step"] == "set_each[0]"]
        assert [a["already_done"] for a in applied] == [True]  # the survivor found it done
        assert [e.type for e in events].count("run.finished") == 1
        assert db.lease_of(trial.run_id) == (None, None)
    finally:
        db.close()


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]


def _wait_for(path: Path, seconds: float = 30.0) -> None:
    end = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < end, f"{path.name} did not appear"
        time.sleep(0.02)


def test_sigterm_to_pid_1_drains_the_tick_in_flight_releases_the_lease_and_exits_0(tmp_path):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    run_id = start_run(url, tmp_path)
    proc = launch(url, tmp_path, "solo", pid1=True, HOLD_APPLY="set_a")
    try:
        _wait_for(tmp_path / "applying")  # in the middle of applying set_a, holding the run
        [pid1] = _children(proc.pid)
        nspid = next(line for line in Path(f"/proc/{pid1}/status").read_text().splitlines()
                     if line.startswith("NSpid:"))
        assert nspid.split()[-1] == "1"  # its PID inside its own namespace
        db = Database(url, audit_key="k")
        assert db.lease_of(run_id)[0] is not None
        os.kill(pid1, signal.SIGTERM)
        time.sleep(0.3)  # let the signal land before the slow call returns (not a timing assertion)
        (tmp_path / "release").touch()
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "stopped" in out
        state = db.load(run_id)
        # the tick in flight finished and was saved; no step after it was begun
        assert {k: str(s.status) for k, s in state.steps.items()} == {
            "read": "succeeded", "set_a": "succeeded"}
        assert db.lease_of(run_id) == (None, None)  # released: another replica can go on at once
        assert [(e["step"], e["name"]) for e in World(tmp_path / "world.json").effects] == [("set_a", "a")]
        db.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
