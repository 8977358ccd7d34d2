"""A bot process for the crash-resume test: runs one runbook on fake actions, approving as bob.

    python -m tests.engine.crash_worker WORKDIR      (from the top of the source tree)

It keeps its run id in WORKDIR/run-id, so a restarted process resumes the same run. With
CRASH_AT_SAVE=N it SIGKILLs itself right after its Nth durable save (a step boundary; the mark a
resumed apply saves before it writes is not one); with
FAKE_CRASH_AFTER_EFFECT=KEY the fake action kills it in the middle of applying step KEY.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from bot.engine.commands import Approve, StartRun
from bot.engine.ports import SystemClock
from bot.runbook.source import TextSource
from bot.runtime.runner import Runner
from bot.store.db import Database
from tests.fakes.engine_world import POLICY, World, make_catalog, make_registry

RUNBOOK = """\
apiVersion: runbook-bot/v1
kind: Runbook
metadata: {name: crashy, title: Crash test}
spec:
  approvals: {groups: [sre]}
  steps:
    - {id: read, title: Read a, action: fake.read, with: {name: a}}
    - {id: set_a, title: Set a, action: fake.set, with: {name: a, value: "1"}}
    - {id: between, title: Nothing, action: fake.noop}
    - id: set_each
      title: "Set {{ item }}"
      action: fake.set
      foreach: "['b', 'c']"
      with: {name: "{{ item }}", value: "2"}
    - {id: last, title: Read c, action: fake.read, with: {name: c}}
"""


class CrashAfter:
    def __init__(self, n: int) -> None:
        self.n, self.count, self.armed = n, 0, False

    def run_changed(self, state, *, events, messages) -> None:
        if not self.armed:  # the run is created before its id is kept in run-id
            return
        if events and all(e.type == "step.applying" and e.payload.get("resumed") for e in events):
            # a resumed apply's own mark, saved before it writes: the resume of a kill, not a
            # step boundary of the clean run (a kill there would be the same kill again)
            return
        self.count += 1
        if self.count == self.n:
            os.kill(os.getpid(), signal.SIGKILL)


def main(workdir: Path) -> int:
    world = World(workdir / "world.json")
    db = Database(f"sqlite:///{workdir / 'state.db'}", audit_key="k")
    crash = CrashAfter(int(os.environ.get("CRASH_AT_SAVE", "0")))
    runner = Runner(store=db, catalog=make_catalog(world),
                    runbooks=TextSource({"crashy": RUNBOOK}, catalog=make_registry(world)),
                    policy=POLICY, clock=SystemClock(), notifiers=[crash], lease_wait=5.0)
    id_file = workdir / "run-id"
    if id_file.exists():
        run_id = id_file.read_text()
    else:
        run_id = runner.start(StartRun(runbook="crashy", params={}, requester="alice")).run_id
        id_file.write_text(run_id)
    crash.armed = True
    for _ in range(50):
        state = runner.drive(run_id)
        if state.status in ("succeeded", "failed", "aborted"):
            print(state.status, crash.count)
            return 0 if state.status == "succeeded" else 1
        if state.status == "awaiting_approval":
            runner.submit(Approve(run_id=run_id, actor="bob"))
    return 2


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
