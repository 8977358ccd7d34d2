"""Time to takeover: how long a dead replica's run waits before another replica carries it on.

Two replicas serve one database as two hosts (``unshare --uts``, so neither can tell that the
other's process is gone); the one applying a step is SIGKILLed in the middle of the apply. The
figures are, from the moment it died: the survivor's first save of the run (the takeover) and
the run finished. A run lease is ``lease_seconds`` long (6 s by default) and renewed by a heartbeat
each third of that, so the takeover should come between 4 and 6 s plus one poll of the worker
loop. Target: every takeover under 10 s.

    .venv/bin/python bench/takeover.py [--trials N] [--database-url URL]

PostgreSQL at 127.0.0.1:5432 (database ``test``, a private schema) when it answers, else a
SQLite file. Needs root for ``unshare`` (as in a CI container).
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sqlalchemy as sa

from tests.runtime.replica import can_unshare, takeover_trial

PG = "postgresql+psycopg://127.0.0.1:5432/test"
TARGET_S = 10.0


@contextmanager
def database(url: str | None, workdir: Path) -> Iterator[str]:
    if url:
        yield url
        return
    try:
        admin = sa.create_engine(PG)
        with admin.connect():
            pass
    except Exception:
        yield f"sqlite:///{workdir / 'state.db'}"
        return
    schema = f"rbbench_{secrets.token_hex(4)}"
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    try:
        yield f"{PG}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--database-url", help="a database of its own (default: see above)")
    args = ap.parse_args()
    if not can_unshare():
        print("takeover: needs `unshare --uts` (util-linux, as root); not measured")
        return 1
    takeovers, finishes = [], []
    for i in range(args.trials):
        with tempfile.TemporaryDirectory() as tmp, database(args.database_url, Path(tmp)) as url:
            trial = takeover_trial(url, Path(tmp))
        takeovers.append(trial.takeover)
        finishes.append(trial.finish)
        print(f"trial {i + 1}: {trial.dead} killed holding the run; {trial.survivor} took it over "
              f"after {trial.takeover:.2f} s and finished it after {trial.finish:.2f} s")
    backend = "PostgreSQL" if (args.database_url or PG).startswith("postgresql") else "SQLite"
    print(f"takeover ({backend}, {args.trials} trials): min {min(takeovers):.2f} s, "
          f"median {statistics.median(takeovers):.2f} s, max {max(takeovers):.2f} s "
          f"(target < {TARGET_S:.0f} s); run finished: median {statistics.median(finishes):.2f} s, "
          f"max {max(finishes):.2f} s")
    return 0 if max(takeovers) < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
