"""A bot replica on fake actions, and a trial that kills one of two replicas mid-run.

    python -m tests.runtime.replica DATABASE_URL WORKDIR NAME      (from the top of the source tree)

A replica serves every due run of the database as ``runbook-bot worker`` does (the same drain on
SIGTERM), approves waiting steps as bob, and appends a line per durable save to WORKDIR/NAME.log:
``epoch-seconds run-id status host``. With FAKE_CRASH_AFTER_EFFECT=KEY the fake action SIGKILLs it
in the middle of applying step KEY; with HOLD_APPLY=KEY its apply of KEY waits until the file
WORKDIR/release exists (a slow API call, to stop the bot in the middle of a tick).

``takeover_trial`` starts two replicas as two hosts (``unshare --uts``, each with its own
hostname, so neither can see the other's processes), starts a run, and reports when the replica
that applied the marked step died and when the other took the run over and finished it: the
crash-takeover test and ``bench/takeover.py`` both use it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.engine.commands import Approve, StartRun
from bot.engine.ports import SystemClock
from bot.errors import RunbookBotError
from bot.runbook.source import TextSource
from bot.runtime.drain import stop_on_signals
from bot.runtime.runner import Runner
from bot.store.db import Database
from tests.engine.crash_worker import RUNBOOK
from tests.fakes.engine_world import POLICY, World, make_catalog, make_registry

ROOT = Path(__file__).resolve().parents[2]
DESTRUCTIVE = {("set_a", "a"), ("set_each[0]", "b"), ("set_each[1]", "c")}


class _Log:
    def __init__(self, path: Path) -> None:
        self.path, self.host = path, socket.gethostname()

    def run_changed(self, state: Any, *, events: Any, messages: Any) -> None:
        with self.path.open("a") as f:
            f.write(f"{time.time():.3f} {state.run_id} {state.status} {self.host}\n")


class _Held:
    """The fake catalog, with the apply of one step held until WORKDIR/release exists."""

    def __init__(self, inner: Any, key: str, workdir: Path) -> None:
        self.inner, self.key, self.workdir = inner, key, workdir

    def spec(self, name: str) -> Any:
        return self.inner.spec(name)

    def plan(self, name: str, params: Any, ctx: Any) -> Any:
        return self.inner.plan(name, params, ctx)

    def cluster_of(self, name: str, params: Any, ctx: Any) -> str | None:
        return self.inner.cluster_of(name, params, ctx)

    def resolve_context(self, cluster: str, ctx: Any) -> dict[str, Any]:
        return self.inner.resolve_context(cluster, ctx)

    def apply(self, name: str, plan: Any, ctx: Any) -> Any:
        if ctx.step_id == self.key:
            (self.workdir / "applying").touch()
            release = self.workdir / "release"
            deadline = time.monotonic() + 60
            while not release.exists() and time.monotonic() < deadline:
                time.sleep(0.02)  # the slow API call this stands for
        return self.inner.apply(name, plan, ctx)


def _approve_waiting(runner: Runner, db: Database, stopping: threading.Event) -> None:
    while not stopping.wait(0.1):
        for st in db.runs(active=True):
            if st.status == "awaiting_approval":
                # the other replica may hold the run, or have approved first
                with contextlib.suppress(RunbookBotError):
                    runner.submit(Approve(run_id=st.run_id, actor="bob"))


def main(url: str, workdir: Path, name: str) -> int:
    world = World(workdir / "world.json")
    db = Database(url, audit_key="k")
    catalog: Any = make_catalog(world)
    if os.environ.get("HOLD_APPLY"):
        catalog = _Held(catalog, os.environ["HOLD_APPLY"], workdir)
    runner = Runner(store=db, catalog=catalog,
                    runbooks=TextSource({"crashy": RUNBOOK}, catalog=make_registry(world)),
                    policy=POLICY, clock=SystemClock(), notifiers=[_Log(workdir / f"{name}.log")],
                    lease_wait=1.0)
    stopping = threading.Event()
    threading.Thread(target=_approve_waiting, args=(runner, db, stopping), daemon=True).start()
    with stop_on_signals(runner.stop):
        print("serving", flush=True)
        runner.serve(interval=0.2)
    stopping.set()
    db.close()
    print("stopped", flush=True)
    return 0


# -- the trial ------------------------------------------------------------------------------------


def can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    done = subprocess.run(["unshare", "--uts", "--pid", "--fork", "true"], capture_output=True)
    return done.returncode == 0


def launch(url: str, workdir: Path, name: str, *, host: str | None = None,
           pid1: bool = False, **env: str) -> subprocess.Popen[str]:
    """A replica process; ``host``: its own hostname (UTS namespace); ``pid1``: PID 1 of its own
    PID namespace, as a container's entrypoint is."""
    cmd = [sys.executable, "-m", "tests.runtime.replica", url, str(workdir), name]
    if host is not None:
        cmd = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host, *cmd]
    if pid1:
        cmd = ["unshare", "--pid", "--fork", "--kill-child", *cmd]
    return subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **env}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def start_run(url: str, workdir: Path) -> str:
    world = World(workdir / "world.json")
    db = Database(url, audit_key="k")
    runner = Runner(store=db, catalog=make_catalog(world),
                    runbooks=TextSource({"crashy": RUNBOOK}, catalog=make_registry(world)),
                    policy=POLICY, clock=SystemClock())
    run_id = runner.start(StartRun(runbook="crashy", params={}, requester="alice")).run_id
    db.close()
    return run_id


