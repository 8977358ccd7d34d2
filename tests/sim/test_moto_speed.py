"""moto answers the same with its memos installed (``bot.sim.moto_speed``) as shipped: byte for
byte, for every read the product and the sandbox make, and for an error."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.sim import moto_speed
from bot.sim.ec2_moto import MotoQuery
from bot.sim.rehearsal import Rehearsal
from tests.sim.kit import Pool

REQUEST_ID = re.compile(rb"<(requestId|RequestID)>[^<]*</(requestId|RequestID)>")


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rehearsal]:
    Pool.close_all()  # the process's one sandbox is this module's: the pool's is stopped first
    r = Rehearsal("node-hung", workdir=Path(tmp_path_factory.mktemp("moto-speed")),
                  audit_key="k", transport="inprocess")
    r.start()
    try:
        yield r
    finally:
        r.stop()


def _reads(r: Rehearsal) -> list[tuple[str, dict[str, str]]]:
    iid = r.facts["instance_id"]
    vol = r.facts["volume_id"]
    return [
        ("DescribeInstances", {}),
        ("DescribeInstances", {"InstanceId.1": iid}),
        ("DescribeInstances", {"Filter.1.Name": "instance-state-name", "Filter.1.Value.1": "running"}),
        ("DescribeInstanceStatus", {"IncludeAllInstances": "true"}),
        ("DescribeVolumes", {}),
        ("DescribeVolumes", {"VolumeId.1": vol}),
        ("DescribeVolumes", {"Filter.1.Name": "attachment.instance-id", "Filter.1.Value.1": iid}),
        ("DescribeInstanceTypes", {"InstanceType.1": "m5.large", "InstanceType.2": "i3.large"}),
        ("DescribeSnapshots", {"OwnerId.1": "self"}),
        ("DescribeTags", {"Filter.1.Name": "resource-id", "Filter.1.Value.1": iid}),
        ("DescribeInstances", {"InstanceId.1": "i-0000000000000dead"}),  # an error
        ("DescribeVolumes", {"VolumeId.1": "vol-not-a-volume"}),  # a malformed id
    ]


def test_moto_with_its_memos_answers_byte_for_byte_as_shipped(staged: Rehearsal) -> None:
    query = MotoQuery(staged.sandbox.ec2)
    reads = _reads(staged)
    moto_speed.install()
    fast = [REQUEST_ID.sub(b"", query.raw(a, p)) for a, p in reads]
    moto_speed.uninstall()
    try:
        shipped = [REQUEST_ID.sub(b"", query.raw(a, p)) for a, p in reads]
    finally:
        moto_speed.install()
    assert len(fast[0]) > 2000 and b"<instanceId>" in fast[0]  # a whole reservation list
    assert b"<Errors>" in fast[-2] and b"<Errors>" in fast[-1]
    for (action, params), mine, theirs in zip(reads, fast, shipped, strict=True):
        assert mine == theirs, (action, params)
