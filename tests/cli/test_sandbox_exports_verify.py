"""An untouched export of a shipped runbook's run on the sandbox verifies offline (issue 28).

``runbook-bot export RUN --format json`` of a finished ``make demo``-style run, then
``runbook-bot audit verify --file`` on that untouched file: intact. The run section of the export
and the chain's ``run.created`` must agree on how params are written (defaults filled in,
durations in seconds), or an honest file is reported as tampered.

One run per sandbox scenario costs one to four seconds of CPU each (a sandbox start and a whole
runbook), far over the issue's 10 s budget for 23 scenarios; so one session-scoped fixture plays a
representative subset into one store: node-dead-ngns on ``node-dead`` (the demo: approvals, three
duration params left at their defaults) and stuck-terminating-volume on ``stuck-terminating``
(another runbook, a snapshot waited for). Every golden run is exported and verified through the
same commands in tests/present/test_export_cli.py, without a sandbox. JSON is the one export
format that carries a seal; Markdown and HTML say the chain is intact.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bot.cli import main

pytest.importorskip("moto", reason="the sandbox needs runbook-bot[sim]")
pytestmark = pytest.mark.slow  # whole-runbook rehearsals, as tests/rehearsals

KEY = "sandbox-export-key-0123456789"

# scenario -> the runbook that answers it and its params from the scenario's facts
SUBSET: dict[str, tuple[str, Callable[[dict[str, Any]], dict[str, Any]]]] = {
    "node-dead": ("node-dead-ngns", lambda f: {"node": f["node"]}),
    "stuck-terminating": ("stuck-terminating-volume", lambda f: {"pv": f["live"]["pv"]}),
}


@pytest.fixture(scope="session")
def sandbox_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    """The store and the run id of each scenario's finished run (every sandbox stopped again)."""
    from bot.sim.rehearsal import Rehearsal

    tmp = tmp_path_factory.mktemp("sandbox-exports")
    url = f"sqlite:///{tmp / 'state.db'}"
    runs: dict[str, str] = {}
    for scenario, (runbook, params) in SUBSET.items():
        with Rehearsal(scenario, database_url=url, audit_key=KEY, workdir=tmp / scenario) as r:
            state = r.run(runbook, **params(r.facts))
            assert state.status == "succeeded", (scenario, state.outcome)
            runs[scenario] = state.run_id
    return url, runs


@pytest.fixture
def cli(sandbox_runs: tuple[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Callable[..., tuple[int, str]]:
    monkeypatch.setenv("RUNBOOK_BOT_DATABASE_URL", sandbox_runs[0])
    monkeypatch.setenv("RUNBOOK_BOT_AUDIT_KEY", KEY)
    monkeypatch.delenv("RUNBOOK_BOT_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)

    def call(*argv: str) -> tuple[int, str]:
        code = main(list(argv))
        out = capsys.readouterr()
        return code, out.out + out.err

    return call


@pytest.mark.parametrize("scenario", list(SUBSET))
def test_an_untouched_export_of_a_sandbox_run_verifies_offline(
        sandbox_runs: tuple[str, dict[str, str]], cli: Callable[..., tuple[int, str]],
        tmp_path: Path, scenario: str) -> None:
    run = sandbox_runs[1][scenario]
    path = tmp_path / "export.json"
    code, out = cli("export", run, "--format", "json", "-o", str(path))
    assert code == 0, out
    code, out = cli("audit", "verify", "--file", str(path))
    assert code == 0 and "audit chain intact" in out, out
    doc = json.loads(path.read_text(encoding="utf-8"))
    created = doc["events"][0]["payload"]["params"]
    assert doc["run"]["params"] == created  # one normal form: what the chain recorded
    shown = {}
    for fmt in ("md", "html"):
        code, shown[fmt] = cli("export", run, "--format", fmt)
        assert code == 0 and "BROKEN" not in shown[fmt] and "intact" in shown[fmt], shown[fmt][-2000:]
    if scenario == "node-dead":  # the demo's durations: recorded in seconds, shown as written
        assert doc["run"]["params"]["detach_wait"] == 360.0
        assert doc["run"]["params_written"]["detach_wait"] == "6m"
        assert "`detach_wait` = 6m" in shown["md"]
