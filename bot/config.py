"""Settings: one frozen object, read from a YAML file and the environment, passed down explicitly.

This is the only module that reads ``os.environ``. Nothing reads settings at import time; each
command of the command line (``bot/cli/``) calls ``load_settings()`` once and hands the result (or
parts of it) to what it builds.

The file, the first found of (``find_config`` says which and why; ``runbook-bot config path``):

    1. ``--config FILE`` on the command line (``use_config``)
    2. ``$RUNBOOK_BOT_CONFIG``
    3. ``./runbook-bot.yaml``
    4. ``$XDG_CONFIG_HOME/runbook-bot/config.yaml`` (``~/.config/runbook-bot/config.yaml``)

and built-in defaults when there is none. A file named by 1 or 2 must exist. Its keys
(deploy/runbook-bot.example.yaml shows each one):

    database_url, audit_key, redact_patterns (Python regular expressions)
    audit_previous_keys: audit keys rotated out, which verify what they wrote (docs/security.md,
        "Rotate the audit key")
    lease_seconds (> 0; default 6: a run lease's length, renewed by a heartbeat while held)
    runbooks_dir: a directory or a list of them, each adding to the shipped runbooks (a later
        one's runbook replaces an earlier one of the same name); relative to the config file
    clusters.NAME: kubeconfig, context, region, profile, role_arn, retry_mode
        (legacy|standard|adaptive), max_attempts (1-20), request_timeout (seconds > 0),
        eks_cluster (the EKS cluster's name as its instances are tagged; default NAME),
        auth (kubeconfig, the default, or eks: EKS tokens of the cluster's identity, at server
        with the CA bundle file certificate_authority; docs/deploy.md, "Several clusters")
    policy: groups (group -> identities), aliases (identity -> identity),
        allow_self_approval, allow_impersonation (true|false, unquoted),
        default_expires_after (seconds > 0), max_out_of_service_nodes (>= 1),
        node_monitor_grace_period (seconds, 10-600; default 50: the cluster's, after which a node
        whose Lease is not renewed counts as silent), fence_min_not_ready (seconds, 30-86400;
        default 60: how long a dead node's Lease must have been stale before its instance may be
        fenced), fence_ambiguous_after (seconds, 60-86400; default 300: how long a silent node
        whose EC2 status checks still pass must wait before break-glass may fence it),
        hold_recheck_seconds (5-300; default 15: how often a step an interlock holds for a
        timed condition is planned again by itself),
        approvals_from (a non-empty list of terminal, slack, api; default all three),
        start (runbook or "*" -> groups, channels: who may start it, from which Slack channels;
        absent: anyone may start any runbook, as before; docs/slack.md, "Who may start a run")
    slack: bot_token, signing_secret, app_token, api_url, allowed_channels, usergroup_ttl
    alerts: bearer_tokens, basic_auth (username -> password; secrets of 16 characters or more),
        cluster_label (default cluster), channel (the Slack channel of suggestion cards),
        auto_run_limit (>= 0; default 10) auto-runs of one runbook per auto_run_window (seconds
        > 0; default 600), counted in the store, so shared by every replica
    listen: host (default 0.0.0.0), slack_port (3000: /slack/events), ops_port (9464: /healthz,
        /readyz, /metrics), alerts_port (9095: /alertmanager), api_port (8080: /api/v1/),
        mcp_port (8090: /mcp, the MCP server for agents); each
        1-65535, no two the same
        (docs/deploy.md, "Ports": who may reach each)
    api: tokens, oidc, kubernetes: how callers of the API authenticate (bot/config_api.py)
    agents: identities, read_only_runbooks, runbooks, rate_limit, rate_burst, max_active_runs:
        which callers are AI agents and what they may request (bot/config_agents.py)
    watcher: enabled, detect_after, clusters, watch_timeout, interval: the node watcher
        (bot/config_watcher.py, docs/watcher.md)
    server: url, ca_bundle, token, kubeconfig, context, timeout: the terminal as the API's client
        (bot/config_server.py); local_mode_override: local writes to a served database

The file is validated as a whole with pydantic, strictly: a quoted "false" is not a boolean and a
quoted "3" is not a number. Every bad value becomes one line of the ``ConfigError``, naming the key
and what is allowed, so a typo never silently switches a safety setting on.

Environment variables override the file:

    RUNBOOK_BOT_CONFIG          path of the YAML config file
    RUNBOOK_BOT_DATABASE_URL    SQLAlchemy URL of the state store (default: SQLite, see below)
    RUNBOOK_BOT_AUDIT_KEY       when set, audit hashes are HMAC-SHA256 with this key
    RUNBOOK_BOT_AUDIT_PREVIOUS_KEYS  the audit keys rotated out, comma-separated (replaces the
                                file's audit_previous_keys): they verify, and sign nothing but the
                                key rotation of a run still open
    RUNBOOK_BOT_RUNBOOKS_DIR    runbook directories on top of the shipped ones, separated by
                                ``os.pathsep`` (``:``); replaces the file's runbooks_dir
    SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET, SLACK_APP_TOKEN, RUNBOOK_BOT_SLACK_API_URL,
    RUNBOOK_BOT_SLACK_CHANNELS (comma-separated channel ids)
    RUNBOOK_BOT_ALERTS_TOKEN    the Alertmanager webhook's bearer token (replaces the file's)
    RUNBOOK_BOT_ALERTS_CHANNEL  the Slack channel of alert suggestion cards
    RUNBOOK_BOT_LOG_FORMAT      text (default) or json: what --log-format is when not given
    RUNBOOK_BOT_LOG_LEVEL       debug, info, warning or error: what --log-level is when not given
    RUNBOOK_BOT_SERVER          the bot's API URL (replaces server.url; --server replaces both)

Each secret among them (the database URL, the audit keys, the Slack tokens and signing secret, the
alerts token) may come from a file instead: ``NAME_FILE=/path`` (``bot.config_secrets``).

Default database: ``$XDG_STATE_HOME/runbook-bot/state.db`` (``~/.local/state/runbook-bot/state.db``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from bot.config_agents import AGENTS_SECTIONS, AgentsConfig, AgentsModel, agents_config
from bot.config_api import API_SECTIONS, ApiConfig, ApiModel, api_config
from bot.config_api import KubernetesAuthConfig as KubernetesAuthConfig
from bot.config_api import OidcConfig as OidcConfig
from bot.config_listeners import ALERTS_PORT as ALERTS_PORT
from bot.config_listeners import API_PORT as API_PORT
from bot.config_listeners import MCP_PORT as MCP_PORT
from bot.config_listeners import OPS_PORT as OPS_PORT
from bot.config_listeners import SLACK_PORT as SLACK_PORT
from bot.config_listeners import AlertsConfig as AlertsConfig
from bot.config_listeners import AlertsModel as _Alerts
from bot.config_listeners import ListenConfig as ListenConfig
from bot.config_listeners import ListenModel as _Listen
from bot.config_listeners import SlackConfig as SlackConfig
from bot.config_listeners import SlackModel as _Slack
from bot.config_pagerduty import PagerDutyConfig as PagerDutyConfig
from bot.config_pagerduty import PagerDutyModel, pagerduty_config, pagerduty_section
from bot.config_secrets import with_secret_files
from bot.config_server import ServerConfig as ServerConfig
from bot.config_server import ServerModel, server_config
from bot.config_server import server_at as server_at
from bot.config_start import StartModel, start_rules, undefined_groups
from bot.config_start import StartRule as StartRule
from bot.config_watcher import WatcherConfig as WatcherConfig
from bot.config_watcher import WatcherModel, watcher_config
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
    # the EKS cluster's own name, as its instances are tagged; None: the same as ``name``
    eks_cluster: str | None = None
    auth: str = "kubeconfig"  # or "eks": tokens from STS (bot.clients.cluster), no kubeconfig
    server: str | None = None  # the API server's URL (auth: eks)
    certificate_authority: str | None = None  # the file of its CA bundle (auth: eks)

    @property
    def eks_name(self) -> str:
        return self.eks_cluster or self.name


@dataclass(frozen=True)
class PolicyConfig:
    """Approval and interlock policy that no runbook can loosen."""

    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # group -> identities
    allow_self_approval: bool = False
    allow_impersonation: bool = False  # honour --as USER (demo and tests only)
    default_expires_after: float = 1800.0
    max_out_of_service_nodes: int = 3
    # the cluster's node-monitor-grace-period: a Lease older than this is a silent kubelet
    node_monitor_grace_period: float = 50.0
    # a dead node's Lease must have been stale this long (seconds) before its instance is fenced
    fence_min_not_ready: float = 60.0
    # a silent node EC2 still passes (a partition?) waits this long before break-glass may fence
    fence_ambiguous_after: float = 300.0
    # a step held by a timed interlock (fence-wait) is planned again this often, never sooner
    hold_recheck_seconds: float = 15.0
    # identity aliases: a terminal user and a Slack user can be the same person
    aliases: Mapping[str, str] = field(default_factory=dict)
    # where approvals and break-glass are accepted from: "terminal" (OS users), "slack" (slack:U…)
    approvals_from: tuple[str, ...] = ("terminal", "slack", "api")
    # runbook (or "*") -> who may start it; None (no ``start:``): anyone may start any runbook
    start: Mapping[str, StartRule] | None = None


@dataclass(frozen=True)
class Settings:
    # secrets (the URL carries the database password) stay out of the settings' printed form
    database_url: str = field(repr=False)
    audit_key: str | None = field(default=None, repr=False)
    # rotated out: they verify what they wrote
    audit_previous_keys: tuple[str, ...] = field(default=(), repr=False)
    runbooks_dir: tuple[str, ...] = ()  # on top of the shipped runbooks, lowest first
    redact_patterns: tuple[str, ...] = ()
    clusters: Mapping[str, ClusterConfig] = field(default_factory=dict)
    policy: PolicyConfig = PolicyConfig()
    slack: SlackConfig = field(default_factory=SlackConfig)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    listen: ListenConfig = field(default_factory=ListenConfig)
    api: ApiConfig = field(default_factory=ApiConfig)  # who may call the API (frontends/api/auth.py)
    agents: AgentsConfig = field(default_factory=AgentsConfig)  # AI agents (config_agents.py)
    watcher: WatcherConfig = field(default_factory=WatcherConfig)  # the node watcher (config_watcher.py)
    pagerduty: PagerDutyConfig = field(default_factory=PagerDutyConfig)  # config_pagerduty.py
    lease_seconds: float = 6.0
    config_file: str | None = None  # the file these settings were read from, if any
    server: ServerConfig | None = None  # the terminal is the API's client (bot/cli/remote.py)
    # a local-mode write to a database a server recorded itself in (bot/store/servers.py)
    local_mode_override: bool = False

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


# -- the file's schema: every key typed, so a quoted "false" is an error, never True --------------

Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Text = Annotated[str, Field(min_length=1)]
BACKENDS = ("sqlite", "postgresql")
SECRETS = frozenset({"audit_key", "audit_previous_keys", "bot_token", "signing_secret", "app_token",
                     "bearer_tokens", "basic_auth", "tokens",
                     "webhook_secrets", "api_token"})  # never echoed
Frontend = Literal["terminal", "slack", "api"]
FRONTENDS: tuple[Frontend, ...] = ("terminal", "slack", "api")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _Cluster(_Strict):
    kubeconfig: Text | None = None
    context: Text | None = None
    region: Text = "us-east-1"
    profile: Text | None = None
    role_arn: Text | None = None
    retry_mode: Literal["legacy", "standard", "adaptive"] = "standard"
    max_attempts: Annotated[int, Field(ge=1, le=20)] = 5
    request_timeout: Seconds = 30.0
    eks_cluster: Text | None = None
    auth: Literal["kubeconfig", "eks"] = "kubeconfig"
    server: Text | None = None
    certificate_authority: Text | None = None

    @model_validator(mode="after")
    def _eks(self) -> _Cluster:
        if (self.auth == "eks") != bool(self.server and self.certificate_authority):
            raise ValueError("auth: eks needs server and certificate_authority, and they go with it")
        if self.auth == "eks" and (self.kubeconfig or self.context):
            raise ValueError("auth: eks reaches the cluster without a kubeconfig or context")
        return self


class _Policy(_Strict):
    groups: dict[Text, list[Text]] = {}
    allow_self_approval: bool = False
    allow_impersonation: bool = False
    default_expires_after: Seconds = 1800.0
    max_out_of_service_nodes: Annotated[int, Field(ge=1)] = 3
    # Kubernetes 1.32 made node-monitor-grace-period 50 s (it was 40 s)
    node_monitor_grace_period: Annotated[float, Field(ge=10, le=600, allow_inf_nan=False)] = 50.0
    # counted from the Lease's last renewal: below 30 s a kubelet that missed three renewals
    # (every 10 s) could be fenced
    fence_min_not_ready: Annotated[float, Field(ge=30, le=86400, allow_inf_nan=False)] = 60.0
    fence_ambiguous_after: Annotated[float, Field(ge=60, le=86400, allow_inf_nan=False)] = 300.0
    hold_recheck_seconds: Annotated[float, Field(ge=5, le=300, allow_inf_nan=False)] = 15.0
    aliases: dict[Text, Text] = {}
    approvals_from: Annotated[list[Frontend], Field(min_length=1)] = list(FRONTENDS)
    start: dict[Text, StartModel] | None = None  # bot/config_start.py

    @model_validator(mode="after")
    def _known_groups(self) -> _Policy:
        undefined_groups(self.start, self.groups)
        return self


class _File(_Strict):
    database_url: Text | None = None
    audit_key: Text | None = None
    audit_previous_keys: list[Text] = []
    runbooks_dir: Text | list[Text] = []
    redact_patterns: list[str] = []
    clusters: dict[Text, _Cluster] = {}
    policy: _Policy = _Policy()
    slack: _Slack = _Slack()
    alerts: _Alerts = _Alerts()
    listen: _Listen = _Listen()
    api: ApiModel = ApiModel()
    agents: AgentsModel = AgentsModel()
    watcher: WatcherModel = WatcherModel()
    pagerduty: PagerDutyModel = PagerDutyModel()
    lease_seconds: Seconds = 6.0
    server: ServerModel | None = None
    local_mode_override: bool = False

    @field_validator("redact_patterns")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for i, pattern in enumerate(patterns):
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"pattern {i} ({pattern!r}) is not a Python regular "
                                 f"expression: {e}") from None
        return patterns

    @field_validator("database_url")
    @classmethod
    def _parses(cls, url: str | None) -> str | None:
        if url is None:
            return None
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            backend = make_url(url).get_backend_name()
        except ArgumentError:
            raise ValueError("not a database URL; expected e.g. sqlite:////var/lib/runbook-bot/"
                             "state.db or postgresql+psycopg://bot@db/runbookbot") from None
        if backend not in BACKENDS:
            raise ValueError(f"the database must be one of: {', '.join(BACKENDS)} "
                             f"(got {backend!r})")
        return url


_SECTIONS: dict[str, type[BaseModel]] = {"": _File, "policy": _Policy, "slack": _Slack,
                                        "clusters": _Cluster, "alerts": _Alerts,
                                        "policy.start": StartModel,
                                        "listen": _Listen, "server": ServerModel, "watcher": WatcherModel,
                                        "pagerduty": PagerDutyModel,
                                        **API_SECTIONS, **AGENTS_SECTIONS}
_EXPECTED = {
    "bool_type": "must be true or false",
    "int_type": "must be a whole number",
    "float_type": "must be a number of seconds",  # every float in the file is a duration
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "finite_number": "must be a finite number",
    "too_short": "must not be empty",
}


def _key(loc: tuple[str | int, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else ("." if i else "") + str(p)
                   for i, p in enumerate(loc))


def _line(err: Any) -> str:
    """One pydantic error as 'key: what is allowed (got what)'."""
    loc = tuple(err["loc"])
    kind, got, ctx = err["type"], err.get("input"), err.get("ctx") or {}
    if kind == "extra_forbidden":
        parent = "clusters" if loc[:1] == ("clusters",) and len(loc) == 3 else \
            "policy.start" if loc[:2] == ("policy", "start") and len(loc) == 4 else \
            ".".join(map(str, loc[:2])) if loc[:1] == ("api",) and len(loc) == 3 else \
            str(loc[0]) if len(loc) == 2 else ""
        valid = ", ".join(_SECTIONS[parent].model_fields) if parent in _SECTIONS else ""
        return f"{_key(loc)}: unknown key" + (f"; valid keys here: {valid}" if valid else "")
    if kind == "value_error":
        return f"{_key(loc)}: {str(err['msg']).removeprefix('Value error, ')}"
    if kind in ("greater_than", "greater_than_equal", "less_than_equal"):
        word = {"greater_than": "more than", "greater_than_equal": "at least",
                "less_than_equal": "at most"}[kind]
        what = f"must be {word} {next(iter(ctx.values())):g}"
    elif kind == "literal_error":
        what = f"must be one of {ctx.get('expected')}"
    else:
        what = _EXPECTED.get(kind, str(err["msg"]).lower())
    hint = ""
    if kind == "bool_type" and isinstance(got, str):
        hint = "; write true or false without quotes"
    elif kind in ("int_type", "float_type") and isinstance(got, str):
        hint = "; write the number without quotes"
    secret = bool(set(map(str, loc)) & SECRETS)
    shown = ("" if secret or kind == "model_type" or isinstance(got, dict | list)
             else f" (got {got!r})")
    return f"{_key(loc)}: {what}{shown}{hint}"


def _parse(data: Mapping[str, Any], env: Mapping[str, str], *, source: str) -> _File:
    """The file's values with the environment's on top, validated as a whole."""
    merged: dict[str, Any] = dict(data)
    for key, var in (("database_url", "RUNBOOK_BOT_DATABASE_URL"),
                     ("audit_key", "RUNBOOK_BOT_AUDIT_KEY")):
        if env.get(var):
            merged[key] = env[var]
    if env.get("RUNBOOK_BOT_AUDIT_PREVIOUS_KEYS"):
        merged["audit_previous_keys"] = [k.strip() for k in
                                         env["RUNBOOK_BOT_AUDIT_PREVIOUS_KEYS"].split(",") if k.strip()]
    slack = {} if data.get("slack") is None else data["slack"]
    if isinstance(slack, Mapping):
        slack = dict(slack)
        for key, var in (("bot_token", "SLACK_BOT_TOKEN"),
                         ("signing_secret", "SLACK_SIGNING_SECRET"),
                         ("app_token", "SLACK_APP_TOKEN"), ("api_url", "RUNBOOK_BOT_SLACK_API_URL")):
            if env.get(var):
                slack[key] = env[var]
        if env.get("RUNBOOK_BOT_SLACK_CHANNELS"):
            slack["allowed_channels"] = [c.strip() for c in env["RUNBOOK_BOT_SLACK_CHANNELS"]
                                         .split(",") if c.strip()]
        merged["slack"] = slack
    alerts = {} if data.get("alerts") is None else data["alerts"]
    if isinstance(alerts, Mapping):
        alerts = dict(alerts)
        if env.get("RUNBOOK_BOT_ALERTS_TOKEN"):
            alerts["bearer_tokens"] = [env["RUNBOOK_BOT_ALERTS_TOKEN"]]
        if env.get("RUNBOOK_BOT_ALERTS_CHANNEL"):
            alerts["channel"] = env["RUNBOOK_BOT_ALERTS_CHANNEL"]
        merged["alerts"] = alerts
    if data.get("pagerduty") is not None or any(k.startswith("RUNBOOK_BOT_PAGERDUTY_") for k in env):
        merged["pagerduty"] = pagerduty_section(data.get("pagerduty"), env)
    if env.get("RUNBOOK_BOT_SERVER"):
        server = data.get("server")
        merged["server"] = {**(server if isinstance(server, Mapping) else {}),
                            "url": env["RUNBOOK_BOT_SERVER"]}
    for key in [k for k in ("policy", "slack", "alerts", "listen", "server", "api")
                if merged.get(k) is None and k in merged]:
        del merged[key]  # an empty section (`policy:` alone) means the defaults
    try:
        return _File.model_validate(merged)
    except ValidationError as e:
        where = f"{source}: " if source else ""
        raise ConfigError("\n".join(where + _line(err) for err in e.errors())) from None


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
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{where}: the config file is not valid YAML: {problem}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must be a mapping at the top level")
    return data


def _runbook_dirs(listed: str | list[str], env: Mapping[str, str], base: Path | None) -> tuple[str, ...]:
    """The runbook directories: the environment's (as given) or the file's (relative to it)."""
    if env.get("RUNBOOK_BOT_RUNBOOKS_DIR"):
        return tuple(d for d in env["RUNBOOK_BOT_RUNBOOKS_DIR"].split(os.pathsep) if d)
    dirs = [listed] if isinstance(listed, str) else listed
    out = []
    for d in dirs:
        path = Path(os.path.expanduser(d))
        out.append(str(path if path.is_absolute() or base is None else base / path))
    return tuple(out)


def settings_from_mapping(data: Mapping[str, Any], env: Mapping[str, str], *,
                          source: str = "", path: Path | None = None) -> Settings:
    """Build Settings from a parsed config file plus environment overrides.

    Every bad value is reported at once, one line each naming the key (prefixed with ``source``,
    the file, when given) and what would be valid. ``path`` is the file read, if any: relative
    runbook directories are relative to it. A secret may come from a file: ``NAME_FILE``
    (``bot.config_secrets``).
    """
    env = with_secret_files(env)
    f = _parse(data, env, source=source)
    clusters = {name: ClusterConfig(
        name=name, kubeconfig=os.path.expanduser(c.kubeconfig) if c.kubeconfig else None,
        context=c.context, region=c.region, profile=c.profile, role_arn=c.role_arn,
        retry_mode=c.retry_mode, max_attempts=c.max_attempts, request_timeout=c.request_timeout,
        eks_cluster=c.eks_cluster, auth=c.auth, server=c.server,
        certificate_authority=os.path.expanduser(c.certificate_authority) if c.certificate_authority
        else None) for name, c in f.clusters.items()}
    p = f.policy
    policy = PolicyConfig(
        groups={g: tuple(m) for g, m in p.groups.items()},
        allow_self_approval=p.allow_self_approval, allow_impersonation=p.allow_impersonation,
        default_expires_after=p.default_expires_after,
        max_out_of_service_nodes=p.max_out_of_service_nodes,
        node_monitor_grace_period=p.node_monitor_grace_period,
        fence_min_not_ready=p.fence_min_not_ready, fence_ambiguous_after=p.fence_ambiguous_after,
        hold_recheck_seconds=p.hold_recheck_seconds, aliases=dict(p.aliases),
        approvals_from=tuple(dict.fromkeys(p.approvals_from)),
        start=start_rules(p.start))
    s = f.slack
    slack = SlackConfig(bot_token=s.bot_token, signing_secret=s.signing_secret,
                        app_token=s.app_token, api_url=s.api_url,
                        allowed_channels=tuple(s.allowed_channels), usergroup_ttl=s.usergroup_ttl)
    a = f.alerts
    alerts = AlertsConfig(bearer_tokens=tuple(a.bearer_tokens), basic_auth=dict(a.basic_auth),
                          cluster_label=a.cluster_label, channel=a.channel,
                          auto_run_limit=a.auto_run_limit, auto_run_window=a.auto_run_window)
    n = f.listen
    listen = ListenConfig(host=n.host, slack_port=n.slack_port, ops_port=n.ops_port,
                          alerts_port=n.alerts_port, api_port=n.api_port, mcp_port=n.mcp_port)
    return Settings(
        database_url=f.database_url or default_database_url(env), audit_key=f.audit_key,
        audit_previous_keys=tuple(dict.fromkeys(f.audit_previous_keys)),
        alerts=alerts, listen=listen,
        runbooks_dir=_runbook_dirs(f.runbooks_dir, env, path.parent if path else None),
        redact_patterns=tuple(f.redact_patterns), clusters=clusters,
        policy=policy, slack=slack, lease_seconds=f.lease_seconds,
        config_file=str(path) if path else None, server=server_config(f.server, path), api=api_config(f.api),
        local_mode_override=f.local_mode_override, watcher=watcher_config(f.watcher),
        agents=agents_config(f.agents), pagerduty=pagerduty_config(f.pagerduty))


# ``--config FILE`` of the command line, for the command being run (``use_config``)
_EXPLICIT: ContextVar[str | None] = ContextVar("runbook_bot_config", default=None)
LOCAL_FILE = "runbook-bot.yaml"


@contextmanager
def use_config(path: str | None) -> Iterator[None]:
    """Within this block, ``load_settings`` reads ``path`` first (the ``--config`` option)."""
    token = _EXPLICIT.set(path)
    try:
        yield
    finally:
        _EXPLICIT.reset(token)


def config_search(env: Mapping[str, str]) -> list[tuple[str, Path | None]]:
    """The places looked for the config file, in order: (how it is named, the path or None)."""
    explicit, named = _EXPLICIT.get(), env.get("RUNBOOK_BOT_CONFIG")
    xdg = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return [("--config", Path(explicit) if explicit else None),
            ("RUNBOOK_BOT_CONFIG", Path(named) if named else None),
            ("the current directory", Path(LOCAL_FILE)),
            ("the XDG config directory", Path(xdg) / "runbook-bot" / "config.yaml")]


def find_config(env: Mapping[str, str] | None = None) -> tuple[Path | None, str]:
    """The config file to read and how it was found; (None, why) when there is none.

    A file named by ``--config`` or ``RUNBOOK_BOT_CONFIG`` must exist: a typo there is an error,
    never a silent fall-back to another file or to the defaults.
    """
    env = os.environ if env is None else env
    for how, path in config_search(env):
        if path is None:
            continue
        if how in ("--config", "RUNBOOK_BOT_CONFIG"):
            if not path.is_file():
                raise ConfigError(f"{how} names {path}, which does not exist or is not a file")
            return path, how
        if path.is_file():
            return path, f"found in {how}"
    return None, "no config file found; built-in defaults"


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Read the config file (if any, see ``find_config``) and the environment."""
    env = os.environ if env is None else env
    path, _how = find_config(env)
    if path is None:
        return settings_from_mapping({}, env)
    return settings_from_mapping(_read_file(path), env, source=str(path), path=path.absolute())


def environment_value(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """One environment variable named by the config (``server.token: env:VAR``), read here."""
    env = os.environ if env is None else env
    return env.get(name) or None


LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")


def log_defaults(env: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """The log format and level the environment asks for (None: not set), checked.

    Read apart from ``load_settings`` because logging is set up before the config file is read,
    so that a bad config file is itself reported through the configured log.
    """
    env = os.environ if env is None else env
    fmt = (env.get("RUNBOOK_BOT_LOG_FORMAT") or "").strip().lower() or None
    level = (env.get("RUNBOOK_BOT_LOG_LEVEL") or "").strip().lower() or None
    if fmt is not None and fmt not in LOG_FORMATS:
        raise ConfigError(f"RUNBOOK_BOT_LOG_FORMAT is {fmt!r}: expected one of {', '.join(LOG_FORMATS)}")
    if level is not None and level not in LOG_LEVELS:
        raise ConfigError(f"RUNBOOK_BOT_LOG_LEVEL is {level!r}: expected one of {', '.join(LOG_LEVELS)}")
    return fmt, level
