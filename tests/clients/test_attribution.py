"""A run's STS session stays within STS's limits whatever people are called and however many."""

from __future__ import annotations

import re

from bot.clients.attribution import MAX_TAGS, TAG_MORE, Attribution

TAG = re.compile(r"^[\w\s.:/=+\-@]*$")  # letters, digits, spaces and _ . : / = + - @
IDENTITY = re.compile(r"^[\w+=,.@-]{2,64}$", re.ASCII)


def test_the_run_id_is_the_source_identity_and_names_the_session():
    who = Attribution.of(run_id="rb-7k3q2", requester="alice", approvers=["carol", "bob", "bob"])
    assert (who.source_identity, who.session_name) == ("rb-7k3q2", "runbook-bot-rb-7k3q2")
    assert who.approvers == ("bob", "carol")
    assert who.tags() == [{"Key": "runbook-bot-run", "Value": "rb-7k3q2"},
                          {"Key": "runbook-bot-requester", "Value": "alice"},
                          {"Key": "runbook-bot-approver-1", "Value": "bob"},
                          {"Key": "runbook-bot-approver-2", "Value": "carol"}]


def test_names_sts_refuses_are_made_acceptable_and_cut_to_length():
    who = Attribution.of(run_id="aws:" + "x" * 80, requester="O'Brien <ob@example.com> 🚒",
                         approvers=["ü" * 300])
    assert IDENTITY.match(who.source_identity) and IDENTITY.match(who.session_name)
    assert not who.source_identity.startswith("aws:")
    for tag in who.tags():
        assert TAG.match(tag["Key"]) and 1 <= len(tag["Key"]) <= 128
        assert TAG.match(tag["Value"]) and len(tag["Value"]) <= 256
    assert who.tags()[1]["Value"] == "O_Brien _ob@example.com_ _"


def test_more_approvers_than_tags_are_counted_not_dropped_silently():
    who = Attribution.of(run_id="rb-7k3q2", requester="alice",
                         approvers=[f"person{n:03}" for n in range(60)])
    tags = who.tags()
    assert len(tags) == MAX_TAGS
    assert tags[-1] == {"Key": TAG_MORE, "Value": str(60 - (MAX_TAGS - 3))}
