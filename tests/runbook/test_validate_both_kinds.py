"""``runbook-bot validate`` reports the document's problems beside the structure's, in one run.

The corpus file ``invalid/structure-and-meaning.yaml`` pins every line; here the command is run
the way a person runs it, and the cases where the structure leaves nothing to check are shown.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.cli import main

INVALID = Path(__file__).parent / "invalid"


def test_one_run_reports_both_kinds(capsys: pytest.CaptureFixture[str]) -> None:
    path = INVALID / "structure-and-meaning.yaml"
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr().out
    # the structure's
    assert "spec.steps[0]: a step needs exactly one of 'action' or 'manual'" in out
    assert "spec.steps[1]: unknown field 'colour'" in out
    assert "spec.triggers[0].alertname" in out and "spec.outcome[0].outcome" in out
    # the document's, on what stands: the second trigger and outcome rule keep their own lines
    assert ":16:9: trigger 'NodeDown' fills param 'nod'" in out
    assert "its approval cannot be switched off" in out
    assert ":34:13: unknown param 'nde'" in out
    # nothing is said about what was set aside: the broken step's outputs are its own business
    assert "'broken'" not in out and "steps.broken" not in out


def test_where_the_structure_leaves_nothing_standing_only_it_is_reported(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "no-steps.yaml"
    path.write_text("apiVersion: runbook-bot/v1\nkind: Runbook\nmetadata: {name: x, title: x}\n"
                    "spec:\n  params: {n: {type: string}}\n  steps: {read: nope}\n"
                    "  outcome: [{when: params.m, outcome: succeeded, reason: r}]\n")
    assert main(["validate", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    # steps are not a list: nothing to check them against, so params.m goes unreported for now
    assert len(lines) == 1 and lines[0].endswith(":6:3: spec.steps: Input should be a valid tuple")
