"""Alertmanager's webhook into ``slack serve``: real payloads over HTTP, cards in the fake Slack.

Every request is what Alertmanager sends (webhook payload version 4, with its ``http_config``
credentials) to the served app; what the tests read is the channel of the fake Slack Web API,
the store's runs and audit events, and the metrics.
"""

from __future__ import annotations

import base64
import json
import logging
import urllib.error
import urllib.request
from typing import Any

import pytest

from bot.config import AlertsConfig
from bot.engine.approvals import is_system
from bot.frontends.slack.alert_cards import ACTION_ALERT_DRY_RUN, ACTION_ALERT_RUN
from bot.present import blockkit as bk
from tests.fakes.engine_harness import runbook
from tests.fakes.slack_api import CHANNEL
from tests.frontends.slack.conftest import ALICE, DAVE, Bot, button_in, texts

TOKEN = "alertmanager-token-0123456789"
ALERTS = AlertsConfig(bearer_tokens=(TOKEN,), basic_auth={"alertmanager": "basic-secret-0123456789"},
                      channel=CHANNEL)

NODE_DOWN = runbook("node-down", """
- id: read
  title: "Read {{ params.name }}"
  action: fake.read
  with: {name: "{{ params.name }}"}
- id: change
  title: "Set {{ params.name }}"
  action: fake.set
  with: {name: "{{ params.name }}", value: "off"}
""", params="""
name: {type: string, required: true, pattern: "[a-z0-9.-]+"}
cluster: {type: string}
""", approvals="""
groups: [sre]
""").replace("  steps:", """  triggers:
    - alertname: KubeNodeNotReady
      params: {name: "{{ labels.node }}"}
  steps:""")

# only a runbook whose every step reads, reports or notifies may auto-run (bot.runbook.autorun),
# and the fake world's actions are not on that list: this one only notifies
LOOK = runbook("look-at-pod", """
- id: tell
  title: "Look at {{ params.name }}"
  action: notify
  with: {message: "look at {{ params.name }}"}
""", params="""
name: {type: string, required: true}
""").replace("  steps:", """  auto_run: true
  triggers:
    - alertname: PodVolumeAttachStuck
      params: {name: "{{ labels.namespace }}-{{ labels.pod }}"}
  steps:""")

TEXTS = {"node-down": NODE_DOWN, "look-at-pod": LOOK}
GROUP = '{}/{severity="warning"}:{alertname="KubeNodeNotReady"}'


def alert(name: str = "KubeNodeNotReady", *, status: str = "firing", fingerprint: str = "5ef77f1f7cbe2a1d",
          starts: str = "2026-12-03T03:01:12.1Z", **labels: str) -> dict[str, Any]:
    labels = {"alertname": name, "severity": "warning", "job": "kube-state-metrics",
              "container": "kube-state-metrics", "namespace": "monitoring", **labels}
    return {"status": status, "labels": labels,
            "annotations": {"summary": "Node is not ready.",
                            "description": f"{labels.get('node')} has been unready for more than 15 minutes.",
                            "runbook_url": "https://runbooks.prometheus-operator.dev/runbooks/kubernetes/kubenodenotready"},
            "startsAt": starts,
            "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2026-12-03T03:40:12.1Z",
            "generatorURL": "http://prometheus:9090/graph?g0.expr=kube_node_status_condition",
            "fingerprint": fingerprint}


def payload(*alerts: dict[str, Any], group: str = GROUP) -> dict[str, Any]:
    status = "firing" if any(a["status"] == "firing" for a in alerts) else "resolved"
    common = {k: v for k, v in alerts[0]["labels"].items()
              if all(a["labels"].get(k) == v for a in alerts)}
    return {"receiver": "runbook-bot", "status": status, "alerts": list(alerts),
            "groupLabels": {"alertname": alerts[0]["labels"]["alertname"]},
            "commonLabels": common, "commonAnnotations": {},
            "externalURL": "http://alertmanager:9093", "version": "4", "groupKey": group,
            "truncatedAlerts": 0}


