"""Run leases: one worker at a time touches a run, and a dead owner's run is taken over promptly.

Several workers (threads, processes, replicas on a shared PostgreSQL) can serve the same store.
Inside one process a lock per run makes threads take turns without a round trip to the database;
across processes the store's lease does (``RunStore.claim``).

A lease is short (``seconds``, a few seconds) and renewed by a heartbeat while it is held: a
thread renews every held lease each third of its length (``RunStore.renew``), so a tick that takes
longer than the lease (a slow API call) keeps its run, while a replica that dies, or loses the
database, stops renewing and its runs are due again on every other replica within one lease
length. Before an apply the runner renews the lease itself (``renew``) and goes ahead only if it
still holds it, so a worker that lost its lease while it was away applies nothing.

A lease owner is ``host:pid:token``: a lease whose owner process on this host no longer exists is
taken over at once, so a restarted bot resumes its runs without waiting for their leases to end.

The per-run locks are kept only while a thread holds or waits for one, so the table holds at most
one entry per thread claiming a run at that moment and is empty when the process is idle; a
long-lived worker that has driven a million runs keeps none of their locks.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from bot.engine.ports import Clock, RunStore
from bot.errors import LeaseHeld

HOST = socket.gethostname()
log = logging.getLogger(__name__)

log = logging.getLogger(__name__)


def owner_alive(owner: str) -> bool:
    """False only when ``owner`` names a process on this host that no longer exists."""
    parts = owner.split(":")
    if len(parts) < 3 or parts[0] != HOST:
        return True
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return True
    return True


class RunLocks:
    """This process's lock per run, present only while some thread holds or waits for it."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}  # run -> (lock, threads using it)

    def __len__(self) -> int:
        with self._guard:
            return len(self._locks)

    @contextmanager
    def held(self, run_id: str, *, timeout: float) -> Iterator[bool]:
        """Hold the run's lock (waiting up to ``timeout``); yields whether it was acquired."""
        with self._guard:
            lock, users = self._locks.get(run_id, (None, 0))
            if lock is None:
                lock = threading.Lock()
            self._locks[run_id] = (lock, users + 1)
        acquired = lock.acquire(timeout=timeout)
        try:
            yield acquired
        finally:
            if acquired:
                lock.release()
            with self._guard:
                _, users = self._locks[run_id]
                if users == 1:
                    del self._locks[run_id]
                else:
                    self._locks[run_id] = (lock, users - 1)


class Leases:
    """Claims runs' leases in the store for this process's threads, and renews them while held."""

    def __init__(self, *, store: RunStore, clock: Clock, seconds: float, wait: float) -> None:
        self.store = store
        self.clock = clock
        self.seconds = seconds
        self.wait = wait
        self.locks = RunLocks()
        # told (run, previous owner) of each lease taken over from a dead worker: the metrics
        self.takeover_listeners: list[Callable[[str, str], None]] = []
        self._guard = threading.Lock()
        self._held: dict[str, str] = {}  # run -> owner, while a thread of this process holds it
        self._beater: threading.Thread | None = None
        self._quit = threading.Event()

    @property
    def held(self) -> dict[str, str]:
        with self._guard:
            return dict(self._held)

    def renew(self, run_id: str, owner: str) -> bool:
        """Extend the lease by its length from now; False when ``owner`` no longer holds it."""
        try:
            return self.store.renew(run_id, owner=owner, now=self.clock.now(), ttl=self.seconds)
        except Exception:  # the database is unreachable: the lease is not known to be ours
            log.warning("could not renew the lease of run %s", run_id, exc_info=True)
            return False

    def beat(self) -> list[str]:
        """Renew every lease held here once; returns the runs whose lease was lost."""
        lost = [run_id for run_id, owner in self.held.items() if not self.renew(run_id, owner)]
        for run_id in lost:
            log.warning("run %s: lease lost (another worker took it over)", run_id)
        return lost

    def stop(self) -> None:
        """Stop the heartbeat thread (leases still held are released by their holders)."""
        self._quit.set()

    def _hold(self, run_id: str, owner: str) -> None:
        with self._guard:
            self._held[run_id] = owner
            if self._beater is None and not self._quit.is_set():
                self._beater = threading.Thread(target=self._beat_while_held, daemon=True,
                                                name="runbook-bot-lease-heartbeat")
                self._beater.start()

    def _drop(self, run_id: str) -> None:
        with self._guard:
            self._held.pop(run_id, None)

    def _beat_while_held(self) -> None:
        """The heartbeat: renews held leases each third of their length; ends when none is held."""
        while not self._quit.wait(self.seconds / 3):
            with self._guard:
                if not self._held:
                    self._beater = None
                    return
            self.beat()
        with self._guard:
            self._beater = None

    @contextmanager
    def claimed(self, run_id: str, *, wait: bool = True) -> Iterator[str]:
        """Hold the run's lease (and this process's lock for it) for the duration."""
        with self.locks.held(run_id, timeout=self.wait if wait else 0) as acquired:
            if not acquired:
                raise LeaseHeld(f"run {run_id} is busy in this process; try again in a moment")
            owner = f"{HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
            waited = threading.Event()
            deadline = self.wait if wait else 0.0
            spent = 0.0
            while not self._try_claim(run_id, owner):
                if spent >= deadline:
                    raise LeaseHeld(f"run {run_id} is being worked on by another worker; "
                                    "try again in a moment")
                waited.wait(0.05)
                spent += 0.05
            self._hold(run_id, owner)
            try:
                yield owner
            finally:
                self._drop(run_id)
                self.store.release(run_id, owner=owner)

    def _try_claim(self, run_id: str, owner: str) -> bool:
        now = self.clock.now()
        if self.store.claim(run_id, owner=owner, now=now, ttl=self.seconds):
            return True
        holder, _until = self.store.lease_of(run_id)
        if holder and not owner_alive(holder):
            taken = self.store.claim(run_id, owner=owner, now=now, ttl=self.seconds, replace=holder)
            if taken:
                log.warning("took over run %s from %s, a worker that no longer exists", run_id,
                            holder, extra={"run_id": run_id})
                for listen in self.takeover_listeners:
                    listen(run_id, holder)
            return taken
        return False
