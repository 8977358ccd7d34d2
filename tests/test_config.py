"""Config validation: every key typed, every bad value one line naming the key and what is allowed.

A safety switch written as a quoted string (``allow_self_approval: "false"``) used to become True;
now it is an error, like every other value of the wrong type or out of range.
"""

from __future__ import annotations

from typing import Any

import pytest

from bot.config import settings_from_mapping
from bot.errors import ConfigError


def problems(data: dict[str, Any], env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as e:
        settings_from_mapping(data, env or {}, source="bot.yaml")
    return str(e.value).splitlines()


@pytest.mark.parametrize(("data", "line"), [
    ({"policy": {"allow_self_approval": "false"}},
     "bot.yaml: policy.allow_self_approval: must be true or false (got 'false'); write true or "
     "false without quotes"),
    ({"policy": {"allow_impersonation": "no"}},
     "bot.yaml: policy.allow_impersonation: must be true or false (got 'no'); write true or false "
     "without quotes"),
    ({"policy": {"allow_impersonation": 1}},
     "bot.yaml: policy.allow_impersonation: must be true or false (got 1)"),
    ({"policy": {"max_out_of_service_nodes": 0}},
     "bot.yaml: policy.max_out_of_service_nodes: must be at least 1 (got 0)"),
    ({"policy": {"max_out_of_service_nodes": True}},
     "bot.yaml: policy.max_out_of_service_nodes: must be a whole number (got True)"),
    ({"policy": {"fence_min_not_ready": 20}},
     "bot.yaml: policy.fence_min_not_ready: must be at least 30 (got 20)"),
    ({"policy": {"fence_ambiguous_after": 30}},
     "bot.yaml: policy.fence_ambiguous_after: must be at least 60 (got 30)"),
    ({"policy": {"hold_recheck_seconds": 2}},
     "bot.yaml: policy.hold_recheck_seconds: must be at least 5 (got 2)"),
    ({"policy": {"hold_recheck_seconds": 600}},
     "bot.yaml: policy.hold_recheck_seconds: must be at most 300 (got 600)"),
    ({"policy": {"node_monitor_grace_period": 5}},
     "bot.yaml: policy.node_monitor_grace_period: must be at least 10 (got 5)"),
    ({"policy": {"fence_min_not_ready": "5m"}},
     "bot.yaml: policy.fence_min_not_ready: must be a number of seconds (got '5m'); write the "
     "number without quotes"),
    ({"policy": {"default_expires_after": 0}},
     "bot.yaml: policy.default_expires_after: must be more than 0 (got 0)"),
    ({"policy": {"default_expires_after": float("nan")}},
     "bot.yaml: policy.default_expires_after: must be a finite number (got nan)"),
    ({"policy": {"groups": {"sre": "alice"}}},
     "bot.yaml: policy.groups.sre: must be a list (got 'alice')"),
    ({"policy": {"approvals_from": []}}, "bot.yaml: policy.approvals_from: must not be empty"),
    ({"policy": {"approvals_from": ["email"]}},
     "bot.yaml: policy.approvals_from[0]: must be one of 'terminal', 'slack' or 'api' (got 'email')"),
    ({"lease_seconds": float("inf")}, "bot.yaml: lease_seconds: must be a finite number (got inf)"),
    ({"lease_seconds": "60"},
     "bot.yaml: lease_seconds: must be a number of seconds (got '60'); write the number without "
     "quotes"),
    ({"redact_patterns": ["ok", "(unclosed"]},
     "bot.yaml: redact_patterns: pattern 1 ('(unclosed') is not a Python regular expression: "
     "missing ), unterminated subpattern at position 0"),
    ({"database_url": "not a url"},
     "bot.yaml: database_url: not a database URL; expected e.g. sqlite:////var/lib/runbook-bot/"
     "state.db or postgresql+psycopg://bot@db/runbookbot"),
    ({"database_url": "mysql://db/bot"},
     "bot.yaml: database_url: the database must be one of: sqlite, postgresql (got 'mysql')"),
    ({"clusters": {"prod": {"retry_mode": "fast"}}},
     "bot.yaml: clusters.prod.retry_mode: must be one of 'legacy', 'standard' or 'adaptive' "
     "(got 'fast')"),
    ({"clusters": {"prod": {"max_attempts": "5"}}},
     "bot.yaml: clusters.prod.max_attempts: must be a whole number (got '5'); write the number "
     "without quotes"),
    ({"clusters": {"prod": "eu-west-1"}}, "bot.yaml: clusters.prod: must be a mapping"),
    ({"clusters": {"prod": {"regoin": "eu-west-1"}}},
     "bot.yaml: clusters.prod.regoin: unknown key; valid keys here: kubeconfig, context, region, "
     "profile, role_arn, retry_mode, max_attempts, request_timeout, eks_cluster, auth, server, "
     "certificate_authority"),
    ({"slack": {"allowed_channels": "C0OPS00001"}},
     "bot.yaml: slack.allowed_channels: must be a list (got 'C0OPS00001')"),
    ({"polcy": {}}, "bot.yaml: polcy: unknown key; valid keys here: database_url, audit_key, "
                    "audit_previous_keys, runbooks_dir, redact_patterns, clusters, policy, slack, "
                    "alerts, listen, api, agents, watcher, pagerduty, lease_seconds, server, "
                    "local_mode_override"),
])
def test_a_bad_value_is_one_line_naming_the_key_and_what_is_allowed(
    data: dict[str, Any], line: str,
) -> None:
    assert problems(data) == [line]


def test_the_environment_is_validated_like_the_file() -> None:
    assert problems({}, {"RUNBOOK_BOT_DATABASE_URL": "mysql://db/bot"}) == [
        "bot.yaml: database_url: the database must be one of: sqlite, postgresql (got 'mysql')"]


def test_every_problem_is_reported_at_once() -> None:
    lines = problems({"policy": {"allow_self_approval": "false", "max_out_of_service_nodes": 0},
                      "lease_seconds": -1})
    assert [line.split(": ")[1] for line in lines] == [
        "policy.allow_self_approval", "policy.max_out_of_service_nodes", "lease_seconds"]


def test_good_values_load_with_their_types() -> None:
    s = settings_from_mapping({
        "database_url": "postgresql+psycopg://bot@db/runbookbot",
        "redact_patterns": [r"xox[bp]-\S+"],
        "clusters": {"prod": {"region": "eu-west-1", "max_attempts": 3, "request_timeout": 10}},
        "policy": {"groups": {"sre": ["alice", "slack:U1"]}, "allow_self_approval": True,
                   "approvals_from": ["slack"], "default_expires_after": 600,
                   "max_out_of_service_nodes": 2, "fence_min_not_ready": 600},
        "slack": None, "lease_seconds": 30,
    }, {"SLACK_BOT_TOKEN": "xoxb-1", "RUNBOOK_BOT_SLACK_CHANNELS": "C1, C2"})
    assert s.policy.allow_self_approval is True and s.policy.approvals_from == ("slack",)
    assert s.policy.groups == {"sre": ("alice", "slack:U1")}
    assert s.policy.max_out_of_service_nodes == 2 and s.policy.default_expires_after == 600
    assert s.policy.fence_min_not_ready == 600
    assert s.cluster("prod").max_attempts == 3 and s.cluster("prod").request_timeout == 10
    assert s.slack.bot_token == "xoxb-1" and s.slack.allowed_channels == ("C1", "C2")
    assert s.lease_seconds == 30 and s.redact_patterns == (r"xox[bp]-\S+",)


def test_by_default_both_front_ends_may_approve_and_safety_switches_are_off() -> None:
    s = settings_from_mapping({"policy": None}, {"HOME": "/home/sre"})
    assert s.policy.approvals_from == ("terminal", "slack", "api")
    assert s.policy.allow_self_approval is False and s.policy.allow_impersonation is False
    assert s.database_url == "sqlite:////home/sre/.local/state/runbook-bot/state.db"


def test_a_secret_of_the_wrong_type_is_named_but_never_echoed() -> None:
    assert problems({"audit_key": 8231749, "slack": {"signing_secret": ["hunter2"]}}) == [
        "bot.yaml: audit_key: must be a string", "bot.yaml: slack.signing_secret: must be a string"]


def test_listen_gives_each_audience_a_port_of_its_own_and_refuses_sharing_one():
    from bot.config import ListenConfig

    assert settings_from_mapping({}, {}).listen == ListenConfig(
        host="0.0.0.0", slack_port=3000, ops_port=9464, alerts_port=9095, api_port=8080)
    with pytest.raises(ConfigError, match="listen: alerts_port and api_port are both 9095"):
        settings_from_mapping({"listen": {"api_port": 9095}}, {})
    s = settings_from_mapping({"listen": {"ops_port": 9100, "host": "127.0.0.1"}}, {})
    assert (s.listen.host, s.listen.slack_port, s.listen.ops_port) == ("127.0.0.1", 3000, 9100)
    with pytest.raises(ConfigError, match="listen: slack_port and ops_port are both 3000"):
        settings_from_mapping({"listen": {"ops_port": 3000}}, {})
    with pytest.raises(ConfigError, match=r"listen.alerts_port: must be at most 65535"):
        settings_from_mapping({"listen": {"alerts_port": 70000}}, {})
