"""``runbook-bot diagnose`` through ``bot.cli.main`` with a real config file: findings as text and
JSON against the sandbox, and exit status 0 (nothing), 1 (found), 2 (the scan itself failed: an
unreachable API server, a read the bot's RBAC forbids), so a broken scan never reads as a finding
or as a clean cluster."""

from __future__ import annotations

import json
import socket
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.cli import main

pytest.importorskip("moto", reason="needs the sandbox: pip install runbook-bot[sim]")

from bot.engine.ports import ManualClock
from bot.sim.sandbox import BOT_CONTEXT, Sandbox

ROOT = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path, monkeypatch: Any, kubeconfig: str) -> None:
    config = tmp_path / "runbook-bot.yaml"
    config.write_text(textwrap.dedent(f"""\
        database_url: sqlite:///{tmp_path / 'state.db'}
        clusters:
          sandbox: {{kubeconfig: {kubeconfig}, context: {BOT_CONTEXT}, region: ap-southeast-1}}
        """))
    monkeypatch.setenv("RUNBOOK_BOT_CONFIG", str(config))
    for var in ("RUNBOOK_BOT_DATABASE_URL", "RUNBOOK_BOT_RUNBOOKS_DIR"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    def start(scenario: str, **options: Any) -> Sandbox:
        sb = Sandbox(scenario, workdir=tmp_path / "sandbox", clock=ManualClock(), options=options)
        sb.start()
        started.append(sb)
        sb.rebase(datetime.now(UTC))  # the CLI reads the system clock
        for key, value in sb.env.items():
            monkeypatch.setenv(key, value)
        _config(tmp_path, monkeypatch, str(sb.kubeconfig_path))
        return sb

    started: list[Sandbox] = []
    yield start
    for sb in started:
        sb.stop()


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["diagnose", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.slow
def test_findings_exit_1_as_text_and_json_and_a_scope_with_nothing_exits_0(sandbox, capsys):
    sb = sandbox("node-dead")
    dead, healthy = sb.facts["dead_node"], sb.facts["new_node"]
    code, out, err = run(capsys)
    assert (code, err) == (1, "")
    assert out.startswith("cluster sandbox, scanned ") and "1 finding (" in out
    assert f"run:     runbook-bot run node-dead-ngns -p cluster=sandbox -p node={dead}" in out
    assert "[ec2:DescribeInstances, read " in out and "HIGH    node-dead-holding-volumes" in out

    code, out, _ = run(capsys, "--format", "json", "--pod", sb.facts["pod"], "-n", "search")
    doc = json.loads(out)
    assert code == 1 and doc["cluster"] == "sandbox" and doc["calls"] > 0
    [f] = doc["findings"]
    assert (f["runbook"], f["params"]) == ("node-dead-ngns", {"cluster": "sandbox", "node": dead})
    assert all({"what", "source", "read_at"} <= set(e) for e in f["evidence"])

    code, out, _ = run(capsys, "--node", healthy)
    assert code == 0 and "nothing found" in out


def test_pod_and_node_together_are_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["diagnose", "--pod", "a", "--node", "b"])
    assert e.value.code == 2


def test_an_unreachable_api_server_is_a_failed_scan_not_a_clean_cluster(tmp_path, monkeypatch,
                                                                          capsys):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(textwrap.dedent(f"""\
        apiVersion: v1
        kind: Config
        clusters: [{{name: c, cluster: {{server: "https://127.0.0.1:{port}",
                                          insecure-skip-tls-verify: true}}}}]
        users: [{{name: u, user: {{token: t}}}}]
        contexts: [{{name: {BOT_CONTEXT}, context: {{cluster: c, user: u}}}}]
        current-context: {BOT_CONTEXT}
        """))
    _config(tmp_path, monkeypatch, str(kubeconfig))
    code, out, err = run(capsys)
    assert (code, out) == (2, "")
    last = err.splitlines()[-1]  # after urllib3's own retry warnings
    assert last.startswith("runbook-bot: error: the scan failed, nothing was concluded: ")
    assert "cannot reach the API server" in last and "Traceback" not in err


@pytest.mark.slow
def test_a_read_the_bots_rbac_forbids_is_a_failed_scan(sandbox, tmp_path, capsys):
    # the bot's role as it was before diagnose: claims could be read one by one, not listed
    rbac = (ROOT / "deploy" / "rbac.yaml").read_text().replace(
        "verbs: [get, list, update]               # finalizer removal, behind interlock 4; list: "
        "diagnose", "verbs: [get, update]")
    assert "verbs: [get, update]" in rbac
    (tmp_path / "rbac.yaml").write_text(rbac)
    sandbox("node-dead", rbac=str(tmp_path / "rbac.yaml"))
    code, out, err = run(capsys)
    assert (code, out) == (2, "")
    assert "403 Forbidden" in err and "persistentvolumeclaims" in err
