"""The example config in deploy/ loads, so a new user's first copy of it works."""

from __future__ import annotations

from pathlib import Path

import pytest
from ruamel.yaml import YAML

from bot.config import settings_from_mapping
from bot.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[1] / "deploy" / "runbook-bot.example.yaml"


def test_the_example_config_loads_with_its_clusters_and_groups():
    data = YAML(typ="safe").load(EXAMPLE.read_text())
    s = settings_from_mapping(data, {"HOME": "/home/sre"})
    cluster = s.cluster("prod-apse1")
    assert cluster.region == "ap-southeast-1" and cluster.context == "prod-apse1"
    assert not cluster.kubeconfig.startswith("~")
    assert "bob" in s.policy.groups["sre-oncall"]
    assert s.policy.aliases["slack:U0123ALICE"] == "alice"
    assert s.policy.max_out_of_service_nodes == 3


def test_a_slack_setting_that_is_not_seconds_is_named_with_what_would_be_valid():
    with pytest.raises(ConfigError) as e:
        settings_from_mapping({"slack": {"usergroup_ttl": "5m"}}, {})
    assert str(e.value) == ("slack.usergroup_ttl: must be a number of seconds (got '5m'); "
                            "write the number without quotes")
    with pytest.raises(ConfigError, match=r"^slack.channels: unknown key; valid keys here: "
                                          r"bot_token, .*allowed_channels"):
        settings_from_mapping({"slack": {"channels": ["C0OPS00001"]}}, {})
    assert settings_from_mapping({"slack": {"usergroup_ttl": 60}}, {}).slack.usergroup_ttl == 60


def test_the_auto_run_limit_defaults_to_10_in_10_minutes_and_a_bad_one_is_named():
    data = YAML(typ="safe").load(EXAMPLE.read_text())
    alerts = settings_from_mapping(data, {"HOME": "/home/sre"}).alerts
    assert (alerts.auto_run_limit, alerts.auto_run_window) == (10, 600)
    assert settings_from_mapping({}, {}).alerts.auto_run_limit == 10
    with pytest.raises(ConfigError) as e:
        settings_from_mapping({"alerts": {"auto_run_limit": -1, "auto_run_window": "10m"}}, {})
    assert str(e.value).splitlines() == [
        "alerts.auto_run_limit: must be at least 0 (got -1)",
        "alerts.auto_run_window: must be a number of seconds (got '10m'); write the number without "
        "quotes"]
