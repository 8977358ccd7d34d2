"""What an on-call engineer reads at the terminal: params refused before a run exists, a
``status`` whose every step has its id and a title, ``runs`` with relative times.

Through ``bot.cli.main`` with a real config file (clusters named in it), runbooks directory and
SQLite store, on an injected clock where time matters."""

from __future__ import annotations

import sqlite3
import textwrap

import pytest

from bot.cli import main

WAIT = """\
apiVersion: runbook-bot/v1
kind: Runbook
metadata: {name: drain-wait, title: Drain a node}
spec:
  params:
    node: {type: string, required: true, pattern: '^[a-z0-9.-]+$', description: the node}
    grace: {type: duration, default: 6m}
    cluster: {type: string}
  approvals: {groups: [sre]}
  steps:
    - id: check
      title: "Check {{ params.node }} for {{ params.grace }}"
      action: notify
      with: {message: "checking {{ params.node }}"}
      approval:
        required: true
        description: "Make sure {{ params.node }} is really dead."
    - id: later
      title: "Then tell {{ params.node }} about {{ steps.check.result.message }}"
      action: notify
      with: {message: "after"}
"""


GUARDED = """\
apiVersion: runbook-bot/v1
kind: Runbook
metadata: {name: guarded, title: A step whose guard holds it back}
spec:
  params:
    ok: {type: boolean, default: false}
    cluster: {type: string, default: sandbox}
  steps:
    - id: first
      title: First
      action: notify
      with: {message: "first"}
      guards:
        - expr: params.ok
          message: "ok is false."
    - id: second
      title: Second
      action: notify
      with: {message: "second"}
"""


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    books = tmp_path / "runbooks"
    books.mkdir()
    (books / "drain-wait.yaml").write_text(WAIT)
    (books / "guarded.yaml").write_text(GUARDED)
    config = tmp_path / "runbook-bot.yaml"
    config.write_text(textwrap.dedent(f"""\
        database_url: sqlite:///{tmp_path / 'state.db'}
        runbooks_dir: {books}
        clusters:
          sandbox: {{kubeconfig: {tmp_path / 'kubeconfig'}, region: ap-southeast-1}}
          staging: {{kubeconfig: {tmp_path / 'kubeconfig'}, region: ap-southeast-1}}
        policy:
          groups: {{sre: [alice, bob]}}
          allow_impersonation: true
        """))
    monkeypatch.setenv("RUNBOOK_BOT_CONFIG", str(config))
    monkeypatch.setenv("RUNBOOK_BOT_AUDIT_KEY", "k")
    for var in ("RUNBOOK_BOT_DATABASE_URL", "RUNBOOK_BOT_RUNBOOKS_DIR"):
        monkeypatch.delenv(var, raising=False)

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out = capsys.readouterr()
        return code, out.out, out.err

    run.db = tmp_path / "state.db"  # type: ignore[attr-defined]
    return run


def _stored(db) -> tuple[int, int]:
    """(runs, audit events) in the store; (0, 0) when there is no store yet."""
    if not db.exists():
        return 0, 0
    con = sqlite3.connect(db)
    try:
        tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
        if "runs" not in tables:
            return 0, 0
        return (con.execute("select count(*) from runs").fetchone()[0],
                con.execute("select count(*) from events").fetchone()[0])
    finally:
        con.close()


def _run_id(out: str) -> str:
    return next(w for w in out.split() if w.startswith("rb-")).rstrip(":")


# -- params are checked before a run exists ------------------------------------------------------

@pytest.mark.parametrize(("argv", "says"), [
    (["zombie-volumeattachments", "-p", "cluster=prod"],
     ["unknown cluster 'prod'", "sandbox", "staging"]),
    (["zombie-volumeattachments"], ["several clusters are configured", "sandbox, staging"]),
    (["drain-wait", "-p", "node=Not_A_Node", "-p", "cluster=sandbox"], ["'node'", "pattern"]),
    (["drain-wait", "-p", "cluster=sandbox"], ["missing required param 'node'"]),
    (["drain-wait", "-p", "node=n1", "-p", "grace=soon", "-p", "cluster=sandbox"], ["'grace'"]),
])
def test_a_bad_param_is_refused_before_anything_is_stored(cli, argv, says):
    code, out, err = cli("run", *argv, "--as", "alice")
    assert code == 1, out + err
    for text in says:
        assert text in err
    assert "rb-" not in out
    assert _stored(cli.db) == (0, 0)


