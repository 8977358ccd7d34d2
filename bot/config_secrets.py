"""Secrets from files: ``NAME_FILE`` names a file holding what ``NAME`` would hold.

Kubernetes Secrets mounted as files, the AWS Secrets and Configuration Provider's CSI driver and
the External Secrets Operator all hand a pod its secrets as files, which keeps them out of the
process environment (``/proc/PID/environ``, child processes, crash reports). For each variable of
``SECRET_VARIABLES``, ``NAME_FILE=/path`` reads the file instead (the whitespace around it dropped:
the trailing newline ``echo`` and ``kubectl create secret --from-file`` leave, an editor's blank
lines and spaces); a file of nothing but whitespace is empty. Setting both ``NAME`` and
``NAME_FILE`` is an error naming both, never a silent choice; a file that cannot be read, is empty
or is larger than ``MAX_BYTES`` is an error naming the variable and the path. No message ever
carries a secret's value.

This is a small layer over the environment mapping rather than pydantic-settings: the config's
variables are not named after its keys (``SLACK_BOT_TOKEN`` fills ``slack.bot_token``) and the
file is merged with the environment by hand (``bot.config._parse``), which pydantic-settings'
sources would replace wholesale; its ``secrets_dir`` reads files named after fields, not
``*_FILE`` variables.

``scrub_environment`` then takes the secrets out of a long-running process's environment once
its settings hold them, so that no library falls back to them behind the config (Bolt reads
``SLACK_BOT_TOKEN`` when it is given a client, and warns that the client wins) and no child
process (a kubeconfig's exec plugin) inherits them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from bot.errors import ConfigError

# every variable the config reads that holds a secret (docs/deploy.md, "Configuration")
SECRET_VARIABLES = (
    "RUNBOOK_BOT_DATABASE_URL",  # carries the database password
    "RUNBOOK_BOT_AUDIT_KEY",
    "RUNBOOK_BOT_AUDIT_PREVIOUS_KEYS",
    "SLACK_BOT_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_APP_TOKEN",
    "RUNBOOK_BOT_ALERTS_TOKEN",
    "RUNBOOK_BOT_PAGERDUTY_WEBHOOK_SECRET",
    "RUNBOOK_BOT_PAGERDUTY_TOKEN",
)
SUFFIX = "_FILE"
MAX_BYTES = 64 * 1024  # a token, a key or a URL; anything larger is the wrong file


def _read(variable: str, path: str) -> str:
    where = f"{variable}{SUFFIX} names {path}"
    try:
        with Path(path).open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"{where}, which cannot be read: {e.strerror or type(e).__name__}") from None
    if len(data) > MAX_BYTES:
        raise ConfigError(f"{where}, which is larger than {MAX_BYTES} bytes: not a secret file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{where}, which is not UTF-8 text") from None
    text = text.strip()  # a newline (echo, an editor) or spaces are never part of a secret
    if not text:
        raise ConfigError(f"{where}, which is empty")
    return text


def with_secret_files(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with each ``NAME_FILE`` of a secret variable read into ``NAME``; ConfigError when
    both are set or a file cannot be used (every such problem, one line each)."""
    out = dict(env)
    problems = []
    for name in SECRET_VARIABLES:
        path = env.get(name + SUFFIX)
        if not path:
            continue
        if name in env:
            problems.append(f"both {name} and {name}{SUFFIX} are set: set one of them")
            continue
        try:
            out[name] = _read(name, path)
        except ConfigError as e:
            problems.append(str(e))
    if problems:
        raise ConfigError("\n".join(problems))
    return out


def scrub_environment(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Remove the secret variables (and their ``_FILE`` twins) from the process environment
    (``environ``: ``os.environ`` unless given); the names removed. Call once the settings are
    loaded, in a process that will not load them again."""
    environ = os.environ if environ is None else environ
    removed = []
    for name in SECRET_VARIABLES:
        for variable in (name, name + SUFFIX):
            if variable in environ:
                del environ[variable]
                removed.append(variable)
    return removed
