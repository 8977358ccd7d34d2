"""One port per audience, over real HTTP as ``slack serve`` runs them (docs/deploy.md, "Ports").

The Slack port is what the Ingress exposes to the internet: it answers Slack's requests and the
load balancer's ``GET /healthz``, and nothing else, so a route that forwards ``/`` there exposes no
metrics, no readiness detail and no Alertmanager webhook. The ops port answers the probes and
Prometheus, the alerts port Alertmanager; neither answers the other's paths nor Slack's.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable

import pytest

from bot.config import AlertsConfig
from tests.fakes.slack_requests import slash_command_body
from tests.frontends.slack.conftest import Bot

TOKEN = "ports-token-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
PAYLOAD = (b'{"version": "4", "groupKey": "g", "status": "firing", "receiver": "runbook-bot", '
           b'"groupLabels": {}, "commonLabels": {}, "commonAnnotations": {}, '
           b'"externalURL": "http://am:9093", "truncatedAlerts": 0, "alerts": []}')


@pytest.fixture
def served(make_bot: Callable[..., Bot]) -> Bot:
    """A bot with the Alertmanager webhook on (it has credentials to check)."""
    return make_bot(alerts=AlertsConfig(bearer_tokens=(TOKEN,)))


def status(url: str, *, data: bytes | None = None, headers: dict[str, str] | None = None) -> int:
    req = urllib.request.Request(url, data=data, headers=headers or {},
                                 method="GET" if data is None else "POST")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        e.close()
        return int(e.code)


def test_the_slack_port_answers_no_metrics_readiness_or_alertmanager_request(served: Bot) -> None:
    """The attack: an Ingress forwarding ``/`` to the Slack port; each request is 404."""
    for path in ("/metrics", "/readyz", "/alertmanager"):
        assert status(served.base + path) == 404, path
        assert status(served.base + path, data=PAYLOAD, headers=BEARER) == 404, path
    assert status(served.base + "/", data=b"x=1") == 404
    # what it does answer: the load balancer's health check, and Slack's (signed) requests
    assert status(served.base + "/healthz") == 200
    assert served.post(slash_command_body(text="help", user_id="U1"))[0] == 200


def test_the_ops_port_answers_probes_and_scrapes_and_nothing_else(served: Bot) -> None:
    served.runner.run_due()  # the worker loop went round: ready
    assert served.ops_base != served.base
    for path in ("/healthz", "/readyz", "/metrics"):
        assert status(served.ops_base + path) == 200, path
    for path in ("/slack/events", "/alertmanager"):
        assert status(served.ops_base + path, data=PAYLOAD, headers=BEARER) == 404, path


def test_the_alerts_port_answers_alertmanager_and_nothing_else(served: Bot) -> None:
    assert served.alerts_base not in ("", served.base, served.ops_base)
    assert status(served.alerts_base + "/alertmanager", data=PAYLOAD) == 401  # no credentials
    assert status(served.alerts_base + "/alertmanager", data=PAYLOAD, headers=BEARER) == 200
    for path in ("/metrics", "/readyz"):
        assert status(served.alerts_base + path) == 404, path
    assert status(served.alerts_base + "/slack/events", data=b"x=1") == 404
    assert status(served.alerts_base + "/healthz") == 200  # for a load balancer in front of it