def test_the_slack_start_path_checks_clusters_with_the_same_check(tmp_path):
    from bot.config import ClusterConfig, Settings
    from bot.runbook.params import check_params
    from bot.runbook.source import DirectorySource

    settings = Settings(database_url="sqlite://", clusters={
        "sandbox": ClusterConfig(name="sandbox")})
    runbook, _, _ = DirectorySource((), catalog=None).get("zombie-volumeattachments")
    check = check_params(runbook, {"cluster": "prod"}, clusters=tuple(settings.clusters))
    assert check.fields == {"cluster": "unknown cluster 'prod'; configured: sandbox"}
    assert check_params(runbook, {}, clusters=("sandbox",)).ok
    assert check_params(runbook, {"cluster": "prod"}, clusters=()).ok  # none configured: any


# -- dry runs ------------------------------------------------------------------------------------

def test_a_dry_run_ends_with_its_verdict_and_exits_1_when_a_real_run_would_stop(cli):
    code, out, _ = cli("run", "guarded", "--dry-run")
    assert code == 1
    assert "every step finished" not in out
    assert "  first   would be blocked by its guard: ok is false." in out
    assert "  second  would post its message" in out
    assert out.rstrip().endswith("would stop at step first because it would be blocked by its "
                                 "guard: ok is false; nothing was changed")
    code, out, _ = cli("run", "guarded", "-p", "ok=true", "--dry-run")
    assert code == 0 and out.rstrip().endswith("would succeed; nothing was changed")


# -- status ---------------------------------------------------------------------------------------

def test_status_shows_every_step_id_titles_as_far_as_known_and_who_waits_for_whom(cli):
    code, out, _ = cli("run", "drain-wait", "-p", "node=ip-10-0-1-23", "-p", "cluster=sandbox",
                       "--as", "alice")
    assert code == 0
    run_id = _run_id(out)
    code, out, _ = cli("status", run_id)
    assert code == 0
    assert "{{" not in out and "}}" not in out
    assert "grace=6m" in out and "360" not in out
    assert "Check ip-10-0-1-23 for 6m" in out
    lines = out.splitlines()
    later = next(line for line in lines if "later" in line)
    assert "not reached" in later and "Then tell ip-10-0-1-23 about" in later
    assert "why: Make sure ip-10-0-1-23 is really dead." in out
    assert "alice waits for 1 approval from sre, expires in 29m" in out
    assert f"runbook-bot approve {run_id} --step check" in out


# -- runs -----------------------------------------------------------------------------------------

def test_runs_shows_relative_times_and_counts_finished_runs(cli):
    _, out, _ = cli("run", "drain-wait", "-p", "node=n1", "-p", "cluster=sandbox", "--as", "alice")
    run_id = _run_id(out)
    _, out, _ = cli("runs")
    assert run_id in out
    assert "ago" in out and ("expires in 29m" in out or "expires in 30m" in out)
    assert "+00:00" not in out and "T" not in out.split("\n", 1)[1].split(run_id)[1][:40]
    cli("abort", run_id, "--reason", "test over", "--as", "alice")
    _, out, _ = cli("runs")
    assert "no active runs" in out and "1 finished run" in out and "--all" in out


# -- following a run, handing it to a worker -------------------------------------------------------

def _store(cli):
    from bot.store.db import Database

    return Database(f"sqlite:///{cli.db}", audit_key="k")


def _live_worker(cli) -> str:
    """A worker row as a running ``worker`` writes it (this process: alive)."""
    import os
    from datetime import UTC, datetime

    from bot.runtime.leases import HOST

    worker = f"{HOST}:{os.getpid()}:w0"
    store = _store(cli)
    store.worker_beat(worker, datetime.now(UTC))
    store.close()
    return worker


def _start(cli) -> str:
    code, out, _ = cli("run", "drain-wait", "-p", "node=n1", "-p", "cluster=sandbox", "--as", "alice")
    assert code == 0
    return _run_id(out)


def _status(cli, run_id: str) -> str:
    store = _store(cli)
    try:
        return str(store.load(run_id).status)
    finally:
        store.close()


def test_approve_hands_the_run_to_a_live_worker_and_frees_the_terminal(cli):
    run_id = _start(cli)
    worker = _live_worker(cli)
    code, out, _ = cli("approve", run_id, "--as", "bob")
    assert code == 0
    assert f"worker {worker} carries run {run_id} on" in out
    assert f"runbook-bot follow {run_id}" in out
    assert _status(cli, run_id) not in ("succeeded", "failed")  # nothing driven here
    code, out, _ = cli("worker", "--once")
    assert code == 0 and _status(cli, run_id) == "succeeded"
    code, out, _ = cli("follow", run_id)
    assert code == 0
    assert "✓ Check n1 for 6m" in out and f"run {run_id} succeeded" in out


