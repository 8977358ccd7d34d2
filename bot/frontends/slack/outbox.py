"""The Slack outbox: runs change in the engine, and Slack catches up on its own thread.

The runner calls its notifiers inside the tick that saved a run, holding the run's lease. Talking
to Slack there would let a rate limit (a 429 with ``Retry-After: 30``, retried three times) hold
a run's lease for minutes, stall every other due run, and tell people clicking meanwhile that the
run is busy. So the outbox, the Slack front-end's Notifier, only notes that a run changed and
returns; one drawing thread per process draws the run as the store holds it then
(``drawing.RunDrawer``). Several changes in a burst are drawn once.

Nothing is lost on the way. How far Slack has caught up with each run is durable
(``persistence.slack_runs``: the store version drawn and the last audit event replied), and is advanced
only for what Slack accepted. A transient failure is tried again with a growing delay (at least
Slack's ``Retry-After``); a restart, another replica, or a change made from the terminal is picked
up by a scan for runs whose store is ahead of their cursor. A short durable claim keeps two
replicas from drawing one run at once.

Time comes from the injected clock, so tests move retries and scans on by advancing it.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import uuid
import zlib
from collections.abc import Callable, Sequence

from bot.engine.ports import Clock, RunHistory
from bot.engine.runstate import AuditDraft, RunState
from bot.errors import NotFound
from bot.frontends.slack.drawing import Drawing, RunDrawer
from bot.frontends.slack.persistence import Cursor, SlackStore

log = logging.getLogger(__name__)
EVENTS_PER_DRAWING = 200  # a long backlog (Slack was down for an hour) is drawn in parts
THOROUGH_SCAN_EVERY = 60.0  # seconds between scans that also look at finished runs


class Outbox:
    """Implements ``bot.engine.ports.Notifier`` for Slack: mark now, draw on the outbox thread."""

    def __init__(self, *, drawer: RunDrawer, slack_store: SlackStore, store: RunHistory, clock: Clock,
                 scan_every: float = 5.0, claim_ttl: float = 120.0, first_delay: float = 2.0,
                 max_delay: float = 300.0, give_up_after: int = 100,
                 on_thread_start: Callable[[], None] | None = None) -> None:
        self.drawer = drawer
        self.slack_store = slack_store
        self.store = store
        self.clock = clock
        self.scan_every = scan_every
        self.claim_ttl = claim_ttl
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.give_up_after = give_up_after
        self.owner = f"{socket.gethostname()}:{os.getpid()}:outbox:{uuid.uuid4().hex[:8]}"
        self._on_thread_start = on_thread_start
        self._due: dict[str, float] = {}  # run -> when to draw it (clock time)
        self._hold: dict[str, float] = {}  # run -> not before then: Slack failed, or said wait
        self._drawing = 0
        self._cond = threading.Condition()
        # one of a fixed set of locks per run: runs drawn at once on two threads (the outbox and
        # a person's request) take turns, and no lock is kept per run for ever
        self._locks = [threading.Lock() for _ in range(64)]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._scanned_at = -math.inf
        self._thorough_at = -math.inf

    # -- the Notifier port ----------------------------------------------------------------------

    def run_changed(self, state: RunState, *, events: Sequence[AuditDraft],
                    messages: Sequence[str]) -> None:
        """Called by the runner after a save: note the run, touch nothing else."""
        if state.origin.get("frontend") == "slack" and state.origin.get("channel"):
            self.mark(state.run_id)

    # -- scheduling -----------------------------------------------------------------------------

    def _now(self) -> float:
        return self.clock.now().timestamp()

    def mark(self, run_id: str, at: float | None = None) -> None:
        """Draw ``run_id`` at ``at`` (default now), or earlier if it was already due earlier,
        but never while it is held back after a failure (a 429's ``Retry-After`` is a promise)."""
        when = self._now() if at is None else at
        with self._cond:
            when = max(when, self._hold.get(run_id, -math.inf))
            self._due[run_id] = min(self._due.get(run_id, math.inf), when)
            self._cond.notify_all()

    def _take(self) -> str | None:
        """The run most overdue, marked as being drawn; None when nothing is due now.

        Called holding ``_cond``, so a mark between looking and waiting is not missed.
        """
        now = self._now()
        due = [(t, r) for r, t in self._due.items() if t <= now]
        if not due:
            return None
        _, run_id = min(due)
        del self._due[run_id]
        self._drawing += 1
        return run_id

    def _done(self) -> None:
        with self._cond:
            self._drawing -= 1
            self._cond.notify_all()

    def scan(self) -> int:
        """Mark every run whose store is ahead of Slack and that is due; how many were."""
        now = self._now()
        thorough = now - self._thorough_at >= THOROUGH_SCAN_EVERY
        try:
            lagging = self.slack_store.lagging(now=now, thorough=thorough)
            if thorough:
                self._thorough_at = now
        except Exception:
            log.exception("could not look for runs that Slack has not caught up with")
            lagging = []
        with self._cond:
            fresh = [r for r in lagging if r not in self._due]
            for run_id in fresh:
                self._due[run_id] = max(now, self._hold.get(run_id, -math.inf))
            self._scanned_at = now
            self._cond.notify_all()
        return len(fresh)

    def _delay(self, failures: int, asked: float | None) -> float:
        """Slack's Retry-After when it gave one, else a delay doubling with each failure."""
        if asked is not None:
            return max(1.0, asked)
        return min(self.max_delay, self.first_delay * 2 ** max(0, failures - 1))

    # -- drawing --------------------------------------------------------------------------------

    def _lock(self, run_id: str) -> threading.Lock:
        return self._locks[zlib.crc32(run_id.encode()) % len(self._locks)]

    def draw(self, run_id: str) -> Drawing | None:
        """Draw one run now, on the calling thread; None when it is held back after a failure or
        another replica is drawing it."""
        with self._lock(run_id):
            now = self._now()
            with self._cond:
                held = self._hold.get(run_id, -math.inf)
                if held > now:  # it failed a moment ago, on another thread: not before then
                    self._due[run_id] = max(self._due.get(run_id, held), held)
                    return None
            cursor = self.slack_store.claim_drawing(run_id, owner=self.owner, now=now, ttl=self.claim_ttl)
            if cursor is None:
                self.mark(run_id, now + 1.0)  # theirs may predate this change: look again soon
                return None
            after, retry_at, drawing, done = cursor, None, None, False
            try:
                # events first: the state read after them is at least as new as the last one
                events = self.store.events(run_id, after=cursor.replied_seq,
                                           limit=EVENTS_PER_DRAWING + 1)
                more = len(events) > EVENTS_PER_DRAWING
                events = events[:EVENTS_PER_DRAWING]
                state = self.store.load(run_id)
                drawing = self.drawer.draw(state, events, replied_seq=cursor.replied_seq,
                                           more=more)
                failures = cursor.failures + 1 if drawing.failed else 0
                version = state.version if drawing.complete else cursor.drawn_version
                if drawing.failed:
                    retry_at = self._next_try(run_id, failures, now, drawing.retry_after)
                    if retry_at is None:  # shown as it is: skip what could not be shown
                        version, failures = state.version, 0
                        drawing.replied_seq = max([drawing.replied_seq, *(e.seq for e in events)])
                after = Cursor(version, drawing.replied_seq, failures)
                # shown to its end: the thread reached run.finished and the card shows it
                done = drawing.finished and not drawing.more and version == state.version
            except NotFound:
                log.warning("run %s is gone from the store; nothing to draw", run_id)
            except Exception:  # the database, most likely: the same back-off as Slack's failures
                log.exception("drawing run %s in Slack failed", run_id)
                failures = cursor.failures + 1
                retry_at = self._next_try(run_id, failures, now, None)
                after = Cursor(cursor.drawn_version, cursor.replied_seq,
                               0 if retry_at is None else failures)
            finally:
                self.slack_store.release_drawing(run_id, owner=self.owner, cursor=after,
                                           retry_at=retry_at, done=done)
            with self._cond:
                if retry_at is None:
                    self._hold.pop(run_id, None)
                else:  # changes marked while drawing wait too: Slack said not before then
                    self._hold[run_id] = self._due[run_id] = retry_at
                    self._cond.notify_all()
            if retry_at is None and drawing is not None:
                if drawing.more:
                    self.mark(run_id)  # a long backlog: on with it after the others due now
                elif drawing.card_held_until is not None:
                    self.mark(run_id, drawing.card_held_until)
            return drawing

    def _next_try(self, run_id: str, failures: int, now: float, asked: float | None) -> float | None:
        """When to draw again after ``failures`` in a row; None once it is given up on."""
        if failures < self.give_up_after:
            return now + self._delay(failures, asked)
        log.error("drawing run %s in Slack has failed %d times in a row; it is shown as it is "
                  "until the run changes again", run_id, failures)
        return None

    # -- the outbox thread ----------------------------------------------------------------------

    def start(self) -> None:
        """Start drawing on a thread of its own, after a scan for runs left behind."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="slack-outbox", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Finish the run being drawn and stop; what is still due is found by the next scan."""
        if self._thread is None:
            return
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._thread.join(timeout=timeout)
        self._thread = None

    def _loop(self) -> None:
        if self._on_thread_start is not None:
            self._on_thread_start()
        while not self._stop.is_set():
            if self._now() - self._scanned_at >= self.scan_every:
                self.scan()
            with self._cond:
                run_id = self._take()
                if run_id is None:
                    # woken by a mark; otherwise look again soon (a due time may have come)
                    self._cond.wait(timeout=0.25)
                    continue
            try:
                self.draw(run_id)
            except Exception:  # the thread must outlive any one run
                log.exception("drawing run %s in Slack failed", run_id)
            finally:
                self._done()

    def idle(self, timeout: float = 10.0) -> bool:
        """Wait until nothing is due now and nothing is being drawn (tests, shutdown)."""
        with self._cond:
            self._cond.notify_all()
            return self._cond.wait_for(
                lambda: self._drawing == 0 and self._now() - self._scanned_at < self.scan_every
                and all(t > self._now() for t in self._due.values()),
                timeout=timeout)

    def pending(self) -> dict[str, float]:
        """Runs waiting to be drawn, and when."""
        with self._cond:
            return dict(self._due)
