"""Stopping on SIGTERM: drain what is in flight, release leases, exit 0 (as PID 1 too).

Kubernetes stops a pod with SIGTERM, then SIGKILL when the grace period ends. On the first
SIGTERM (or Ctrl-C) the bot stops taking new work and lets the tick in flight finish and be saved,
so its lease is released and another replica picks the run up at once instead of after the lease
runs out. A second signal stops at once (``KeyboardInterrupt``).

The handlers are Python's, installed explicitly: a process that is PID 1 in its PID namespace (the
bot as a container's entrypoint) gets no default action for SIGTERM from the kernel, so without a
handler it would ignore the signal and be killed at the end of the grace period. The handler only
starts a thread that calls ``on_stop``: the main thread may be inside a lock that stopping takes.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def stop_on_signals(on_stop: Callable[[], None]) -> Iterator[threading.Event]:
    """Call ``on_stop`` once on the first SIGTERM or SIGINT; the event is set when it was called.

    Must be entered on the main thread; the previous handlers are restored on leaving.
    """
    stopping = threading.Event()
    received: list[int] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        if received:
            raise KeyboardInterrupt  # a second signal: stop now
        received.append(signum)
        log.warning("%s: draining (finishing the work in flight, then exiting)",
                    signal.Signals(signum).name)
        threading.Thread(target=_stop, name="runbook-bot-drain", daemon=True).start()

    def _stop() -> None:
        on_stop()
        stopping.set()

    previous: dict[int, Any] = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield stopping
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
