import dataclasses

import pytest

from bot.store.audit import REDACTED, Event, Redactor, head_mac, make_event, verify_events

RUN = "rb-7k3q9"


def chain(n=6, key=None):
    events, prev = [], None
    for i in range(n):
        prev = make_event(run_id=RUN, prev=prev, ts=f"2026-01-01T00:00:{i:02d}Z", actor="term:alice",
                          type_="step.planned", payload={"i": i}, key=key, redact=Redactor())
        events.append(prev)
    return events


def verify(events, head, key=None):
    mac = head_mac(run_id=RUN, seq=head.seq, hash_=head.hash, key=key)
    return verify_events(run_id=RUN, events=events, head_seq=head.seq, head_hash=head.hash, key=key,
                         head_mac_=mac)


@pytest.mark.parametrize("key", [None, b"secret"])
def test_an_untouched_chain_verifies(key):
    events = chain(key=key)
    v = verify(events, events[-1], key)
    assert v.ok and v.count == 6


def test_an_edited_payload_is_named_by_its_seq():
    events = chain()
    events[2] = dataclasses.replace(events[2], payload={"i": 99})
    assert verify(events, events[-1]).first_bad_seq == 3


def test_a_deleted_event_is_named_by_the_missing_seq():
    events = chain()
    head = events[-1]
    del events[3]
    assert verify(events, head).first_bad_seq == 4


def test_an_inserted_event_is_detected_where_it_was_inserted():
    events = chain()
    forged = Event(seq=3, ts="x", actor="term:mallory", type="approval.granted", payload={},
                   prev_hash=events[1].hash, hash="f" * 64)
    events.insert(2, forged)
    assert verify(events, events[-1]).first_bad_seq == 3


def test_reordered_events_are_detected_at_the_first_swap():
    events = chain()
    events[1], events[2] = events[2], events[1]
    assert verify(events, events[-1]).first_bad_seq == 2


def test_a_truncated_chain_is_detected_against_its_stored_head():
    events = chain()
    head = events[-1]
    v = verify(events[:4], head)
    assert not v.ok and v.first_bad_seq == 5


def test_without_the_key_an_hmac_chain_does_not_verify_and_says_which_key_it_needs():
    events = chain(key=b"secret")
    v = verify(events, events[-1], None)
    assert not v.ok and v.kind == "key" and "you gave none" in v.reason


def test_tokens_are_redacted_before_hashing():
    ev = make_event(run_id=RUN, prev=None, ts="t", actor="a", type_="run.created",
                    payload={"note": "token xoxb-1234-abcdef and AKIAABCDEFGHIJKLMNOP",
                             "h": ["Bearer abc.def.ghijkl"], "x": "ticket-42"},
                    key=None, redact=Redactor(["ticket-\\d+"]))
    text = str(ev.payload)
    assert "xoxb" not in text and "AKIA" not in text and "abc.def" not in text and "ticket" not in text
    assert text.count(REDACTED) == 4
    assert verify_events(run_id=RUN, events=[ev], head_seq=1, head_hash=ev.hash, key=None).ok


def test_an_exported_event_list_round_trips_and_verifies():
    events = [Event.from_dict(e.to_dict()) for e in chain()]
    assert verify(events, events[-1]).ok
