"""The config's ``api:`` section: how the API's callers authenticate, checked as strictly as the rest
(tests/test_config.py): every bad value one line naming the key, token hashes never echoed."""

from __future__ import annotations

from typing import Any

import pytest

from bot.config import KubernetesAuthConfig, OidcConfig, settings_from_mapping
from bot.errors import ConfigError

HASH = "sha256:" + "ab" * 32


def problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as e:
        settings_from_mapping(data, {}, source="bot.yaml")
    return str(e.value).splitlines()


def test_the_api_section_loads_with_its_defaults() -> None:
    s = settings_from_mapping({"api": {
        "tokens": {"ci-nightly": HASH},
        "oidc": {"issuer": "https://login.example.com", "audience": "runbook-bot"},
        "kubernetes": {"cluster": "prod", "pinned_session_roles": ["AWSReservedSSO_*"]}}}, {})
    assert s.api.tokens == {"ci-nightly": HASH}
    assert s.api.oidc == OidcConfig(issuer="https://login.example.com", audience="runbook-bot",
                                    jwks_url=None, username_claim="sub", groups_claim="groups")
    assert s.api.kubernetes == KubernetesAuthConfig(
        cluster="prod", audiences=("runbook-bot",), pinned_session_roles=("AWSReservedSSO_*",),
        service_accounts=(), bot_service_account="runbook-bot:runbook-bot")
    assert s.api.enabled


def test_by_default_no_method_is_on_and_an_empty_section_is_the_default() -> None:
    assert not settings_from_mapping({}, {}).api.enabled
    assert not settings_from_mapping({"api": None}, {}).api.enabled


def test_a_token_that_is_not_a_sha256_hash_is_refused_without_echoing_it() -> None:
    (line,) = problems({"api": {"tokens": {"ci": "my-plain-secret-token"}}})
    assert line.startswith("bot.yaml: api.tokens.ci: ")
    assert "my-plain-secret-token" not in line


@pytest.mark.parametrize(("data", "start"), [
    ({"oidc": {"issuer": "login.example.com", "audience": "x"}}, "bot.yaml: api.oidc.issuer: "),
    ({"oidc": {"issuer": "https://login.example.com"}}, "bot.yaml: api.oidc.audience: "),
    ({"kubernetes": {"cluster": "prod", "audiences": "runbook-bot"}},
     "bot.yaml: api.kubernetes.audiences: must be a list"),
    ({"kubernetes": {"cluster": "prod", "service_accounts": ["ci/deployer"]}},
     "bot.yaml: api.kubernetes.service_accounts[0]: "),
    ({"kubernetes": {"cluster": "prod", "pinned": ["x"]}},
     "bot.yaml: api.kubernetes.pinned: unknown key; valid keys here: cluster, audiences, "
     "pinned_session_roles, service_accounts, bot_service_account"),
    ({"token": {}}, "bot.yaml: api.token: unknown key; valid keys here: tokens, oidc, kubernetes"),
])
def test_a_bad_api_value_is_one_line_naming_the_key(data: dict[str, Any], start: str) -> None:
    (line,) = problems({"api": data})
    assert line.startswith(start), line
