"""The complexity and size budget of ``make lint`` (docs/architecture.md) catches what it is for.

A temporary package is planted with a function radon rates E and a 601-line module; the same
commands ``make lint`` runs must fail on it and name both, and pass on the same package kept
within the budget (a function rated D, a 600-line module).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
XENON = [str(BIN / "xenon"), "--max-absolute", "D"]
MODULE_SIZE = [sys.executable, str(ROOT / "scripts" / "module_size.py"), "--max-lines", "600"]


def _branchy(name: str, branches: int) -> str:
    """A function whose cyclomatic complexity is ``branches + 1``."""
    body = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(branches))
    return f"def {name}(x: int) -> int:\n{body}    return -1\n"


def _plant(root: Path, *, branches: int, lines: int) -> Path:
    pkg = root / "planted"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "tangled.py").write_text(_branchy("tangled", branches))
    (pkg / "long.py").write_text("".join(f"X{i} = {i}\n" for i in range(lines)))
    return pkg


def _run(cmd: list[str], pkg: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, str(pkg)], capture_output=True, text=True, timeout=30)


def test_make_lint_runs_the_budget_checks() -> None:
    recipe = (ROOT / "Makefile").read_text()
    assert "\t$(VENV)/bin/xenon --max-absolute D bot\n" in recipe
    assert "\t$(PY) scripts/module_size.py --max-lines 600 bot\n" in recipe


def test_a_function_rated_e_fails_the_complexity_check(tmp_path: Path) -> None:
    pkg = _plant(tmp_path, branches=31, lines=10)  # complexity 32: E (31-40)
    result = _run(XENON, pkg)
    assert result.returncode != 0
    assert "tangled" in result.stderr + result.stdout
    assert "rank of E" in result.stderr + result.stdout


def test_a_function_rated_d_passes_the_complexity_check(tmp_path: Path) -> None:
    pkg = _plant(tmp_path, branches=29, lines=10)  # complexity 30: D (21-30)
    result = _run(XENON, pkg)
    assert result.returncode == 0, result.stderr + result.stdout


def test_a_601_line_module_fails_the_size_check(tmp_path: Path) -> None:
    pkg = _plant(tmp_path, branches=1, lines=601)
    result = _run(MODULE_SIZE, pkg)
    assert result.returncode == 1
    assert f"{pkg / 'long.py'}: 601 lines (limit 600)" in result.stdout
    assert "tangled" not in result.stdout


def test_a_600_line_module_passes_the_size_check(tmp_path: Path) -> None:
    pkg = _plant(tmp_path, branches=1, lines=600)
    result = _run(MODULE_SIZE, pkg)
    assert result.returncode == 0, result.stdout
    assert result.stdout == ""
