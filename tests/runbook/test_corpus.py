"""Every invalid runbook in the corpus fails with exactly the problems its first line names."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.actions.registry import Registry
from bot.errors import RunbookError
from bot.runbook.loader import load_runbook

CORPUS = sorted((Path(__file__).parent / "invalid").glob("*.yaml"))


def expected(path: Path) -> list[str]:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name} must start with '# expect: LINE:COL: message'"
    return first.removeprefix("# expect: ").split(" || ")


def test_the_corpus_has_at_least_25_invalid_runbooks() -> None:
    assert len(CORPUS) >= 25


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_an_invalid_runbook_reports_each_problem_at_its_line(path: Path, catalog: Registry) -> None:
    with pytest.raises(RunbookError) as caught:
        load_runbook(path, catalog=catalog)
    got = [f"{p.line}:{p.col}: {p.message}" for p in caught.value.problems]
    assert got == expected(path)
    assert all(p.file == str(path) for p in caught.value.problems)


def test_the_error_text_is_file_line_col_message(catalog: Registry) -> None:
    path = next(p for p in CORPUS if p.stem == "unknown-action")
    with pytest.raises(RunbookError) as caught:
        load_runbook(path, catalog=catalog)
    assert str(caught.value) == (
        f"{path}:15:15: unknown action 'k8s.node.gett' (did you mean 'k8s.node.get'?); "
        "see docs/action-results.md for the actions"
    )
