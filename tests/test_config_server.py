"""The config's ``server:`` section (bot/config_server.py): strict, https, never unverified."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import ServerConfig, server_at, settings_from_mapping
from bot.errors import ConfigError


def test_the_section_and_the_environment() -> None:
    s = settings_from_mapping({"server": {"url": "https://rb.example.com/", "ca_bundle": "ca.pem",
                                          "token": "file:token", "context": "prod"}}, {},
                              path=Path("/etc/rb/config.yaml"))
    assert s.server == ServerConfig(url="https://rb.example.com", ca_bundle="/etc/rb/ca.pem",
                                    token="file:/etc/rb/token", context="prod")
    assert settings_from_mapping({}, {}).server is None
    env = settings_from_mapping({"server": {"url": "https://a.example", "token": "env:T"}},
                                {"RUNBOOK_BOT_SERVER": "https://b.example"})
    assert env.server == ServerConfig(url="https://b.example", token="env:T")
    assert server_at("http://127.0.0.1:8080", env.server).token == "env:T"
    assert not settings_from_mapping({}, {}).local_mode_override


@pytest.mark.parametrize(("server", "error"), [
    ({"url": "http://rb.example.com"}, "server.url: must be https://"),
    ({"url": "rb.example.com"}, "server.url: must be the bot's https:// address"),
    ({"url": "https://rb.example.com", "insecure": True}, "server.insecure: unknown key"),
    ({"url": "https://rb.example.com", "token": "password"}, "server.token"),
])
def test_what_is_refused(server: dict[str, object], error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        settings_from_mapping({"server": server}, {})
    with pytest.raises(ConfigError, match="--server: must be https://"):
        server_at("http://rb.example.com")
