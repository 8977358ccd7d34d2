"""Mentions and links from the world never become active in anything the bot posts to Slack.

A hostile string goes in everywhere the world reaches the bot: a runbook's title, an alert's
labels and annotations (the ``/alertmanager`` webhook), the params they fill in the form the
alert's Run button opens, the params of a slash command, a reject reason typed into the reject form,
handover and break-glass reasons typed after ``/runbook``. Afterwards no message, edit, ephemeral
answer, response_url answer, modal or upload comment the bot sent (blocks and ``text``
fallbacks alike) and no answer to a command holds the sequence active: Slack would notify the
channel, ping a person or draw a disguised link.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from typing import Any

import pytest

from bot.config import AlertsConfig
from bot.frontends.slack.alert_cards import ACTION_ALERT_RUN
from bot.frontends.slack.slash import unescaped
from bot.present import blockkit as bk
from tests.fakes.engine_harness import runbook
from tests.fakes.slack_api import CHANNEL
from tests.frontends.slack.conftest import ALICE, BOB, CAROL, DAVE, Bot
from tests.frontends.slack.test_alerts_in_slack import TOKEN, payload, post

# hostile strings, each with the sequences in it that are active wherever they appear unescaped
HOSTILE = {
    "broadcasts": ("<!channel> <!here> <!everyone> <!subteam^S0EVIL0001>",
                   ("<!channel>", "<!here>", "<!everyone>", "<!subteam^S0EVIL0001>")),
    "people and channels": ("<@U0EVIL0001> <@W0EVIL0002|boss> <#C0EVIL0001>",
                            ("<@U0EVIL0001>", "<@W0EVIL0002", "<#C0EVIL0001>")),
    "links": ("<http://evil.example/x|the runbook> <https://evil.example> <mailto:a@evil.example|help>",
              ("<http://evil.example/x", "<https://evil.example", "<mailto:a@evil.example")),
}

# what Slack does not draw as mrkdwn: plain_text is drawn literally, the rest is data
NOT_DRAWN = ("value", "private_metadata", "initial_value", "action_id", "block_id", "callback_id",
             "url", "channel", "ts", "thread_ts", "trigger_id", "view_id", "user", "files",
             "filename", "content", "response_type", "replace_original")
SENT = ("chat.postMessage", "chat.update", "chat.postEphemeral", "response_url", "views.open",
        "views.update", "views.push", "files.uploadV2", "files.completeUploadExternal")


def _drawn(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        if value.get("type") in ("plain_text", "plain_text_input"):
            return
        for k, v in value.items():
            if k not in NOT_DRAWN:
                yield from _drawn(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _drawn(v)


def _book(hostile: str) -> str:
    text = runbook("hostile", """
- id: change
  title: "Set {{ params.name }} to {{ params.value }}"
  action: fake.set
  with: {name: "{{ params.name }}", value: "{{ params.value }}"}
""", params="""
name: {type: string, required: true}
value: {type: string, default: "on"}
""", approvals="""
groups: [sre]
""")
    return text.replace("title: Test runbook hostile", f"title: {json.dumps(f'Fix {hostile} now')}"
                        ).replace("  steps:", f"""  triggers:
    - alertname: {json.dumps(f'NodeBad{hostile}')}
      params: {{name: "{{{{ labels.node }}}}", value: "{{{{ annotations.summary }}}}"}}
  steps:""")


def _alert(hostile: str) -> dict[str, Any]:
    labels = {"alertname": f"NodeBad{hostile}", "severity": hostile, "node": f"n1{hostile}",
              "namespace": f"ns{hostile}", "pod": f"pod{hostile}", "zone": hostile}
    return {"status": "firing", "labels": labels,
            "annotations": {"summary": f"down {hostile}", "description": f"why {hostile}"},
            "startsAt": "2026-12-03T03:01:12.1Z", "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus:9090/graph", "fingerprint": "5ef77f1f7cbe2a1d"}


def _initial(view: dict[str, Any], param: str) -> str:
    [block] = [b for b in view["blocks"] if b.get("block_id") == bk.param_block_id(param)]
    return str(block["element"].get("initial_value", ""))


@pytest.mark.parametrize("kind", HOSTILE)
def test_no_mention_or_link_from_the_world_is_active_in_anything_the_bot_posts(
        make_bot: Any, kind: str) -> None:
    hostile, actives = HOSTILE[kind]
    bot: Bot = make_bot(texts={"hostile": _book(hostile)},
                        alerts=AlertsConfig(bearer_tokens=(TOKEN,), channel=CHANNEL))
    answers = [bot.command("list", settle=False)[1], bot.command("show hostile", settle=False)[1]]
    # an alert: its card, then a run from the params form its Run button opens, as the alert's
    # labels and annotations filled it
    assert post(bot, payload(_alert(hostile), group="{}:{alertname=\"x\"}"))[0] == 200
    [card] = [m for m in bot.fake.messages(CHANNEL) if "firing" in m.get("text", "")]
    bot.click(card, ACTION_ALERT_RUN, user=ALICE)
    [form] = bot.fake.views()
    filled = {p: _initial(form, p) for p in ("name", "value")}
    assert filled == {"name": f"n1{hostile}", "value": f"down {hostile}"}
    bot.submit(form, {bk.param_block_id(p): {"value": v} for p, v in filled.items()}, user=ALICE)
    [run] = [r.run_id for r in bot.db.runs(limit=5)]
    # the reject form, with a reason typed into it
    [ask] = [m for m in bot.replies_everywhere()
             if any(b.get("block_id") == "decide:change" for b in m.get("blocks", []))]
    bot.click(ask, "rb_reject", user=BOB)
    reject_form = bot.fake.views()[-1]
    bot.submit(reject_form, {"reason": {"value": f"no, {hostile} says so"}}, user=BOB)
    assert bot.db.load(run).status == "failed"
    # a blocked run started by a command: handed over, then glass broken by two, with reasons
    bot.world.lock(unescaped(f"locked{hostile}"))  # as Slack sends it, and the bot reads it
    before = {r.run_id for r in bot.db.runs(limit=10)}
    answers.append(bot.command(f"run hostile {shlex.quote(f'name=locked{hostile}')} "
                               f"{shlex.quote(f'value=x{hostile}')}")[1])
    [blocked] = {r.run_id for r in bot.db.runs(limit=10)} - before
    answers += [bot.command(f"handover {blocked} <@{CAROL}> over to you {hostile}")[1],
                bot.command(f"break-glass {blocked} the lock is stale {hostile}", user=BOB)[1],
                bot.command(f"break-glass {blocked} its holder {hostile} left", user=DAVE)[1],
                *(bot.command(typed, settle=False)[1]
                  for typed in (f"status {blocked}", "runs", f"export {run}"))]
    bot.settle()
    assert bot.db.load(blocked).status == "succeeded"
    drawn = [(c.method, s) for c in bot.fake.calls() if c.method in SENT
             for key, v in c.params.items() if key not in NOT_DRAWN for s in _drawn(v)]
    drawn += [("answer", s) for a in answers if a.startswith(b"{") for s in _drawn(json.loads(a))]
    shown = "\n".join(s for _, s in drawn)
    inert = bk.esc(hostile)
    for source in (f"Fix {inert} now", f"NodeBad{inert}", f"down {inert}", f"ns{inert}",
                   f"Set n1{inert} to down {inert}", f"no, {inert} says so"):
        assert source in shown, f"{source} never reached Slack"
    leaks = [(method, s[:300]) for method, s in drawn for active in actives if active in s]
    assert not leaks, leaks[:5]
