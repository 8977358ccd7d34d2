"""Follows a run live from the store, whoever drives it (a worker, Slack, another terminal).

It only reads: it polls the run and prints each new audit event the way the driving terminal
would (``bot.present.events.live_lines``), or redraws ``status`` when the run changed, until the
run finishes. Interrupting it leaves the run exactly as it is. The sleep between polls is
injected, so tests move on without waiting.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from bot.engine.ports import RunHistory
from bot.engine.runstate import RunState
from bot.engine.state import RUN_TERMINAL
from bot.present.live import LiveText

FINISHED = RUN_TERMINAL


class Follower:
    def __init__(self, history: RunHistory, *, out: TextIO, sleep: Callable[[float], None],
                 interval: float = 1.0) -> None:
        self.history = history
        self.out = out
        self.sleep = sleep
        self.interval = interval
        self.live = LiveText()  # skipped steps in a row said as one line

    def _say(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def events(self, run_id: str, *, after: int = 0) -> RunState:
        """Print the run's events after seq ``after`` as they are recorded, until it finishes."""
        seen = after
        while True:
            state = self.history.load(run_id)  # first: the events read next include all of its own
            for e in self.history.events(run_id, after=seen):
                for line in self.live.lines(state, e):
                    self._say(line)
                seen = e.seq
            if state.status in FINISHED:
                return state
            self.sleep(self.interval)

    def redraw(self, run_id: str, render: Callable[[RunState], str]) -> RunState:
        """Print ``render(run)`` now and each time the stored run changes, until it finishes."""
        version: int | None = None
        while True:
            state = self.history.load(run_id)
            if state.version != version:
                version = state.version
                self._say(render(state))
                self._say("")
            if state.status in FINISHED:
                return state
            self.sleep(self.interval)
