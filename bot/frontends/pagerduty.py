"""PagerDuty as an alert source: ``POST /pagerduty`` takes V3 webhooks and suggests runbooks.

PagerDuty signs each V3 webhook delivery: ``X-PagerDuty-Signature`` is ``v1=<hex>``, the
HMAC-SHA256 of the raw body under the subscription's signing secret, and carries several
comma-separated signatures while a secret rotates. A delivery is accepted when any signature
matches any configured secret (compared in constant time); anything else is 401, recorded only
as a count and one log line without the header. Body limits are the alerts port's
(``bot.frontends.http``).

A V3 webhook carries the incident, not its alerts' labels. For ``incident.triggered`` the bot
reads the incident's alerts through the REST API (``GET /incidents/{id}/alerts``,
``bot.clients.pagerduty``) and takes each alert's custom details (``body.details``) as an
Alertmanager alert (``alerts_in``, the rule docs/pagerduty.md states):

- details holding a string ``alertname``: the details' string values are the alert's labels
  (what ``pagerduty_configs.details`` gives when it lists labels);
- else details holding ``firing`` text as Alertmanager's PagerDuty integration writes it by
  default (its ``__text_alert_list`` template: ``Labels:`` / `` - name = value`` /
  ``Annotations:`` / ``Source:``): each listed alert, with its labels and annotations;
- else nothing: the alert answers no runbook and is counted ``unmatched``.

Each such alert gets the fingerprint Alertmanager gives those labels (``fingerprint``), so an alert
that reaches the bot from Alertmanager directly and through PagerDuty is one alert to the store:
the same triggers, deduplication, scans and cards as ``bot.frontends.alerts``, through the same
``AlertIntake``. The incident's group is ``pagerduty:<incident id>``, and each alert records the
incident (``data["incident"]``: its id, its link, and the reference a run records); the card
shows it and a run started from it is linked to the incident (``incident_ref``), which
``bot.frontends.pagerduty_notes`` uses to post the run's outcome back.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from bot.config_pagerduty import PagerDutyConfig
from bot.errors import ExternalError
from bot.frontends.alerts import AlertIntake, WebhookAlert, WebhookPayload
from bot.frontends.http import WSGIApp
from bot.frontends.metrics import Metrics

log = logging.getLogger(__name__)

PAGERDUTY_PATH = "/pagerduty"
BODY_LIMIT = 256 * 1024  # one incident event; PagerDuty's V3 payloads are a few KB
SIGNATURE_HEADER = "HTTP_X_PAGERDUTY_SIGNATURE"
INCIDENT_PREFIX = "pagerduty:"
_ID = re.compile(r"[A-Za-z0-9]{1,64}")
_URL = re.compile(r"https://[A-Za-z0-9.-]+(?::\d+)?/[A-Za-z0-9._~/%-]*")
_REF = re.compile(r"pagerduty:([A-Za-z0-9]{1,64})(?: (https?://\S+))?")


class Alerts(Protocol):
    """What the webhook reads from PagerDuty (``bot.clients.pagerduty.PagerDutyClient``)."""

    def incident_alerts(self, incident_id: str) -> list[dict[str, Any]]: ...


# -- signatures ---------------------------------------------------------------------------------


def signature(body: bytes, secret: str) -> str:
    """``v1=<hex>``: PagerDuty's signature of ``body`` under ``secret``."""
    return "v1=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verified(body: bytes, header: str | None, secrets: Sequence[str]) -> bool:
    """Whether any ``v1=`` signature of the header is the body's under any secret."""
    if not header or not secrets:
        return False
    given = [s.strip() for s in header.split(",") if s.strip().startswith("v1=")][:10]
    hits = 0
    for secret in secrets:  # every pair compared: the time taken says nothing
        expected = signature(body, secret).encode()
        for sig in given:
            hits += hmac.compare_digest(expected, sig.encode())
    return hits > 0


# -- incidents and references ------------------------------------------------------------------


