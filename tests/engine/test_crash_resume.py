"""Crash-resume: a real bot process is SIGKILLed at every step boundary and in the middle of an
apply, then restarted. The run must finish, every destructive effect must happen exactly once,
and the audit chain must verify."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bot.store.db import Database
from bot.store.integrity import verify_run
from tests.fakes.engine_world import World

ROOT = Path(__file__).resolve().parents[2]
DESTRUCTIVE = {("set_a", "a"), ("set_each[0]", "b"), ("set_each[1]", "c")}

pytestmark = pytest.mark.slow


def _run(workdir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **env}
    return subprocess.run([sys.executable, "-m", "tests.engine.crash_worker", str(workdir)],
                          cwd=ROOT, env=full, text=True,
                          capture_output=True, timeout=120)


def _assert_finished_once(workdir: Path) -> None:
    world = World(workdir / "world.json")
    assert {(e["step"], e["name"]) for e in world.effects} == DESTRUCTIVE
    assert len(world.effects) == len(DESTRUCTIVE), world.effects  # each exactly once
    db = Database(f"sqlite:///{workdir / 'state.db'}", audit_key="k")
    run_id = (workdir / "run-id").read_text()
    state = db.load(run_id)
    assert state.status == "succeeded", state.outcome
    verdict = verify_run(db, run_id, key=db.key)
    assert verdict.ok, verdict
    assert [e.type for e in db.events(run_id)].count("run.finished") == 1
    db.close()


def _saves_in_a_clean_run(tmp_path_factory: pytest.TempPathFactory) -> int:
    workdir = tmp_path_factory.mktemp("clean")
    done = _run(workdir)
    assert done.returncode == 0, done.stderr
    _assert_finished_once(workdir)
    return int(done.stdout.split()[1])


@pytest.fixture(scope="module")
def boundaries(tmp_path_factory):
    return _saves_in_a_clean_run(tmp_path_factory)


def test_a_clean_run_has_a_step_boundary_for_every_durable_save(boundaries):
    assert boundaries >= 10


def test_a_kill_at_every_step_boundary_resumes_and_applies_each_change_once(tmp_path, boundaries):
    # each process is killed right after its first durable save, and the next one resumes: a
    # chain of restarts that kills the run once at every step boundary of the clean run
    kills = 0
    while True:
        proc = _run(tmp_path, CRASH_AT_SAVE="1")
        if proc.returncode == 0:
            break
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        kills += 1
        assert kills <= 2 * boundaries, "the run made no progress across restarts"
    assert kills >= boundaries - 1
    _assert_finished_once(tmp_path)


@pytest.mark.parametrize("key", ["set_a", "set_each[0]", "set_each[1]"])
def test_a_kill_in_the_middle_of_an_apply_re_applies_idempotently(tmp_path, key):
    crashed = _run(tmp_path, FAKE_CRASH_AFTER_EFFECT=key)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    resumed = _run(tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    _assert_finished_once(tmp_path)
    db = Database(f"sqlite:///{tmp_path / 'state.db'}", audit_key="k")
    run_id = (tmp_path / "run-id").read_text()
    applied = [e.payload for e in db.events(run_id) if e.type == "step.applied"
               and e.payload["step"] == key]
    assert [a["already_done"] for a in applied] == [True]  # the resumed apply found it done
    db.close()
