"""``bearer_token``: the token a kubeconfig context sends, which the terminal hands to the bot's API
(``server.token: kubeconfig``), exec plugins (``aws eks get-token``) included."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bot.clients.kube import bearer_token
from bot.errors import ConfigError


@pytest.fixture
def kubeconfig(tmp_path: Path) -> str:
    plugin = tmp_path / "get-token.py"
    plugin.write_text('import json\nprint(json.dumps({"apiVersion": "client.authentication.k8s.io/'
                      'v1beta1", "kind": "ExecCredential", "status": {"token": "k8s-aws-v1.abc"}}))\n')
    path = tmp_path / "config"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://127.0.0.1:6443"}}}}]
users:
- name: exec
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: {sys.executable}
      args: [{plugin}]
      interactiveMode: Never
- {{name: static, user: {{token: tok123}}}}
- {{name: basic, user: {{username: a, password: b}}}}
contexts:
- {{name: eks, context: {{cluster: c, user: exec}}}}
- {{name: static, context: {{cluster: c, user: static}}}}
- {{name: basic, context: {{cluster: c, user: basic}}}}
current-context: eks
""")
    return str(path)


def test_the_token_of_an_exec_plugin_and_of_a_static_token(kubeconfig: str) -> None:
    assert bearer_token(kubeconfig=kubeconfig) == "k8s-aws-v1.abc"
    assert bearer_token(kubeconfig=kubeconfig, context="static") == "tok123"


def test_a_context_without_a_bearer_token_is_refused(kubeconfig: str) -> None:
    with pytest.raises(ConfigError, match=r"yields no bearer token.*env:VAR or file:PATH"):
        bearer_token(kubeconfig=kubeconfig, context="basic")
    with pytest.raises(ConfigError, match="cannot read a bearer token"):
        bearer_token(kubeconfig=kubeconfig, context="nowhere")
