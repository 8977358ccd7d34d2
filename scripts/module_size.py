"""The module-size budget of ``make lint``: no Python module under the given packages may be longer
than a limit (600 lines by default), so that a module stays one subject a reader can hold at once.

Usage: ``python scripts/module_size.py [--max-lines N] PATH...``. Prints every module over the limit,
``path: N lines (limit M)``, and exits 1 if there is any; exits 0 silently otherwise.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

DEFAULT_MAX_LINES = 600


def _modules(paths: Sequence[Path]) -> Iterator[Path]:
    for path in paths:
        if path.is_dir():
            yield from sorted(path.rglob("*.py"))
        else:
            yield path


def oversized(paths: Sequence[Path], max_lines: int) -> list[tuple[Path, int]]:
    """Every module under ``paths`` with more than ``max_lines`` lines, with its line count."""
    found = []
    for module in _modules(paths):
        with module.open("rb") as f:
            lines = sum(1 for _ in f)
        if lines > max_lines:
            found.append((module, lines))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--max-lines", type=int, default=DEFAULT_MAX_LINES)
    parser.add_argument("paths", nargs="+", type=Path)
    args = parser.parse_args(argv)
    found = oversized(args.paths, args.max_lines)
    for module, lines in found:
        print(f"{module}: {lines} lines (limit {args.max_lines})")
    if found:
        print(f"{len(found)} module(s) over {args.max_lines} lines: split them (docs/architecture.md)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
