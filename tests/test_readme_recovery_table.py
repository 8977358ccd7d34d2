"""README's time-to-recovery table is the one bench/recovery.py renders from its saved results.

No sandbox: the bench writes bench/recovery.json and the table between the README's markers in
one go; this checks the two still agree, so neither can drift from the other.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_recovery", ROOT / "bench" / "recovery.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_table_is_the_saved_results_rendered() -> None:
    b = bench()
    results = json.loads((ROOT / "bench" / "recovery.json").read_text())
    readme = (ROOT / "README.md").read_text()
    assert readme.count(b.BEGIN) == 1 and readme.count(b.END) == 1
    block = readme.split(b.BEGIN, 1)[1].split(b.END, 1)[0]
    assert block == "\n" + b.render_markdown(results)
    assert results["command"] in block


def test_table_sits_on_the_first_screen() -> None:
    readme = (ROOT / "README.md").read_text()
    assert readme.index(bench().BEGIN) < readme.index("## Quickstart")


def test_render_and_write_round_trip(tmp_path: Path) -> None:
    b = bench()
    results = json.loads((ROOT / "bench" / "recovery.json").read_text())
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\nintro\n\nThe safe order is the easy path:\n\n## Quickstart\n")
    b.write_readme(b.render_markdown(results), readme)
    b.write_readme(b.render_markdown(results), readme)  # replaced, not added twice
    text = readme.read_text()
    assert text.count(b.BEGIN) == 1
    assert b.render_markdown(results) in text
