"""Owner, handover and provenance in Slack, over signed HTTP requests to the app and the fake
Slack Web API: the new owner's Approve click is refused and audited, the card shows owner and
links, and no time reaches Slack as a raw ISO timestamp."""

from __future__ import annotations

import json

from tests.fakes.slack_api import CHANNEL
from tests.frontends.slack.conftest import (
    ALICE,
    BOB,
    CAROL,
    DAVE,
    Bot,
    button_in,
    raw_iso_times,
    texts,
)


def refusals(bot: Bot, run: str) -> list[tuple[str, str]]:
    return [(e.actor, str(e.payload.get("reason"))) for e in bot.events(run)
            if e.type == "command.refused"]


def test_the_new_owner_cannot_approve_by_clicking(bot: Bot) -> None:
    bot.command("run change-thing name=web-1 --incident INC-4471")
    run = bot.run_id()
    card = texts([bot.card()])[0]
    assert f"*Owner*\n<@{ALICE}>" in card and "Incident INC-4471" in card
    # Slack sends a picked @mention as <@U…|name> when the command escapes users
    bot.command(f"handover {run} <@{DAVE}|dave> dave runs the bridge now")
    state = bot.db.load(run)
    assert (state.current_owner, state.requester) == ("slack:" + DAVE, "slack:" + ALICE)
    card = texts([bot.card()])[0]
    assert f"*Owner*\n<@{DAVE}>" in card and f"*Requested by*\n<@{ALICE}>" in card
    assert any(f"Owner is now <@{DAVE}>" in t for t in texts(bot.replies()))
    bot.click(bot.approval("change"), "rb_approve", user=DAVE)  # dave is in the sre group
    assert "owns this run" in bot.fake.ephemerals(DAVE)[-1]["text"]
    assert refusals(bot, run)[-1][0] == "slack:" + DAVE
    assert bot.world.get("web-1") is None
    assert bot.db.load(run).steps["change"].status == "awaiting_approval"
    assert button_in(bot.approval("change"), "rb_approve")  # still open for someone else
    bot.click(bot.approval("change"), "rb_approve", user=BOB)  # bob, on call, is not the owner
    assert bot.world.get("web-1") == "on"
    assert raw_iso_times(bot.fake) == []


def test_only_the_owner_or_requester_hands_over_and_never_to_themselves(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    run = bot.run_id()
    bot.command(f"handover {run} <@{CAROL}>", user=BOB)
    assert "only the run's owner" in bot.fake.ephemerals(BOB)[-1]["text"]
    bot.command(f"handover {run} <@{ALICE}>")
    assert "already owns" in bot.fake.ephemerals(ALICE)[-1]["text"]
    _, body = bot.command(f"handover {run} @dave")  # a name Slack did not turn into a user id
    assert "needs the new owner as a mention" in json.loads(body)["text"]
    assert bot.db.load(run).current_owner == "slack:" + ALICE
    assert [e.type for e in bot.events(run)].count("run.handed_over") == 0


def test_a_suggested_run_shows_what_suggested_it(bot: Bot) -> None:
    from bot.frontends.slack.service import Person

    person = Person(user=ALICE, channel=CHANNEL)
    bot.service.run("change-thing", {"name": "web-1"}, person, trigger_id=None,
                    suggested_by="alert:KubeNodeNotReady/3f9c2a", incident="#inc-web")
    bot.settle()
    card = texts([bot.card()])[0]
    assert "suggested by alert KubeNodeNotReady/3f9c2a" in card and "Incident #inc-web" in card
    run = bot.run_id()
    [linked] = [e.payload for e in bot.events(run) if e.type == "run.linked"]
    assert linked == {"incident": "#inc-web", "suggested_by": "alert:KubeNodeNotReady/3f9c2a"}


def test_a_bad_incident_starts_nothing(bot: Bot) -> None:
    bot.command("run change-thing name=web-1 --incident <!channel>x")
    assert "incident:" in bot.fake.ephemerals(ALICE)[-1]["text"]
    assert bot.db.runs() == []


def test_times_are_slack_dates_and_the_expiry_is_relative(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    ask = texts([bot.approval("change")])[0]
    assert "expires in 30 minutes (at <!date^" in ask and "^{time}|" in ask
    bot.clock.advance(120)
    bot.command("runs", user=BOB)
    assert "expires in 28 minutes" in texts([bot.fake.ephemerals(BOB)[-1]])[0]
    bot.click(bot.approval("change"), "rb_approve", user=BOB)
    decided = "\n".join(texts(bot.replies()))
    assert f"Approved by <@{BOB}> <!date^" in decided and "{date_short_pretty} {time}|" in decided
    assert raw_iso_times(bot.fake) == []


def test_what_slack_escapes_is_read_as_typed() -> None:
    from bot.frontends.slack.slash import parse

    cmd = parse("run change-thing name=<http://ip-10-0-1-2.ec2.internal|ip-10-0-1-2.ec2.internal> "
                "--incident <#C0123ABCD|inc-db>")
    assert cmd.params == {"name": "ip-10-0-1-2.ec2.internal"} and cmd.incident == "#inc-db"
    cmd = parse("run change-thing name=web-1 --incident=<https://acme.pagerduty.com/incidents/Q1>")
    assert cmd.incident == "https://acme.pagerduty.com/incidents/Q1"
    cmd = parse(f"handover rb-7k3qa <@{DAVE}|dave> taking the bridge")
    assert (cmd.to, cmd.reason) == ("slack:" + DAVE, "taking the bridge")


def test_the_links_survive_the_params_form(bot: Bot) -> None:
    from bot.frontends.slack.service import Person

    bot.service.run("change-thing", {}, Person(user=ALICE, channel=CHANNEL),
                    trigger_id=bot.fake.new_trigger_id(ALICE), incident="INC-5",
                    suggested_by="diagnosis:multi-attach/7")
    bot.settle()
    [view] = bot.fake.views()
    assert bot.db.runs() == []
    bot.submit(view, {"param:name": {"value": "web-9"}}, user=ALICE)
    [run] = bot.db.runs()
    assert (run.incident, run.suggested_by) == ("INC-5", "diagnosis:multi-attach/7")