def incident_ref(incident_id: str, url: str | None) -> str:
    """What a run linked to the incident records (``--incident`` takes the same): the id, then
    the link, ``pagerduty:Q1ABC https://acme.pagerduty.com/incidents/Q1ABC``."""
    return f"{INCIDENT_PREFIX}{incident_id}" + (f" {url}" if url else "")


def linked_incident(incident: str | None) -> tuple[str, str | None] | None:
    """The PagerDuty incident (id, link) a run's incident reference names; None for any other."""
    m = _REF.fullmatch((incident or "").strip())
    return (m.group(1), m.group(2)) if m else None


def fingerprint(labels: Mapping[str, str]) -> str:
    """Alertmanager's fingerprint of a label set (Prometheus' FNV-1a 64 over the sorted names
    and values, each followed by the separator byte 0xff), as 16 hex digits."""
    h = 14695981039346656037
    for name in sorted(labels):
        for part in (name, labels[name]):
            for byte in part.encode():
                h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
            h = ((h ^ 0xFF) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


_ITEM = re.compile(r"^\s*-\s+([A-Za-z_][A-Za-z0-9_]*) = (.*)$")


def _text_alert_list(text: str) -> list[tuple[dict[str, str], dict[str, str], str]]:
    """Alertmanager's ``__text_alert_list`` output, back into (labels, annotations, source)."""
    out: list[tuple[dict[str, str], dict[str, str], str]] = []
    section: dict[str, str] | None = None
    last = ""
    for line in text.splitlines():
        if line.strip() == "Labels:":
            out.append(({}, {}, ""))
            section, last = out[-1][0], ""
        elif line.strip() == "Annotations:" and out:
            section, last = out[-1][1], ""
        elif line.startswith("Source:") and out:
            labels, notes, _ = out[-1]
            out[-1] = (labels, notes, line[len("Source:"):].strip())
            section = None
        elif section is not None and (m := _ITEM.match(line)):
            last = m.group(1)
            section[last] = m.group(2)
        elif section is not None and last:  # a value of several lines
            section[last] += "\n" + line
    return [a for a in out if a[0].get("alertname")]


def alerts_in(details: Any) -> list[tuple[dict[str, str], dict[str, str], str]]:
    """The Alertmanager alerts a PagerDuty alert's custom details carry (the module's rule)."""
    if not isinstance(details, Mapping):
        return []
    if isinstance(details.get("alertname"), str):
        labels = {str(k): v for k, v in details.items() if isinstance(v, str) and v}
        return [(labels, {}, "")]
    firing = details.get("firing")
    return _text_alert_list(firing) if isinstance(firing, str) else []


def payload_for(incident: Mapping[str, Any], alerts: Iterable[Mapping[str, Any]]) -> WebhookPayload:
    """The incident's alerts as one Alertmanager group, ``pagerduty:<incident id>``."""
    found: dict[str, WebhookAlert] = {}
    for alert in alerts:
        if alert.get("status") == "resolved":
            continue
        body = alert.get("body")
        details = body.get("details") if isinstance(body, Mapping) else None
        for labels, notes, source in alerts_in(details):
            fp = fingerprint(labels)
            found.setdefault(fp, WebhookAlert.model_validate({
                "status": "firing", "labels": labels, "annotations": notes,
                "startsAt": str(alert.get("created_at") or incident.get("created_at") or ""),
                "generatorURL": source, "fingerprint": fp}))
    return WebhookPayload.model_validate({
        "version": "4", "groupKey": f"{INCIDENT_PREFIX}{incident['id']}", "status": "firing",
        "receiver": "pagerduty", "alerts": list(found.values())})


def incident_of(event: Any) -> dict[str, Any] | None:
    """The incident of an ``incident.triggered`` V3 event; None for any other event."""
    ev = event.get("event") if isinstance(event, Mapping) else None
    if not isinstance(ev, Mapping) or ev.get("event_type") != "incident.triggered":
        return None
    data = ev.get("data")
    if not isinstance(data, Mapping) or not _ID.fullmatch(str(data.get("id", ""))):
        return None
    url = str(data.get("html_url") or "")
    return {"id": str(data["id"]), "url": url if _URL.fullmatch(url) else None,
            "title": str(data.get("title") or "")[:200], "created_at": data.get("created_at")}


class PagerDutyIntake:
    """An incident's alerts into the Alertmanager intake, linked to the incident."""

    def __init__(self, *, intake: AlertIntake, client: Alerts | None,
                 config: PagerDutyConfig) -> None:
        self.intake = intake
        self.client = client
        self.config = config

    def receive(self, incident: Mapping[str, Any]) -> dict[str, int]:
        """Read the incident's alerts and hand them on; what was done, by outcome."""
        if self.client is None:
            log.warning("PagerDuty incident %s: no pagerduty.api_token to read its alerts with",
                        incident["id"])
            return {"unread": 1}
        alerts = self.client.incident_alerts(str(incident["id"]))
        payload = payload_for(incident, alerts)
        if not payload.alerts:
            return {"unmatched": len(alerts) or 1}
        link = {"id": incident["id"], "url": incident.get("url") or "",
                "ref": incident_ref(incident["id"], incident.get("url"))}
        receipt = self.intake.receive(payload, incident=link)
        return {"busy": 1} if receipt.busy else dict(receipt.outcomes)


# -- the endpoint -------------------------------------------------------------------------------


def _answer(start_response: Callable[..., Any], status: str, text: str) -> list[bytes]:
    body = text.encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                            ("Content-Length", str(len(body)))])
    return [body]


