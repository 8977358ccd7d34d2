"""The config's ``server:`` section: the bot's API, when the terminal is its client.

A module apart from ``bot/config.py`` (which reads it into ``Settings.server``, applies
``RUNBOOK_BOT_SERVER`` and re-exports these names) only because that module is at the size budget.
With a server, the terminal's run and decision commands go through the API (``bot/cli/remote.py``)
and need no database URL and no cloud credentials:

    server:
      url: https://runbook-bot.example.com   # https; plain http only to this machine
      ca_bundle: /etc/ssl/our-ca.pem         # the CAs that verify it (default: the system's)
      token: kubeconfig                      # kubeconfig | env:VAR | file:PATH
      kubeconfig: ~/.kube/config             # for token kubeconfig (default: $KUBECONFIG...)
      context: prod                          # for token kubeconfig (default: the current one)
      timeout: 30                            # seconds to wait for an answer

There is no key to skip TLS verification (``insecure`` is an unknown key, so an error).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from bot.errors import ConfigError

LOOPBACK = ("localhost", "127.0.0.1", "::1")
TOKEN_SOURCE = r"^(kubeconfig|env:[A-Za-z_][A-Za-z0-9_]*|file:.+)$"


@dataclass(frozen=True)
class ServerConfig:
    """The bot's API (``server:``, ``RUNBOOK_BOT_SERVER``, ``--server``)."""

    url: str  # https://runbook-bot.example.com (http only to this machine: tests, a tunnel)
    ca_bundle: str | None = None  # PEM file of the CAs that verify the server; None: the system's
    token: str = "kubeconfig"  # kubeconfig (the context's bearer token) | env:VAR | file:PATH
    kubeconfig: str | None = None  # for token kubeconfig: None is $KUBECONFIG / ~/.kube/config
    context: str | None = None  # for token kubeconfig: None is the current context
    timeout: float = 30.0  # seconds to wait for an answer (a followed stream waits longer)


class ServerModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    url: Annotated[str, Field(min_length=1)]
    ca_bundle: Annotated[str, Field(min_length=1)] | None = None
    token: Annotated[str, Field(pattern=TOKEN_SOURCE)] = "kubeconfig"
    kubeconfig: Annotated[str, Field(min_length=1)] | None = None
    context: Annotated[str, Field(min_length=1)] | None = None
    timeout: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 30.0

    @field_validator("url")
    @classmethod
    def _https(cls, url: str) -> str:
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError(f"must be the bot's https:// address, e.g. https://runbook-bot."
                             f"example.com (got {url!r})")
        if parts.scheme == "http" and parts.hostname not in LOOPBACK:
            raise ValueError("must be https:// (plain http only to this machine, e.g. a "
                             "`kubectl port-forward`): tokens are sent to it")
        return url.rstrip("/")


def server_config(v: ServerModel | None, path: Path | None) -> ServerConfig | None:
    """The ``server:`` section read; relative files are relative to the config file."""
    if v is None:
        return None

    def file(name: str | None) -> str | None:
        if name is None:
            return None
        p = Path(os.path.expanduser(name))
        return str(p if p.is_absolute() or path is None else path.parent / p)

    token = "file:" + str(file(v.token[5:])) if v.token.startswith("file:") else v.token
    return ServerConfig(url=v.url, ca_bundle=file(v.ca_bundle), token=token,
                        kubeconfig=file(v.kubeconfig), context=v.context, timeout=v.timeout)


def server_at(url: str, base: ServerConfig | None = None) -> ServerConfig:
    """``--server URL``: the config's ``server:`` (token, CA bundle) at this URL, checked as the
    file's is."""
    try:
        checked = ServerModel.model_validate({"url": url}).url
    except ValidationError as e:
        raise ConfigError("--server: " + "; ".join(str(err["msg"]).removeprefix("Value error, ")
                                                   for err in e.errors())) from None
    return ServerConfig(url=checked) if base is None else replace(base, url=checked)
