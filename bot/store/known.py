"""What the store last read or wrote of a run, so that a tick and a load skip the statements whose
answers it already holds (docs/architecture.md, "Store and audit").

A run's row, its step rows and its audit chain change only through the store's ``create`` and
``save``, and a save bumps the run's ``version`` in the same transaction. So what the store read or
wrote of a run at version v (its audit head, every step row, its runbook text) is what the database
holds while the run is at v:

- a load reads the run's row (one statement, with its version and head) and, when it is at the
  version kept here, takes the step rows from here instead of reading them again; the runbook text,
  written once when the run is created, is never read twice;
- a save chains its events onto the head kept here instead of reading it, inserts the step rows
  that are new without first trying to update them, updates the changed ones in one batch and skips
  those that did not change. It checks that guess in its own UPDATE of the run's row (``version``,
  ``audit_seq`` and ``audit_hash`` as kept here, besides the lease): when anything else wrote in
  between, that matches no row, nothing was written, and the save reads the head and writes its
  step rows as it would without this, in the same transaction.

A claim of the run's lease answers with the run's row (``UPDATE ... RETURNING``, where the database
has it), and the load that follows it at once takes that row instead of reading it again.

Entries are replaced whole (never changed in place), so a thread reading one sees one version.
Bounded by count (the runs most recently used), since a worker serves runs for weeks.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Known:
    """A run as stored at ``version``: its audit head, runbook text and every step row."""

    version: int
    seq: int
    hash: str
    text: str
    steps: Mapping[str, tuple[int, str]]  # key -> (position, state JSON), as stored

    def at(self, version: int, seq: int, hash_: str | None) -> bool:
        """Whether the run's row, read as ``version`` with head (``seq``, ``hash_``), is this."""
        return (version, seq, hash_) == (self.version, self.seq, self.hash)


class KnownRuns:
    """``Known`` runs by id, the ``size`` most recently used."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._runs: OrderedDict[str, Known] = OrderedDict()
        self._claims: dict[str, tuple[float, tuple[Any, ...]]] = {}  # run -> (until, its row)
        self._guard = threading.Lock()

    def __len__(self) -> int:
        return len(self._runs)

    def get(self, run_id: str) -> Known | None:
        with self._guard:
            return self._runs.get(run_id)

    def pop(self, run_id: str) -> Known | None:
        with self._guard:
            return self._runs.pop(run_id, None)

    def claimed(self, run_id: str, row: tuple[Any, ...], *, within: float) -> None:
        """The run's row as the claim of its lease just returned it, for a load that follows
        within ``within`` seconds: while the lease holds, nothing else writes the run."""
        with self._guard:
            self._claims[run_id] = (time.monotonic() + within, row)
            while len(self._claims) > self.size:
                del self._claims[next(iter(self._claims))]

    def fresh(self, run_id: str) -> tuple[Any, ...] | None:
        """The row its claim returned, once, if still fresh (a save or release forgets it)."""
        with self._guard:
            until, row = self._claims.pop(run_id, (0.0, None))
        return row if time.monotonic() < until else None

    def put(self, run_id: str, known: Known) -> None:
        if known.seq < 1:  # a chain with no event yet: nothing to chain onto
            return
        with self._guard:
            self._runs[run_id] = known
            self._runs.move_to_end(run_id)
            while len(self._runs) > self.size:
                self._runs.popitem(last=False)


def step_writes(stored: Mapping[str, tuple[int, str]], rows: Mapping[str, tuple[int, str] | None]
                ) -> tuple[dict[str, tuple[int, str]], list[str], list[str], list[str]]:
    """The step rows once ``rows`` (None: the step is gone) are written over ``stored``, and the
    keys of the rows to delete, to update and to insert; a row as stored already is not written."""
    after = dict(stored)
    gone: list[str] = []
    changed: list[str] = []
    new: list[str] = []
    for key, row in rows.items():
        was = after.get(key)
        if row is None:
            if after.pop(key, None) is not None:
                gone.append(key)
        elif row != was:
            after[key] = row
            (new if was is None else changed).append(key)
    return after, gone, changed, new