@dataclass
class Trial:
    run_id: str
    dead: str  # the host of the replica that was killed
    survivor: str
    lease_at_death: str | None
    died_at: float
    taken_over_at: float  # the survivor's first save of the run after the death
    finished_at: float

    @property
    def takeover(self) -> float:
        return self.taken_over_at - self.died_at

    @property
    def finish(self) -> float:
        return self.finished_at - self.died_at


def takeover_trial(url: str, workdir: Path, *, kill_at: str = "set_each[0]",
                   deadline: float = 60.0) -> Trial:
    """Two replicas as hosts replica-a and replica-b serve one run; the one that applies
    ``kill_at`` is SIGKILLed in the middle of that apply, and the other finishes the run."""
    run_id = start_run(url, workdir)
    procs = {h: launch(url, workdir, h, host=h, FAKE_CRASH_AFTER_EFFECT=kill_at)
             for h in ("replica-a", "replica-b")}
    db = Database(url, audit_key="k")
    try:
        end = time.monotonic() + deadline
        dead = None
        while dead is None:
            if time.monotonic() > end:
                raise AssertionError(f"no replica died within {deadline} s")
            dead = next((h for h, p in procs.items() if p.poll() is not None), None)
            time.sleep(0.01)  # polling for an event, with a deadline
        died_at = time.time()
        code = procs[dead].returncode
        if code != -signal.SIGKILL:
            raise AssertionError(f"{dead} exited {code}: {procs[dead].stderr.read()}")
        lease_at_death = db.lease_of(run_id)[0]
        survivor = next(h for h in procs if h != dead)
        while db.load(run_id).status != "succeeded":
            if time.monotonic() > end:
                raise AssertionError(f"{survivor} did not finish run {run_id}")
            if procs[survivor].poll() is not None:
                raise AssertionError(f"{survivor} exited: {procs[survivor].stderr.read()}")
            time.sleep(0.05)
        saves = [line.split() for line in (workdir / f"{survivor}.log").read_text().splitlines()]
        after = [float(s[0]) for s in saves if s[1] == run_id and float(s[0]) >= died_at]
        finished = [float(s[0]) for s in saves if s[1] == run_id and s[2] == "succeeded"]
        return Trial(run_id=run_id, dead=dead, survivor=survivor, lease_at_death=lease_at_death,
                     died_at=died_at, taken_over_at=min(after), finished_at=finished[-1])
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            for stream in (p.stdout, p.stderr):
                if stream is not None:
                    stream.close()
        db.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3]))
