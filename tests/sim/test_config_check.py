"""``runbook-bot config check`` against the sandbox: the real kubeconfig, RBAC, and STS over HTTP.

The sandbox's fake API server authorizes the bot's ServiceAccount against deploy/rbac.yaml and its
EC2 endpoint forwards STS calls to moto, so the check reaches both as it would in production.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bot.cli import main


@pytest.fixture
def sandbox(pool: Any) -> Any:
    return pool.get("node-dead")  # only read: the pool's running sandbox serves


@pytest.fixture
def configured(sandbox: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    for var in ("RUNBOOK_BOT_CONFIG", "RUNBOOK_BOT_RUNBOOKS_DIR", "RUNBOOK_BOT_DATABASE_URL",
                "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    for key, value in sandbox.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sandbox.ec2.endpoint)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)

    def write(cluster: str) -> None:
        (tmp_path / "runbook-bot.yaml").write_text(
            f"database_url: sqlite:///{tmp_path}/state.db\nclusters:\n  sandbox: {cluster}\n")

    return write


def test_a_reachable_cluster_and_aws_account_are_reported(
        sandbox: Any, configured: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from bot.sim.sandbox import BOT_CONTEXT

    configured(f"{{kubeconfig: {sandbox.kubeconfig_path}, context: {BOT_CONTEXT}, "
               f"region: {sandbox.region}}}")
    assert main(["config", "check"]) == 0
    lines = capsys.readouterr().out.splitlines()
    nodes = len(sandbox.list("Node"))
    kube = next(line for line in lines if "kubernetes" in line)
    assert kube.startswith("ok    cluster sandbox kubernetes: https://127.0.0.1:")
    assert kube.endswith(f"(kubeconfig {sandbox.kubeconfig_path}, context {BOT_CONTEXT}), "
                         f"{nodes} nodes")
    aws = next(line for line in lines if " aws: " in line)
    assert aws.startswith("ok    cluster sandbox aws: account 123456789012, arn:aws:")


def test_role_arn_is_assumed_before_the_identity_is_asked(
        sandbox: Any, configured: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from bot.sim.sandbox import BOT_CONTEXT

    role = "arn:aws:iam::123456789012:role/runbook-bot"
    configured(f"{{kubeconfig: {sandbox.kubeconfig_path}, context: {BOT_CONTEXT}, "
               f"region: {sandbox.region}, role_arn: '{role}'}}")
    assert main(["config", "check"]) == 0
    aws = next(line for line in capsys.readouterr().out.splitlines() if " aws: " in line)
    assert ":assumed-role/runbook-bot/runbook-bot-sandbox" in aws and f"role {role})" in aws


def test_a_context_the_api_server_does_not_accept_fails_the_check(
        sandbox: Any, configured: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stranger = tmp_path / "kubeconfig"
    stranger.write_text(sandbox.kubeconfig_path.read_text().replace('"token": "', '"token": "x'))
    configured(f"{{kubeconfig: {stranger}, region: {sandbox.region}}}")
    assert main(["config", "check"]) == 1
    kube = next(line for line in capsys.readouterr().out.splitlines() if "kubernetes" in line)
    assert kube.startswith("FAIL  cluster sandbox kubernetes: ")
    assert kube.endswith("context (current)): list_node: HTTP 401 Unauthorized: Unauthorized")