def test_approve_without_a_live_worker_carries_the_run_on_and_says_a_worker_would_free_it(cli):
    import subprocess
    from datetime import UTC, datetime

    from bot.runtime.leases import HOST

    run_id = _start(cli)
    gone = subprocess.Popen(["true"])
    gone.wait()  # a worker whose process has exited, its row left behind
    store = _store(cli)
    store.worker_beat(f"{HOST}:{gone.pid}:dead", datetime.now(UTC))
    store.close()
    code, out, _ = cli("approve", run_id, "--as", "bob")
    assert code == 0
    assert "no worker is running" in out and "`runbook-bot worker` would free it" in out
    assert f"run {run_id} succeeded" in out and _status(cli, run_id) == "succeeded"


def test_follow_and_no_follow_override_what_a_worker_would_do(cli):
    run_id = _start(cli)
    _live_worker(cli)
    code, out, _ = cli("approve", run_id, "--as", "bob", "--follow")
    assert code == 0 and f"run {run_id} succeeded" in out
    other = _start(cli)
    code, out, _ = cli("approve", other, "--as", "bob", "--no-follow")
    assert code == 0 and f"left run {other} for a worker" in out
    assert _status(cli, other) not in ("succeeded", "failed")


def test_follow_prints_a_run_driven_by_others_until_it_finishes(cli):
    import io

    from bot.frontends.term.follow import Follower

    run_id = _start(cli)
    others = iter([("approve", run_id, "--as", "bob", "--no-follow"), ("worker", "--once")])
    polls: list[float] = []

    def meanwhile(seconds: float) -> None:  # between two polls, someone else drives the run
        polls.append(seconds)
        assert cli(*next(others))[0] == 0

    out = io.StringIO()
    store = _store(cli)
    state = Follower(store, out=out, sleep=meanwhile, interval=0.5).events(run_id)
    store.close()
    text = out.getvalue()
    assert state.status == "succeeded" and polls == [0.5, 0.5]
    assert text.index("check needs 1 approval(s) from sre") < text.index("✓ Check n1 for 6m")
    assert text.rstrip().endswith(f"run {run_id} succeeded: every step finished")


def test_status_watch_redraws_on_each_change_and_ctrl_c_leaves_the_run_as_it_is(cli, monkeypatch):
    run_id = _start(cli)
    store = _store(cli)
    before = store.load(run_id)
    store.close()

    def interrupted():
        def sleep(_seconds: float) -> None:
            raise KeyboardInterrupt
        return sleep

    monkeypatch.setattr("bot.cli.runs._poll_sleep", interrupted)
    code, out, err = cli("status", run_id, "--watch")
    assert code == 130 and "stopped watching" in err and "it carries on as it is" in err
    assert "waiting: alice waits for 1 approval from sre" in out
    code, out, err = cli("follow", run_id)
    assert code == 130 and "stopped following" in err
    store = _store(cli)
    after = store.load(run_id)
    store.close()
    assert (after.version, after.status) == (before.version, before.status)
    cli("approve", run_id, "--as", "bob", "--follow")
    code, out, _ = cli("status", run_id, "--watch")  # a finished run: shown once, no poll
    assert code == 0 and "status: succeeded" in out


@pytest.mark.slow
def test_a_running_worker_process_is_known_takes_the_approved_run_and_leaves_when_stopped(cli, tmp_path):
    import io
    import os
    import signal
    import subprocess
    import sys
    import time
    from datetime import UTC, datetime
    from pathlib import Path

    from bot.frontends.term.follow import Follower

    run_id = _start(cli)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    worker = subprocess.Popen([sys.executable, "-m", "bot", "worker", "--interval", "0.1",
                               "--metrics-host", "127.0.0.1", "--metrics-port", "0"],
                              env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    store = _store(cli)
    try:
        deadline = time.monotonic() + 60
        while not store.workers(now=datetime.now(UTC), within=30):  # the process starting up
            assert worker.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        [row] = store.workers(now=datetime.now(UTC), within=30)
        assert row.split(":")[1] == str(worker.pid)
        code, out, _ = cli("approve", run_id, "--as", "bob")
        assert code == 0 and f"worker {row} carries run {run_id} on" in out
        state = Follower(store, out=io.StringIO(), sleep=time.sleep, interval=0.1).events(run_id)
        assert state.status == "succeeded"
    finally:
        worker.send_signal(signal.SIGINT)
        assert worker.wait(timeout=30) == 0
    assert store.workers(now=datetime.now(UTC), within=30) == []
    store.close()
