"""PagerDuty's REST API, the two calls the bot makes: an incident's alerts, and a note on it.

The only importer of urllib3 for PagerDuty. Retries are urllib3's ``Retry`` (3 tries on
connection errors, 429 and 5xx, honouring ``Retry-After``, with exponential backoff), not a loop
of our own; what still fails is translated once into ``bot.errors``: 429/5xx and connection
failures are ``RetryableError``, any other 4xx ``PermanentError``. The API token is sent as
PagerDuty asks (``Authorization: Token token=...``) and never appears in a message or a log line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import urllib3
from urllib3.util.retry import Retry

from bot.errors import PermanentError, RetryableError

ACCEPT = "application/vnd.pagerduty+json;version=2"
SERVICE = "pagerduty"
TIMEOUT = urllib3.Timeout(connect=5.0, read=15.0)
MAX_ALERTS = 100  # alerts read from one incident (one page of the API's largest size)


def _retry(backoff: float) -> Retry:
    return Retry(total=3, connect=3, read=2, status=3, backoff_factor=backoff,
                 status_forcelist=(429, 500, 502, 503, 504),
                 allowed_methods=frozenset({"GET", "POST"}), respect_retry_after_header=True,
                 raise_on_status=False)


class PagerDutyClient:
    """``incident_alerts`` and ``add_note`` against ``base_url`` (https://api.pagerduty.com)."""

    def __init__(self, *, base_url: str, token: str, backoff: float = 0.5) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token
        self._http = urllib3.PoolManager(retries=_retry(backoff), timeout=TIMEOUT)

    def __repr__(self) -> str:
        return f"PagerDutyClient(base_url={self.base_url!r})"

    def _call(self, method: str, path: str, *, operation: str, body: Any = None,
              headers: Mapping[str, str] | None = None,
              fields: Mapping[str, str] | None = None) -> Any:
        sent = {"Authorization": f"Token token={self._token}", "Accept": ACCEPT,
                "User-Agent": "runbook-bot", **(headers or {})}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        try:
            r = self._http.request(method, self.base_url + path, body=data, headers=sent,
                                   fields=fields)
        except urllib3.exceptions.HTTPError as e:
            raise RetryableError(f"PagerDuty {operation}: {type(e).__name__}", service=SERVICE,
                                 operation=operation) from e
        if r.status >= 400:
            text = r.data[:300].decode("utf-8", "replace")
            what = f"PagerDuty {operation}: HTTP {r.status}: {text}"
            if r.status == 429 or r.status >= 500:
                after = r.headers.get("Retry-After")
                raise RetryableError(what, service=SERVICE, operation=operation,
                                     code=str(r.status),
                                     retry_after=float(after) if after and after.isdigit() else None)
            raise PermanentError(what, service=SERVICE, operation=operation, code=str(r.status))
        try:
            return json.loads(r.data or b"{}")
        except ValueError as e:
            raise PermanentError(f"PagerDuty {operation}: the answer is not JSON", service=SERVICE,
                                 operation=operation) from e

    def incident_alerts(self, incident_id: str) -> list[dict[str, Any]]:
        """The incident's alerts (``GET /incidents/{id}/alerts``), the first ``MAX_ALERTS``."""
        data = self._call("GET", f"/incidents/{quote(incident_id, safe='')}/alerts",
                          operation="list incident alerts",
                          fields={"limit": str(MAX_ALERTS), "offset": "0"})
        alerts = data.get("alerts") if isinstance(data, dict) else None
        return [a for a in alerts if isinstance(a, dict)] if isinstance(alerts, list) else []

    def add_note(self, incident_id: str, *, content: str, from_email: str) -> str:
        """Post a note on the incident as ``from_email``; the new note's id."""
        data = self._call("POST", f"/incidents/{quote(incident_id, safe='')}/notes",
                          operation="create incident note", headers={"From": from_email},
                          body={"note": {"content": content}})
        note = data.get("note") if isinstance(data, dict) else None
        return str(note.get("id", "")) if isinstance(note, dict) else ""
