"""README's "Shipped runbooks" table names every runbook shipped in runbooks/, and nothing else.

A runbook added without its row (or a row left for a runbook removed) fails here; the names are
the runbooks' own ``metadata.name``, read from the files the wheel and the image ship.
"""

from __future__ import annotations

import re
from pathlib import Path

from ruamel.yaml import YAML

ROOT = Path(__file__).parents[1]


def table_rows(readme: str) -> list[str]:
    """The first column of the table under ``## Shipped runbooks``."""
    section = readme.split("\n## Shipped runbooks\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    assert rows[0].startswith("| runbook |") and set(rows[1]) <= {"|", "-"}, rows[:2]
    names = []
    for row in rows[2:]:
        m = re.fullmatch(r"\| `([a-z0-9-]+)` \|.+\|.+\|", row)
        assert m, f"a row of the runbook table is not `name` | for | changes: {row}"
        names.append(m[1])
    return names


def shipped() -> list[str]:
    names = []
    for path in sorted((ROOT / "runbooks").glob("*.yaml")):
        doc = YAML(typ="safe").load(path.read_text())
        assert doc["metadata"]["name"] == path.stem, path
        names.append(path.stem)
    return names


def test_the_readme_table_lists_every_shipped_runbook_once() -> None:
    rows = table_rows((ROOT / "README.md").read_text())
    assert len(rows) == len(set(rows)), f"listed twice: {sorted(r for r in rows if rows.count(r) > 1)}"
    missing, extra = sorted(set(shipped()) - set(rows)), sorted(set(rows) - set(shipped()))
    assert (missing, extra) == ([], []), f"not in the README's table: {missing}; not shipped: {extra}"


def test_a_runbook_without_its_row_is_caught() -> None:
    readme = (ROOT / "README.md").read_text()
    without = "\n".join(line for line in readme.splitlines()
                        if not line.startswith("| `zone-outage-ngns` |"))
    assert set(shipped()) - set(table_rows(without)) == {"zone-outage-ngns"}