def pagerduty_app(intake: PagerDutyIntake, *, metrics: Metrics | None = None) -> WSGIApp:
    """``POST /pagerduty`` (served on the alerts port, behind its body limits)."""

    def count(answer: str) -> None:
        if metrics is not None:
            metrics.alert_request(answer)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") != "POST":
            return _answer(start_response, "405 Method Not Allowed", "POST PagerDuty V3 webhooks\n")
        length = int(environ.get("CONTENT_LENGTH") or 0)  # checked by the body limit
        body = environ["wsgi.input"].read(length) if length else b""
        if not verified(body, environ.get(SIGNATURE_HEADER), intake.config.webhook_secrets):
            count("unauthorized")
            log.info("refused a PagerDuty request without a valid X-PagerDuty-Signature")
            return _answer(start_response, "401 Unauthorized", "unauthorized\n")
        try:
            event = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            count("malformed")
            log.warning("refused a signed PagerDuty request whose body is not JSON")
            return _answer(start_response, "400 Bad Request", "the body is not JSON\n")
        incident = incident_of(event)
        if incident is None:  # another event type (pagey.ping, incident.resolved, ...)
            count("accepted")
            return _answer(start_response, "200 OK", '{"ignored": 1}\n')
        try:
            outcomes = intake.receive(incident)
        except ExternalError as e:  # PagerDuty retries a 5xx delivery on its own
            log.warning("PagerDuty incident %s: could not read its alerts: %s", incident["id"], e)
            return _answer(start_response, "503 Service Unavailable",
                           "could not read the incident's alerts; deliver again later\n")
        if outcomes.get("busy"):
            count("busy")
            return _answer(start_response, "503 Service Unavailable", "busy\n")
        count("accepted")
        return _answer(start_response, "200 OK", json.dumps(outcomes, sort_keys=True) + "\n")

    return app


def pagerduty_routes(config: PagerDutyConfig, intake: AlertIntake, *,
                     metrics: Metrics | None = None,
                     client: Alerts | None = None) -> dict[str, tuple[WSGIApp, int]]:
    """``/pagerduty`` for the alerts port (``alerts.listener(..., more=...)``) where a webhook
    secret is configured; nothing otherwise. Its alerts go to ``intake``, like Alertmanager's."""
    if not config.enabled:
        return {}
    if client is None and config.api_token:
        from bot.clients.pagerduty import PagerDutyClient

        client = PagerDutyClient(base_url=config.api_url, token=config.api_token,
                                 backoff=config.retry_backoff)
    app = pagerduty_app(PagerDutyIntake(intake=intake, client=client, config=config),
                        metrics=metrics)
    return {PAGERDUTY_PATH: (app, BODY_LIMIT)}
