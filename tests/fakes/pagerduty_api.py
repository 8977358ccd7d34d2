"""A stateful fake of PagerDuty: its REST API over real HTTP on 127.0.0.1, and its V3 webhooks.

The bot's PagerDuty client (``bot.clients.pagerduty``, urllib3 with its retries) is pointed at
this server (``pagerduty.api_url``), so the requests, headers and error handling run as in
production. It keeps incidents, their alerts and their notes, and answers like PagerDuty:
``GET /incidents/{id}/alerts`` (``{"alerts": [...], "limit", "offset", "more"}``),
``POST /incidents/{id}/notes`` (``{"note": {...}}``, 201; the ``From`` header must be a known
user's email, else 400), 401 without ``Authorization: Token token=<the token>``, 404 for an
unknown incident, and a given status for the next calls (``fail_next``).

``webhook(incident_id)`` builds an ``incident.triggered`` V3 delivery and signs it for real
(``X-PagerDuty-Signature: v1=<HMAC-SHA256 hex of the body>``, one signature per secret given,
comma-separated, as during a rotation).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = "pd-api-token-0123456789abcdef"
SECRET = "pd-webhook-secret-0123456789abcdef"
USER_EMAIL = "runbook-bot@example.com"
SUBDOMAIN = "https://acme.pagerduty.com"


@dataclass
class Incident:
    id: str
    title: str
    alerts: list[dict[str, Any]] = field(default_factory=list)
    notes: list[dict[str, Any]] = field(default_factory=list)
    created_at: str = "2026-12-03T03:16:00Z"

    @property
    def html_url(self) -> str:
        return f"{SUBDOMAIN}/incidents/{self.id}"


class FakePagerDuty:
    """``add_incident``, ``webhook``, ``fail_next``; ``requests`` lists every call."""

    def __init__(self, *, token: str = TOKEN, users: tuple[str, ...] = (USER_EMAIL,)) -> None:
        self.token = token
        self.users = set(users)
        self.incidents: dict[str, Incident] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self._failures: list[int] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> FakePagerDuty:
        fake = self

        class Handler(_Handler):
            owner = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,),
                                        daemon=True, name="fake-pagerduty")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # -- set-up ---------------------------------------------------------------------------------

    def add_incident(self, incident_id: str, *, title: str = "",
                     details: list[dict[str, Any]] | None = None) -> Incident:
        """An incident with one alert per custom-details mapping given."""
        inc = Incident(id=incident_id, title=title or f"incident {incident_id}")
        for i, d in enumerate(details or []):
            inc.alerts.append({
                "id": f"A{incident_id}{i}", "type": "alert", "status": "triggered",
                "created_at": "2026-12-03T03:16:00Z", "summary": inc.title,
                "alert_key": f"key-{i}", "html_url": f"{SUBDOMAIN}/alerts/A{incident_id}{i}",
                "incident": {"id": incident_id, "type": "incident_reference"},
                "body": {"type": "alert_body", "contexts": [], "details": d}})
        with self._lock:
            self.incidents[incident_id] = inc
        return inc

    def fail_next(self, *statuses: int) -> None:
        """The next calls (one per status) answer with these statuses."""
        with self._lock:
            self._failures.extend(statuses)

    def webhook(self, incident_id: str, *, secrets: tuple[str, ...] = (SECRET,),
                event_type: str = "incident.triggered") -> tuple[bytes, dict[str, str]]:
        """A V3 delivery about the incident: the body and its headers, signed."""
        inc = self.incidents[incident_id]
        body = json.dumps({"event": {
            "id": f"E{incident_id}", "event_type": event_type, "resource_type": "incident",
            "occurred_at": inc.created_at, "agent": None, "client": None,
            "data": {"id": inc.id, "type": "incident", "self": f"{self.base_url}/incidents/{inc.id}",
                     "html_url": inc.html_url, "number": 1, "status": "triggered",
                     "incident_key": f"key-{inc.id}", "created_at": inc.created_at,
                     "title": inc.title, "service": {"id": "PSERVICE", "type": "service_reference"},
                     "urgency": "high"}}}).encode()
        sigs = ",".join("v1=" + hmac.new(s.encode(), body, hashlib.sha256).hexdigest()
                        for s in secrets)
        return body, {"Content-Type": "application/json", "X-PagerDuty-Signature": sigs,
                      "X-Webhook-Id": f"W{incident_id}", "User-Agent": "PagerDuty-Webhook/V3.0"}

    # -- answering ------------------------------------------------------------------------------

    def answer(self, method: str, path: str, headers: dict[str, str],
               body: bytes) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append((method, path, headers))
            if self._failures:
                return self._failures.pop(0), {"error": {"message": "told to fail", "code": 2001}}
        if headers.get("authorization") != f"Token token={self.token}":
            return 401, {"error": {"message": "Unauthorized", "code": 2006}}
        if headers.get("accept") != "application/vnd.pagerduty+json;version=2":
            return 406, {"error": {"message": "Not Acceptable"}}
        m = re.fullmatch(r"/incidents/([A-Za-z0-9]+)/(alerts|notes)(\?.*)?", path)
        inc = self.incidents.get(m.group(1)) if m else None
        if m is None or inc is None:
            return 404, {"error": {"message": "Not Found", "code": 2100}}
        if method == "GET" and m.group(2) == "alerts":
            return 200, {"alerts": inc.alerts, "limit": 100, "offset": 0, "more": False}
        if method == "POST" and m.group(2) == "notes":
            if headers.get("from") not in self.users:
                return 400, {"error": {"message": "Invalid Input Provided", "code": 2001,
                                       "errors": ["Requester User Not Found"]}}
            try:
                content = json.loads(body)["note"]["content"]
            except (ValueError, KeyError, TypeError):
                return 400, {"error": {"message": "Invalid Input Provided", "code": 2001}}
            note = {"id": f"N{len(inc.notes) + 1}", "content": content,
                    "user": {"summary": headers.get("from")}, "created_at": inc.created_at}
            with self._lock:
                inc.notes.append(note)
            return 201, {"note": note}
        return 405, {"error": {"message": "Method Not Allowed"}}


class _Handler(BaseHTTPRequestHandler):
    owner: FakePagerDuty

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, data = self.owner.answer(self.command, self.path, headers, body)
        out = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = _serve
    do_POST = _serve
