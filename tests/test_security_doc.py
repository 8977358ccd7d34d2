"""docs/security.md names the test that proves each guarantee: every file and test it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def named_tests() -> list[tuple[str, str | None]]:
    """(file, test or None) for every `tests/...py[::name]` and `::name` the doc's table names."""
    text = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")
    table = text.split("## Each guarantee and the test that proves it", 1)[1]
    found: list[tuple[str, str | None]] = []
    for row in (line for line in table.splitlines() if line.startswith("| ")):
        file = None
        for ref in re.findall(r"`((?:tests/[\w/]+\.py)?(?:::\w+)?)`", row):
            path, _, name = ref.partition("::")
            file = path or file
            if file:
                found.append((file, name or None))
    return found


def test_every_test_the_security_doc_names_exists() -> None:
    named = named_tests()
    assert len(named) > 40
    missing = []
    for file, name in named:
        path = ROOT / file
        if not path.is_file():
            missing.append(file)
        elif name and not re.search(rf"^def {name}\(", path.read_text(encoding="utf-8"), re.M):
            missing.append(f"{file}::{name}")
    assert missing == []
