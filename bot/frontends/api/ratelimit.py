"""A token bucket per identity: each caller may make ``rate`` requests a second, in bursts of up
to ``burst``; past that the API answers 429 with ``Retry-After``. The clock is injected (seconds,
monotonic), so a test empties and refills a bucket without waiting.

Buckets are kept for the identities seen last (``keep``), so a flood of made-up identities (or
of addresses, for requests that fail authentication) cannot grow memory without bound: the bucket
of an identity forgotten starts full again, which only ever lets in what ``burst`` allows.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

DEFAULT_RATE = 20.0  # requests a second, per identity
DEFAULT_BURST = 40


class RateLimiter:
    def __init__(self, *, rate: float = DEFAULT_RATE, burst: int = DEFAULT_BURST,
                 clock: Callable[[], float] | None = None, keep: int = 10_000) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a rate limit needs a rate above 0 and a burst of at least 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock or time.monotonic
        self._keep = keep
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, at
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """Take one token for ``key``: 0.0 when it was there, else the seconds until one is."""
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.pop(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.rate)
            wait = 0.0
            if tokens >= 1.0:
                tokens -= 1.0
            else:
                wait = (1.0 - tokens) / self.rate
            self._buckets[key] = (tokens, now)
            while len(self._buckets) > self._keep:
                self._buckets.popitem(last=False)
            return wait

    @property
    def clock(self) -> Callable[[], float]:
        return self._clock

    def waiting(self, key: str) -> float:
        """The seconds until ``key`` has a token (0.0: it has one now), taking none."""
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.rate)
            return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate

    @staticmethod
    def retry_after(wait: float) -> str:
        """``Retry-After`` for a wait: whole seconds, at least 1."""
        return str(max(1, math.ceil(wait)))
