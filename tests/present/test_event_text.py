"""Every event type has its text, and the text is the one the front-ends show."""

from __future__ import annotations

import json

from bot.engine import events as ev
from bot.engine.events import EventType
from bot.present.events import TEXTS, chat_text, describe, live_lines
from bot.store.audit import Event
from tests.present.test_event_golden import GOLDEN, STORIES


def _event(data: ev.EventData) -> Event:
    return Event(seq=1, ts="2026-01-01T00:00:00+00:00", actor="bob", type=data.type.value,
                 payload=data.payload, prev_hash="", hash="")


def test_every_event_type_has_a_timeline_text():
    assert set(TEXTS) == set(EventType)


def test_the_golden_runs_record_exactly_the_vocabulary():
    """Every type the engine produced in the golden runs is in the enum, and every member of the
    enum is produced by one of them."""
    seen = {e["type"] for story in STORIES
            for e in json.loads((GOLDEN / f"{story}.json").read_text(encoding="utf-8"))["events"]}
    assert seen == {t.value for t in EventType}


def test_an_unknown_type_is_shown_by_its_fields_and_an_unknown_command_as_a_command():
    unknown = Event(seq=1, ts="", actor="x", type="node.rebooted", payload={"node": "n1", "n": 2},
                    prev_hash="", hash="")
    assert describe(unknown) == 'node=n1, n=2'
    later = Event(seq=1, ts="", actor="x", type="command.snooze_all",
                  payload={"step": "a", "minutes": 5}, prev_hash="", hash="")
    assert describe(later) == "snooze-all (minutes=5)"
    assert live_lines(None, unknown) == [] and chat_text(unknown) is None  # type: ignore[arg-type]


def test_a_retry_reply_in_chat_is_inert_mrkdwn():
    text = chat_text(_event(ev.step_retrying("<@U1>", phase="apply", error="<!here> busy",
                                             attempt=1, delay=4.6, calls=[])))
    assert text == "↻ *&lt;@U1&gt;* failed and is retried in 5 s: &lt;!here&gt; busy"
    assert chat_text(_event(ev.step_failed("a", error="x"))) is None
