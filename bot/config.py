"""Settings: one frozen object, read from a YAML file and the environment, passed down explicitly.

This is the only module that reads ``os.environ``. Nothing reads settings at import time; each
command of the command line (``bot/cli/``) calls ``load_settings()`` once and hands the result (or
parts of it) to what it builds.

File: ``$RUNBOOK_BOT_CONFIG``, else ``./runbook-bot.yaml`` if present, else built-in defaults.
Environment variables override the file:

    RUNBOOK_BOT_CONFIG          path of the YAML config file
    RUNBOOK_BOT_DATABASE_URL    SQLAlchemy URL of the state store (default: SQLite, see below)
    RUNBOOK_BOT_AUDIT_KEY       when set, audit hashes are HMAC-SHA256 with this key
    RUNBOOK_BOT_RUNBOOKS_DIR    where runbooks are loaded from (default: ./runbooks)
    SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET, SLACK_APP_TOKEN, RUNBOOK_BOT_SLACK_API_URL,
    RUNBOOK_BOT_SLACK_CHANNELS (comma-separated channel ids)

Default database: ``$XDG_STATE_HOME/runbook-bot/state.db`` (``~/.local/state/runbook-bot/state.db``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.errors import ConfigError


@dataclass(frozen=True)
class ClusterConfig:
    """How to reach one cluster: its kubeconfig/context and its AWS account and region."""

    name: str
    kubeconfig: str | None = None  # None: $KUBECONFIG / ~/.kube/config, or in-cluster
    context: str | None = None
    region: str = "us-east-1"
    profile: str | None = None
    role_arn: str | None = None
    retry_mode: str = "standard"
    max_attempts: int = 5
    request_timeout: float = 30.0


@dataclass(frozen=True)
class SlackConfig:
    bot_token: str | None = None
    signing_secret: str | None = None
    app_token: str | None = None
    api_url: str | None = None  # e.g. http://127.0.0.1:8900/api/ (trailing slash matters)
    allowed_channels: tuple[str, ...] = ()
    usergroup_ttl: float = 300.0


@dataclass(frozen=True)
class PolicyConfig:
    """Approval and interlock policy that no runbook can loosen."""

    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # group -> identities
    allow_self_approval: bool = False
    allow_impersonation: bool = False  # honour --as USER (demo and tests only)
    default_expires_after: float = 1800.0
    max_out_of_service_nodes: int = 3
    # identity aliases: a terminal user and a Slack user can be the same person
    aliases: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Settings:
    database_url: str
    audit_key: str | None = None
    runbooks_dir: str = "runbooks"
    redact_patterns: tuple[str, ...] = ()
    clusters: Mapping[str, ClusterConfig] = field(default_factory=dict)
    policy: PolicyConfig = PolicyConfig()
    slack: SlackConfig = SlackConfig()
    lease_seconds: float = 60.0

    def cluster(self, name: str | None) -> ClusterConfig:
        if not self.clusters:
            return ClusterConfig(name=name or "default")
        if name is None:
            if len(self.clusters) == 1:
                return next(iter(self.clusters.values()))
            raise ConfigError(
                "several clusters are configured; pass the 'cluster' param, one of: "
                + ", ".join(sorted(self.clusters))
            )
        try:
            return self.clusters[name]
        except KeyError:
            raise ConfigError(
                f"unknown cluster {name!r}; configured: {', '.join(sorted(self.clusters))}"
            ) from None


def default_database_url(env: Mapping[str, str]) -> str:
    base = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME", ".")) / ".local" / "state")
    return f"sqlite:///{Path(base) / 'runbook-bot' / 'state.db'}"


def _read_file(path: Path) -> dict[str, Any]:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        data = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from e
    except YAMLError as e:
        raise ConfigError(f"config file {path} is not valid YAML: {e}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must be a mapping at the top level")
    return data


def _tuple_of_str(raw: Any, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if isinstance(raw, str) or not isinstance(raw, list | tuple):
        raise ConfigError(f"{where} must be a list of strings")
    return tuple(str(x) for x in raw)


def _seconds(raw: Any, where: str, default: float) -> float:
    """A positive number of seconds from the config file, or a ConfigError naming the key."""
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise ConfigError(f"{where} must be a number of seconds, like {default:g} (got {raw!r})")
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{where} must be a number of seconds, like {default:g} "
                          f"(got {raw!r})") from None
    if not value > 0:
        raise ConfigError(f"{where} must be more than 0 seconds (got {raw!r})")
    return value


SLACK_KEYS = ("bot_token", "signing_secret", "app_token", "api_url", "allowed_channels",
              "usergroup_ttl")


def settings_from_mapping(data: Mapping[str, Any], env: Mapping[str, str]) -> Settings:
    """Build Settings from a parsed config file plus environment overrides."""
    known = {"database_url", "audit_key", "runbooks_dir", "redact_patterns", "clusters",
             "policy", "slack", "lease_seconds"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"unknown config keys {unknown}; valid keys: {sorted(known)}")
    clusters: dict[str, ClusterConfig] = {}
    for name, raw in (data.get("clusters") or {}).items():
        if not isinstance(raw, dict):
            raise ConfigError(f"clusters.{name} must be a mapping")
        if isinstance(raw.get("kubeconfig"), str):
            raw = {**raw, "kubeconfig": os.path.expanduser(raw["kubeconfig"])}
        try:
            clusters[name] = ClusterConfig(name=name, **raw)
        except TypeError as e:
            raise ConfigError(f"clusters.{name}: {e}") from e
    p = data.get("policy") or {}
    try:
        policy = PolicyConfig(
            groups={g: _tuple_of_str(m, f"policy.groups.{g}")
                    for g, m in (p.get("groups") or {}).items()},
            allow_self_approval=bool(p.get("allow_self_approval", False)),
            allow_impersonation=bool(p.get("allow_impersonation", False)),
            default_expires_after=float(p.get("default_expires_after", 1800.0)),
            max_out_of_service_nodes=int(p.get("max_out_of_service_nodes", 3)),
            aliases=dict(p.get("aliases") or {}),
        )
    except (TypeError, ValueError) as e:
        raise ConfigError(f"policy: {e}") from e
    s = data.get("slack") or {}
    if not isinstance(s, dict):
        raise ConfigError("slack must be a mapping (see deploy/runbook-bot.example.yaml)")
    unknown_slack = sorted(set(s) - set(SLACK_KEYS))
    if unknown_slack:
        raise ConfigError(f"unknown keys under slack: {unknown_slack}; valid keys: {list(SLACK_KEYS)}")
    channels = env.get("RUNBOOK_BOT_SLACK_CHANNELS")
    slack = SlackConfig(
        bot_token=env.get("SLACK_BOT_TOKEN") or s.get("bot_token"),
        signing_secret=env.get("SLACK_SIGNING_SECRET") or s.get("signing_secret"),
        app_token=env.get("SLACK_APP_TOKEN") or s.get("app_token"),
        api_url=env.get("RUNBOOK_BOT_SLACK_API_URL") or s.get("api_url"),
        allowed_channels=tuple(c.strip() for c in channels.split(",") if c.strip())
        if channels else _tuple_of_str(s.get("allowed_channels"), "slack.allowed_channels"),
        usergroup_ttl=_seconds(s.get("usergroup_ttl"), "slack.usergroup_ttl", 300.0),
    )
    return Settings(
        database_url=env.get("RUNBOOK_BOT_DATABASE_URL")
        or data.get("database_url")
        or default_database_url(env),
        audit_key=env.get("RUNBOOK_BOT_AUDIT_KEY") or data.get("audit_key"),
        runbooks_dir=env.get("RUNBOOK_BOT_RUNBOOKS_DIR") or data.get("runbooks_dir") or "runbooks",
        redact_patterns=_tuple_of_str(data.get("redact_patterns"), "redact_patterns"),
        clusters=clusters,
        policy=policy,
        slack=slack,
        lease_seconds=_seconds(data.get("lease_seconds"), "lease_seconds", 60.0),
    )


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Read the config file (if any) and the environment."""
    env = os.environ if env is None else env
    path_text = env.get("RUNBOOK_BOT_CONFIG")
    if path_text:
        path = Path(path_text)
        if not path.exists():
            raise ConfigError(f"RUNBOOK_BOT_CONFIG points at {path}, which does not exist")
        data = _read_file(path)
    elif Path("runbook-bot.yaml").exists():
        data = _read_file(Path("runbook-bot.yaml"))
    else:
        data = {}
    return settings_from_mapping(data, env)