def post(bot: Bot, body: Any, *, auth: str | None = f"Bearer {TOKEN}",
         raw: bytes | None = None) -> tuple[int, str]:
    data = raw if raw is not None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "Alertmanager/0.27.0"}
    if auth is not None:
        headers["Authorization"] = auth
    req = urllib.request.Request(f"{bot.alerts_base}/alertmanager", data=data, headers=headers,
                                 method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            out = int(r.status), r.read().decode()
    except urllib.error.HTTPError as e:
        out = int(e.code), e.read().decode()
    bot.settle()
    return out


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture
def abot(make_bot: Any) -> Bot:
    return make_bot(alerts=ALERTS, texts=TEXTS)


def cards(bot: Bot) -> list[dict[str, Any]]:
    return [m for m in bot.fake.messages(CHANNEL) if "firing" in m.get("text", "")
            or "resolved" in m.get("text", "")]


def test_credentials_as_alertmanager_sends_them_are_accepted_and_anything_else_is_401(abot: Bot):
    body = payload(alert(node="ip-10-0-1-2.ec2.internal"))
    refused = [None, "Bearer wrong-token-0123456789", f"bearer{TOKEN}", f"Token {TOKEN}",
               basic("alertmanager", "wrong-password-0123"), basic("someone", "basic-secret-0123456789"),
               "Basic !!!notbase64", "Basic " + base64.b64encode(b"no-colon").decode()]
    for auth in refused:
        assert post(abot, body, auth=auth)[0] == 401, auth
    assert abot.fake.messages(CHANNEL) == []
    assert abot.db.runs(limit=5) == []
    assert post(abot, body, auth=basic("alertmanager", "basic-secret-0123456789"))[0] == 200
    assert post(abot, body)[0] == 200  # the bearer token, a repeat: still one card
    assert len(cards(abot)) == 1
    metrics = abot.metrics.exposition().decode()
    assert 'runbook_bot_alert_requests_total{answer="unauthorized"} 8.0' in metrics


def test_oversized_is_413_and_malformed_is_400_naming_what_is_wrong(abot: Bot):
    from bot.frontends.alerts import BODY_LIMIT
    from tests.frontends.slack.test_body_limits import _raw

    answer = _raw(abot.alerts_base, f"POST /alertmanager HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}"
                        f"\r\nContent-Type: application/json\r\nContent-Length: {BODY_LIMIT + 1}")
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    big = json.dumps(payload(alert(node="n1", big="x" * 1000))).encode()
    assert post(abot, None, raw=big)[0] == 200  # within the limit: read and served
    status, text = post(abot, None, raw=b"{not json")
    assert status == 400 and "not JSON" in text
    wrong = payload(alert(node="n1"))
    wrong["version"] = "3"
    status, text = post(abot, wrong)
    assert status == 400 and "version" in text and "'3'" in text
    missing = payload(alert(node="n1"))
    del missing["alerts"][0]["fingerprint"]
    status, text = post(abot, missing)
    assert (status, text.strip()) == (400, "not an Alertmanager webhook payload (version 4): "
                                           "alerts.0.fingerprint: Field required")
    assert len(abot.fake.messages(CHANNEL)) == 1  # the one served; the refused ones did nothing


def test_a_firing_group_posts_one_card_and_its_resolution_updates_it(abot: Bot):
    a = alert(node="ip-10-0-1-2.ec2.internal")
    status, _ = post(abot, payload(a))
    assert status == 200
    [card] = cards(abot)
    shown = "\n".join(texts([card]))
    assert "KubeNodeNotReady" in shown and "node-down" in shown and "ip-10-0-1-2.ec2.internal" in shown
    dry = button_in(card, ACTION_ALERT_DRY_RUN)
    assert json.loads(dry["value"]) == {"rb": "node-down", "p": {"name": "ip-10-0-1-2.ec2.internal"},
                                        "a": "alert:default/5ef77f1f7cbe2a1d"}
    # Alertmanager delivers again (repeat_interval, its own replicas): nothing new
    for _ in range(3):
        post(abot, payload(a))
    assert len(cards(abot)) == 1 and len(abot.fake.revisions(CHANNEL, card["ts"])) == 1
    # a second node joins the group: the same card lists both
    b = alert(node="ip-10-0-3-4.ec2.internal", fingerprint="aa0c3b9e5f2d1c77")
    post(abot, payload(a, b))
    [card] = cards(abot)
    assert "ip-10-0-3-4.ec2.internal" in "\n".join(texts([card])) and "2 alerts firing" in card["text"]
    # both resolve: the card says so, and no button is left
    post(abot, payload(alert(node="ip-10-0-1-2.ec2.internal", status="resolved"),
                       alert(node="ip-10-0-3-4.ec2.internal", fingerprint="aa0c3b9e5f2d1c77",
                             status="resolved")))
    [card] = cards(abot)
    assert card["text"].startswith("All alerts resolved")
    with pytest.raises(AssertionError):
        button_in(card, ACTION_ALERT_RUN)
    assert abot.db.runs(limit=5) == []  # nothing ran: a card only suggests


def test_an_alert_no_runbook_answers_or_of_an_unknown_cluster_is_ignored_and_counted(make_bot: Any):
    bot = make_bot(alerts=ALERTS, texts=TEXTS, clusters=("prod", "staging"))
    post(bot, payload(alert("KubeCPUOvercommit")))
    post(bot, payload(alert(node="n1", cluster="elsewhere")))
    post(bot, payload(alert(node="n1")))  # several clusters and no cluster label: whose?
    assert bot.fake.messages(CHANNEL) == []
    metrics = bot.metrics.exposition().decode()
    assert 'runbook_bot_alerts_total{outcome="unmatched"} 1.0' in metrics
    assert 'runbook_bot_alerts_total{outcome="unknown_cluster"} 2.0' in metrics
    post(bot, payload(alert(node="n1", cluster="prod")))
    [card] = cards(bot)
    assert json.loads(button_in(card, ACTION_ALERT_DRY_RUN)["value"])["p"] == {
        "name": "n1", "cluster": "prod"}


def test_dry_run_starts_a_plan_only_run_as_the_person_and_records_the_alert(abot: Bot):
    post(abot, payload(alert(node="ip-10-0-1-2")))
    [card] = cards(abot)
    abot.click(card, ACTION_ALERT_DRY_RUN, user=ALICE)
    [run] = abot.db.runs(limit=5)
    state = abot.db.load(run.run_id)
    assert state.dry_run and state.requester == f"slack:{ALICE}"
    assert state.params["name"] == "ip-10-0-1-2"
    linked = next(e for e in abot.events(run.run_id) if e.type == "run.linked")
    assert linked.payload["suggested_by"] == "alert:default/5ef77f1f7cbe2a1d"
    assert state.suggested_by == "alert:default/5ef77f1f7cbe2a1d"


def test_run_opens_the_params_form_and_starts_nothing_until_a_person_submits_it(abot: Bot):
    post(abot, payload(alert(node="ip-10-0-1-2")))
    [card] = cards(abot)
    abot.click(card, ACTION_ALERT_RUN, user=ALICE)
    assert abot.db.runs(limit=5) == []
    [view] = abot.fake.views()
    assert json.loads(view["private_metadata"])["suggested_by"] == "alert:default/5ef77f1f7cbe2a1d"
    values = {bk.param_block_id("name"): {"value": {"type": "plain_text_input",
                                                    "value": "ip-10-0-1-2"}}}
    abot.submit(view, values, user=ALICE)
    [run] = abot.db.runs(limit=5)
    state = abot.db.load(run.run_id)
    assert not state.dry_run and state.requester == f"slack:{ALICE}"
    assert state.suggested_by == "alert:default/5ef77f1f7cbe2a1d"
    # the destructive step still waits for an approver under the normal policy
    assert abot.db.load(run.run_id).status == "awaiting_approval"


def test_auto_run_starts_a_read_only_runbook_as_the_system_actor_that_cannot_approve(abot: Bot):
    post(abot, payload(alert("PodVolumeAttachStuck", fingerprint="77aa", namespace="shop", pod="db-0"),
                       group='{}:{alertname="PodVolumeAttachStuck"}'))
    [run] = abot.db.runs(limit=5)
    state = abot.db.load(run.run_id)
    assert state.runbook == "look-at-pod" and state.params["name"] == "shop-db-0"
    assert is_system(state.requester) and "PodVolumeAttachStuck" in state.requester
    assert state.suggested_by == "alert:default/77aa"
    assert state.status == "succeeded"
    # its time to recovery counts from when the alert started firing (run.linked's detected_at)
    [linked] = [e.payload for e in abot.db.events(run.run_id) if e.type == "run.linked"]
    assert linked["detected_at"] == "2026-12-03T03:01:12.100000+00:00"
    # a repeat delivery starts nothing more
    post(abot, payload(alert("PodVolumeAttachStuck", fingerprint="77aa", namespace="shop", pod="db-0"),
                       group='{}:{alertname="PodVolumeAttachStuck"}'))
    assert len(abot.db.runs(limit=5)) == 1


def test_the_system_actor_of_an_alert_can_never_approve(abot: Bot):
    """The attack: a run waiting for approval, approved in the name of an alert's system actor."""
    from bot.engine import commands as c
    from bot.frontends.alerts import system_requester

    post(abot, payload(alert(node="ip-10-0-1-2")))
    [card] = cards(abot)
    abot.click(card, ACTION_ALERT_DRY_RUN, user=ALICE)  # plan only: reaches no approval
    abot.click(card, ACTION_ALERT_RUN, user=ALICE)
    [view] = [v for v in abot.fake.views()]
    abot.submit(view, {bk.param_block_id("name"): {"value": {"type": "plain_text_input",
                                                            "value": "ip-10-0-1-2"}}}, user=ALICE)
    real = next(r for r in abot.db.runs(limit=5) if not abot.db.load(r.run_id).dry_run).run_id
    actor = system_requester({"alertname": "KubeNodeNotReady"}, "5ef77f1f7cbe2a1d")
    out = abot.runner.submit(c.Approve(run_id=real, actor=actor, step="change"))
    assert not out.ok
    assert abot.db.load(real).status == "awaiting_approval"
    refused = [e for e in abot.events(real) if e.type == "command.refused"]
    assert refused and refused[-1].actor == actor
    out = abot.runner.submit(c.Approve(run_id=real, actor=f"slack:{DAVE}", step="change"))
    assert out.ok, out.message


@pytest.mark.postgres
def test_two_replicas_sharing_postgresql_post_one_card_for_a_group_delivered_to_both(
        make_bot: Any, pg_url: str):
    one = make_bot(alerts=ALERTS, texts=TEXTS, db_url=pg_url)
    two = make_bot(alerts=ALERTS, texts=TEXTS, db_url=pg_url)
    a = alert(node="ip-10-0-1-2")
    for bot in (one, two, one, two):  # Alertmanager's own replicas each deliver the group
        assert post(bot, payload(a))[0] == 200
    assert len(cards(one)) == 1
    # resolved at the other replica: the one card is updated, not a second one posted
    post(two, payload(alert(node="ip-10-0-1-2", status="resolved")))
    [card] = cards(one)
    assert card["text"].startswith("All alerts resolved")
    assert len(one.fake.revisions(CHANNEL, card["ts"])) == 2


def test_an_alert_never_auto_runs_a_runbook_with_a_destructive_step(make_bot: Any):
    """The attack: a runbook that changes things, installed with auto_run: true, and its alert."""
    sneaky = NODE_DOWN.replace("name: node-down", "name: sneaky").replace(
        "  triggers:", "  auto_run: true\n  triggers:")
    bot = make_bot(alerts=ALERTS, texts={"sneaky": sneaky})
    status, _ = post(bot, payload(alert(node="ip-10-0-1-2")))
    assert status == 200
    assert bot.db.runs(limit=5) == []  # refused by validation: it answers no alert at all
    assert bot.fake.messages(CHANNEL) == []
    metrics = bot.metrics.exposition().decode()
    assert 'runbook_bot_alerts_total{outcome="auto_run"}' not in metrics


def test_a_double_click_on_dry_run_starts_one_run(abot: Bot):
    post(abot, payload(alert(node="ip-10-0-1-2")))
    [card] = cards(abot)
    abot.click(card, ACTION_ALERT_DRY_RUN, user=ALICE, settle=False)
    abot.click(card, ACTION_ALERT_DRY_RUN, user=ALICE)
    assert len(abot.db.runs(limit=5)) == 1
    assert any("already started" in m.get("text", "") for m in abot.fake.ephemerals(ALICE))


def test_a_fingerprint_repeated_with_other_labels_changes_nothing_and_is_refused(
        abot: Bot, caplog: pytest.LogCaptureFixture):
    """The attack: a real alert's fingerprint, status and startsAt, with the labels of a healthy
    node. It is not a duplicate to count and store: it is refused and logged, and when the card is
    next drawn it still offers the real node."""
    real = alert(node="ip-10-0-1-2.ec2.internal")
    post(abot, payload(real))
    [card] = cards(abot)
    forged = alert(node="ip-10-0-9-9.ec2.internal")  # same fingerprint, status and startsAt
    with caplog.at_level("WARNING", logger="bot.frontends.alerts"):
        status, text = post(abot, payload(forged))
    assert (status, json.loads(text)) == (200, {"conflict": 1})
    [line] = [r for r in caplog.records if "fingerprint" in r.getMessage()]
    assert "ip-10-0-9-9.ec2.internal" in line.getMessage() and "refused" in line.getMessage()
    # a plain repeat (its annotations moved on) is a duplicate, and changes nothing either
    again = alert(node="ip-10-0-1-2.ec2.internal")
    again["annotations"]["summary"] = "Node is still not ready."
    assert json.loads(post(abot, payload(again))[1]) == {"duplicate": 1}
    # another alert joins the group: the card is drawn again from what is stored
    joined = alert(node="ip-10-0-3-4.ec2.internal", fingerprint="aa0c3b9e5f2d1c77")
    post(abot, payload(joined))
    [card] = cards(abot)
    values = [json.loads(el["value"]) for b in card["blocks"] if b.get("type") == "actions"
              for el in b["elements"] if el.get("action_id") == ACTION_ALERT_DRY_RUN]
    assert {v["p"]["name"] for v in values} == {"ip-10-0-1-2.ec2.internal", "ip-10-0-3-4.ec2.internal"}
    shown = "\n".join(texts([card]))
    assert "ip-10-0-9-9" not in shown and "still not ready" not in shown
    metrics = abot.metrics.exposition().decode()
    assert 'runbook_bot_alerts_total{outcome="conflict"} 1.0' in metrics


def test_deeply_nested_json_is_a_400_and_one_log_line(abot: Bot, caplog: pytest.LogCaptureFixture):
    """100,000 levels of JSON with a valid token: refused as malformed, not a 500 and a
    RecursionError traceback."""
    deep = b'{"alerts": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with caplog.at_level("INFO"):
        status, text = post(abot, None, raw=deep)
    assert status == 400 and "nest" in text, text
    logged = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(logged) == 1 and logged[0].exc_info is None, [r.getMessage() for r in logged]
    assert "Traceback" not in caplog.text and "RecursionError" not in caplog.text
    assert 'runbook_bot_alert_requests_total{answer="malformed"} 1.0' in (
        abot.metrics.exposition().decode())
