"""Front-ends reach runs and runbooks through the runtime facade (``bot.runtime.facade``) only:
no module outside ``bot.runtime`` reaches through the runner into its store, policy, runbook
source, clusters or catalog."""

from __future__ import annotations

import re
from pathlib import Path

BOT = Path(__file__).resolve().parents[1] / "bot"
THROUGH_THE_RUNNER = re.compile(r"runner\.(store|policy|runbooks|clusters|catalog)\b")

def reaching_through() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(BOT.rglob("*.py")):
        rel = path.relative_to(BOT).as_posix()
        if rel.startswith("runtime/"):
            continue
        lines = [f"{rel}:{n}: {line.strip()}"
                 for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if THROUGH_THE_RUNNER.search(line)]
        if lines:
            found[rel] = lines
    return found


def test_no_front_end_reaches_through_the_runner() -> None:
    offending = [line for lines in reaching_through().values() for line in lines]
    assert not offending, "use bot.runtime.facade.Runtime instead:\n" + "\n".join(offending)
