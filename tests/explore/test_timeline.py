"""Timelines: drawn from a seed the same way every time, saved and loaded unchanged, refused
with the file and the known kinds when a saved one names an unknown event."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.sim.explore.catalogue import KINDS, Event
from bot.sim.explore.timeline import Timeline, draw, load
from bot.sim.sandbox import Sandbox


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    with Sandbox("node-hung", workdir=tmp_path_factory.mktemp("sb")) as sb:
        yield sb


def test_a_seed_draws_the_same_timeline_and_another_seed_another(staged) -> None:
    a = draw(staged, seed=7, rounds=16)
    assert a == draw(staged, seed=7, rounds=16)
    assert a != draw(staged, seed=8, rounds=16)
    assert all(e.kind in KINDS and 0 <= e.round < 16 for e in a)
    assert [e.round for e in a] == sorted(e.round for e in a)


def test_a_timeline_saves_and_loads_unchanged_and_reads_as_sentences(tmp_path: Path) -> None:
    tl = Timeline("node-dead-ngns", "node-hung", {"node": "n1"}, seed=3,
                  events=(Event(2, "kubelet-sick", "n1", "cni"), Event(4, "crash")),
                  invariant="hung", note="why")
    tl.save(tmp_path / "t.yaml")
    assert load(tmp_path / "t.yaml") == tl
    words = tl.words()
    assert "round   2: the kubelet of n1 stays alive but posts Ready=False (cni)" in words
    assert "the worker is killed between two ticks" in words


def test_a_saved_timeline_with_an_unknown_event_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "t.yaml").write_text("runbook: r\nscenario: s\nevents:\n- {round: 1, kind: meteor}\n")
    with pytest.raises(ValueError, match=r"t.yaml: events\[0\].kind 'meteor' is not a world "
                                         r"event; known: kubelet-recovers"):
        load(tmp_path / "t.yaml")


def test_someone_cannot_start_a_machine_that_is_still_stopping(tmp_path: Path) -> None:
    # EC2 refuses StartInstances on a stopping instance (IncorrectInstanceState): the world's
    # start of one still stopping changes nothing; once stopped, it starts on a new boot
    from bot.sim.explore.catalogue import apply

    with Sandbox("node-partitioned", workdir=tmp_path, account="210987654321") as sb:  # beside `staged`
        node, iid = sb.facts["node"], sb.facts["instance_id"]
        sb.ec2_client(as_bot=True).stop_instances(InstanceIds=[iid], Force=True)
        sb.advance(1)
        assert sb.ec2.instance_state(iid) == "stopping"
        boot = sb.ec2.boot_id(iid)
        apply(sb, Event(round=0, kind="instance-started", target=node))
        assert (sb.ec2.instance_state(iid), sb.ec2.boot_id(iid)) == ("stopping", boot)
        sb.advance(120)
        assert sb.ec2.instance_state(iid) == "stopped"
        apply(sb, Event(round=0, kind="instance-started", target=node))
        assert sb.ec2.instance_state(iid) == "running" and sb.ec2.boot_id(iid) != boot
