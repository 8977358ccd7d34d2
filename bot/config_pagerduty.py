"""The config's ``pagerduty:`` section: PagerDuty as an alert source and where run outcomes go.

A module apart from ``bot/config.py`` (which reads it into ``Settings.pagerduty``) because that
module is at its size budget (docs/pagerduty.md):

    pagerduty:
      webhook_secrets: ["<the V3 webhook subscription's signing secret>"]
                                 # or RUNBOOK_BOT_PAGERDUTY_WEBHOOK_SECRET; two during a rotation
      api_token: "<a REST API key>"   # or RUNBOOK_BOT_PAGERDUTY_TOKEN: reads alerts, writes notes
      from_email: bot@example.com     # the PagerDuty user notes are posted as (the From header)
      api_url: https://api.pagerduty.com   # the REST API (another only for a test's fake)
      transcript_url: https://runbook-bot.example.com/api/v1/runs/{run_id}/transcript?format=html
      notes: true                     # post each linked run's outcome to its incident

``POST /pagerduty`` is served only with a webhook secret (without one no request can be checked),
and needs ``api_token`` to read an incident's alerts; notes need ``api_token`` and ``from_email``.
Secrets never appear in ``repr`` or in any message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

API_URL = "https://api.pagerduty.com"
ENV_SECRET = "RUNBOOK_BOT_PAGERDUTY_WEBHOOK_SECRET"
ENV_TOKEN = "RUNBOOK_BOT_PAGERDUTY_TOKEN"
ENV_FROM = "RUNBOOK_BOT_PAGERDUTY_FROM"

Secret = Annotated[str, Field(min_length=16, max_length=4096)]


@dataclass(frozen=True)
class PagerDutyConfig:
    webhook_secrets: tuple[str, ...] = field(default=(), repr=False)
    api_token: str | None = field(default=None, repr=False)
    from_email: str | None = None
    api_url: str = API_URL
    transcript_url: str | None = None  # "{run_id}" is replaced by the run's id
    notes: bool = True
    retry_backoff: float = 0.5  # seconds: urllib3's backoff factor between tries of one call

    @property
    def enabled(self) -> bool:
        """Whether ``POST /pagerduty`` is served: a secret to check signatures against."""
        return bool(self.webhook_secrets)

    @property
    def posts_notes(self) -> bool:
        return bool(self.notes and self.api_token and self.from_email)


class PagerDutyModel(BaseModel):
    """The section as the file writes it, strictly (unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    webhook_secrets: list[Secret] = []
    api_token: Annotated[str, Field(min_length=8, max_length=4096)] | None = None
    from_email: Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+$", max_length=254)] | None = None
    api_url: Annotated[str, Field(pattern=r"^https?://\S+$")] = API_URL
    transcript_url: Annotated[str, Field(pattern=r"^https?://\S+$")] | None = None
    notes: bool = True


def pagerduty_section(data: Any, env: Mapping[str, str]) -> Any:
    """The file's section with the environment's secrets over it (what ``_File`` validates)."""
    section = {} if data is None else data
    if not isinstance(section, Mapping):
        return section  # validation names it
    merged = dict(section)
    if env.get(ENV_SECRET):
        merged["webhook_secrets"] = [s.strip() for s in env[ENV_SECRET].split(",") if s.strip()]
    if env.get(ENV_TOKEN):
        merged["api_token"] = env[ENV_TOKEN]
    if env.get(ENV_FROM):
        merged["from_email"] = env[ENV_FROM]
    return merged


def pagerduty_config(model: PagerDutyModel) -> PagerDutyConfig:
    return PagerDutyConfig(webhook_secrets=tuple(model.webhook_secrets), api_token=model.api_token,
                           from_email=model.from_email, api_url=model.api_url.rstrip("/"),
                           transcript_url=model.transcript_url, notes=model.notes)
