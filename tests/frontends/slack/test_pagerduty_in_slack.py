"""PagerDuty's V3 webhooks into ``slack serve``: signed deliveries over HTTP, the incident's alerts
read from the fake PagerDuty REST API, the same cards as Alertmanager's, and the outcome of a run
linked to the incident posted back to it as a note.

Every delivery is built and signed as PagerDuty does (``X-PagerDuty-Signature: v1=<HMAC-SHA256>``)
by the fake (``tests/fakes/pagerduty_api.py``); the bot reads alerts and posts notes through its
real client (urllib3) against the fake over HTTP. What the tests read is the fake Slack's channel,
the fake PagerDuty's notes, and the store's runs, audit events and transcripts.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.config import AlertsConfig, PagerDutyConfig
from bot.frontends.pagerduty import fingerprint
from bot.frontends.pagerduty_notes import notes_for
from bot.frontends.slack.alert_cards import ACTION_ALERT_DRY_RUN
from tests.fakes.pagerduty_api import SECRET, TOKEN, USER_EMAIL, FakePagerDuty
from tests.fakes.slack_api import CHANNEL
from tests.frontends.slack.conftest import ALICE, Bot, button_in, texts
from tests.frontends.slack.test_alerts_in_slack import ALERTS, TEXTS, alert, cards, payload, post

NODE = "ip-10-0-1-2.ec2.internal"
CARDS_ONLY = AlertsConfig(channel=CHANNEL)  # where cards go; no Alertmanager credentials
LABELS = {"alertname": "KubeNodeNotReady", "severity": "warning", "job": "kube-state-metrics",
          "container": "kube-state-metrics", "namespace": "monitoring", "node": NODE}


def default_details(labels: dict[str, str]) -> dict[str, str]:
    """Custom details as Alertmanager's PagerDuty integration sends them by default: its
    ``__text_alert_list`` template for the firing alerts."""
    listed = "".join(f" - {k} = {v}\n" for k, v in sorted(labels.items()))
    firing = (f"Labels:\n{listed}Annotations:\n - summary = Node is not ready.\n"
              "Source: http://prometheus:9090/graph?g0.expr=kube_node_status_condition\n")
    return {"firing": firing, "num_firing": "1", "num_resolved": "0", "resolved": ""}


@pytest.fixture
def pd() -> Iterator[FakePagerDuty]:
    with FakePagerDuty() as fake:
        yield fake


def config(pd: FakePagerDuty) -> PagerDutyConfig:
    return PagerDutyConfig(webhook_secrets=(SECRET,), api_token=TOKEN, from_email=USER_EMAIL,
                           api_url=pd.base_url, retry_backoff=0.0,
                           transcript_url="https://bot.example.com/api/v1/runs/{run_id}/transcript")


def deliver(bot: Bot, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    req = urllib.request.Request(f"{bot.alerts_base}/pagerduty", data=body, headers=headers,
                                 method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            out = int(r.status), r.read().decode()
    except urllib.error.HTTPError as e:
        out = int(e.code), e.read().decode()
    bot.settle()
    return out


def test_a_signed_incident_gets_the_card_alertmanager_gets_with_its_incident(
        make_bot: Any, pd: FakePagerDuty, tmp_path: Path) -> None:
    # the same alert straight from Alertmanager, to a bot (and a database) of its own
    am = make_bot(alerts=ALERTS, texts=TEXTS)
    post(am, payload(alert(node=NODE, fingerprint=fingerprint(LABELS))))
    [am_card] = cards(am)
    am_value = json.loads(button_in(am_card, ACTION_ALERT_DRY_RUN)["value"])
    am.close()

    # PagerDuty only (no Alertmanager credentials), in the same Slack channel
    bot = make_bot(texts=TEXTS, alerts=CARDS_ONLY, pagerduty=config(pd),
                   db_url=f"sqlite:///{tmp_path / 'pd.db'}")
    pd.add_incident("Q1ABC", title="KubeNodeNotReady", details=[default_details(LABELS)])
    body, headers = pd.webhook("Q1ABC", secrets=("old-secret-0123456789abcdef", SECRET))
    status, text = deliver(bot, body, headers)
    assert (status, json.loads(text)) == (200, {"suggested": 1})
    [pd_card] = [c for c in cards(bot) if c["ts"] != am_card["ts"]]
    # the same alert, runbook, params and provenance; the card names the incident and links it
    value = json.loads(button_in(pd_card, ACTION_ALERT_DRY_RUN)["value"])
    url = "https://acme.pagerduty.com/incidents/Q1ABC"
    assert value == {**am_value, "i": f"pagerduty:Q1ABC {url}"}
    shown = "\n".join(texts([pd_card]))
    assert f"PagerDuty incident <{url}|Q1ABC>" in shown
    assert shown.replace(f"\n:pager: PagerDuty incident <{url}|Q1ABC>", "") == "\n".join(texts([am_card]))
    assert [(m, p) for m, p, _ in pd.requests] == [("GET", "/incidents/Q1ABC/alerts?limit=100&offset=0")]
    # PagerDuty delivers again: the alert is recorded once, no second card
    assert deliver(bot, body, headers) == (200, '{"duplicate": 1}\n')
    assert len([c for c in cards(bot) if c["ts"] != am_card["ts"]]) == 1


def test_the_fingerprint_is_alertmanagers() -> None:
    """The labels' fingerprint as Prometheus' model computes it (its labelSetToFingerprint test),
    so one alert from Alertmanager and through PagerDuty is one alert to the store."""
    assert fingerprint({}) == "cbf29ce484222325"
    assert fingerprint({"name": "garland, briggs", "fear": "love is not enough"}) == \
        f"{5799056148416392346:016x}"


def test_a_bad_or_missing_signature_is_401_and_suggests_nothing(make_bot: Any,
                                                                 pd: FakePagerDuty) -> None:
    bot = make_bot(texts=TEXTS, alerts=CARDS_ONLY, pagerduty=config(pd))
    pd.add_incident("Q2BAD", details=[{**LABELS}])
    body, headers = pd.webhook("Q2BAD", secrets=("wrong-secret-0123456789abcdef",))
    tampered = body.replace(b"Q2BAD", b"Q2BAd")
    _, good = pd.webhook("Q2BAD")
    for sent, hdrs in ((body, headers), (tampered, good), (body, {"Content-Type": "application/json"}),
                       (body, {**good, "X-PagerDuty-Signature": "v0=" + good["X-PagerDuty-Signature"][3:]})):
        assert deliver(bot, sent, hdrs)[0] == 401
    from bot.frontends.pagerduty import BODY_LIMIT
    from tests.frontends.slack.test_body_limits import _raw

    answer = _raw(bot.alerts_base, f"POST /pagerduty HTTP/1.1\r\nHost: x\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {BODY_LIMIT + 1}",
                  b"{" * (BODY_LIMIT + 1))
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]  # refused before the app reads it
    assert cards(bot) == [] and pd.requests == [] and bot.db.runs(limit=5) == []
    assert 'runbook_bot_alert_requests_total{answer="unauthorized"} 4.0' in \
        bot.metrics.exposition().decode()


def test_a_run_linked_to_the_incident_notes_its_outcome_there(make_bot: Any,
                                                                pd: FakePagerDuty) -> None:
    bot = make_bot(texts=TEXTS, alerts=CARDS_ONLY, pagerduty=config(pd))
    notes = bot.parts.pagerduty_notes
    assert notes is not None
    notes.stop()  # the notes thread stops: this test posts with ``flush``, on its own clock
    pd.add_incident("Q3RUN", details=[dict(LABELS)])  # details listing the labels themselves
    assert deliver(bot, *pd.webhook("Q3RUN"))[0] == 200
    [card] = cards(bot)
    pd.fail_next(503, 503, 503, 503)  # PagerDuty is down for the first try (urllib3 retries 3x)
    bot.click(card, ACTION_ALERT_DRY_RUN, user=ALICE)
    [run] = bot.db.runs(limit=5)
    state = bot.db.load(run.run_id)
    ref = "pagerduty:Q3RUN https://acme.pagerduty.com/incidents/Q3RUN"
    assert state.incident == ref and state.status.value == "succeeded"
    linked = next(e for e in bot.events(run.run_id) if e.type == "run.linked")
    assert linked.payload["incident"] == ref
    _, transcript = bot.service.exporter(run.run_id, "md")
    assert ref.encode() in transcript
    # the run's own card in Slack names the incident too
    assert any(ref in t for t in texts(bot.fake.messages(CHANNEL)[1:]))
    assert notes.flush() == 0  # PagerDuty answered 503 to every try: the note stays owed
    owed = notes.notes.get(run.run_id)
    assert owed is not None and owed.state == "pending" and owed.attempts == 1
    assert pd.incidents["Q3RUN"].notes == []
    bot.clock.advance(31)  # the retry falls due on the injected clock
    # a restart: a new process's notes find the note still owed in the database, and post it
    again = notes_for(bot.settings.pagerduty, notifiers=[], engine=bot.db.engine, clock=bot.clock)
    assert again is not None and again.flush() == 1
    [note] = pd.incidents["Q3RUN"].notes
    assert note["user"]["summary"] == USER_EMAIL
    assert f"Dry run {run.run_id} of node-down succeeded" in note["content"]
    assert f"https://bot.example.com/api/v1/runs/{run.run_id}/transcript" in note["content"]
    done = notes.notes.get(run.run_id)
    assert done is not None and done.state == "posted"
    notes.flush()
    assert len(pd.incidents["Q3RUN"].notes) == 1  # posted once
