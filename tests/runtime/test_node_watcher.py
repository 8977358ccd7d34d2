"""The node watcher on the sandbox's simulated clock: a dead node is noticed within ``detect_after``
of its Lease going stale (no alert needed), a sick one is never offered the fence, a node that
comes back is ``recovered``, twenty nodes of one zone are one notice, two replicas notice once,
a 410 Gone relists and misses nothing, and what it reads is bounded.

One sandbox serves the module (starting one costs seconds); each test builds its own watchers and
database, and picks its own nodes."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

pytest.importorskip("moto")

from bot.clients.ec2 import Ec2Client
from bot.clients.kube import KubeClient
from bot.diagnose.node_watch import triage_with
from bot.engine.node_watch import NodeNotice, Thresholds
from bot.engine.plan import ApiCall
from bot.engine.ports import ManualClock
from bot.runtime.node_watcher import NodeWatcher
from bot.sim.sandbox import BOT_CONTEXT, Sandbox
from bot.sim.staging import add_nodes
from bot.store.db import Database
from bot.store.node_notices import NoticeLog

GRACE, DETECT = 50.0, 60.0
READS = {"list_node", "list_namespaced_lease", "watch_node", "watch_namespaced_lease",
         "DescribeInstanceStatus"}


@pytest.fixture(scope="module")
def sb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    with Sandbox("node-dead", clock=ManualClock(), transport="inprocess",
                 workdir=tmp_path_factory.mktemp("watcher")) as sb:
        yield sb


class Tape(list[ApiCall]):
    """The clients' request records, which the watcher clears every pass, kept by name."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def append(self, call: ApiCall) -> None:
        self.ops.append(call.operation)
        super().append(call)


class Replica:
    """One watcher as a replica runs it, with what it handed on and every request it made."""

    def __init__(self, sb: Sandbox, db: Database) -> None:
        self.calls = Tape()
        self.seen: list[NodeNotice] = []
        kube = KubeClient.from_config(kubeconfig=str(sb.kubeconfig_path), context=BOT_CONTEXT,
                                      pool=sb.kube_transport()).bound(self.calls, read_only=True)
        ec2 = Ec2Client(client=sb.ec2_client(as_bot=True)).bound(self.calls, read_only=True)
        self.watcher = NodeWatcher(
            "sandbox", nodes=kube.watch_nodes, leases=kube.watch_node_leases,
            triage=triage_with(ec2, grace=GRACE), claims=NoticeLog(db.engine),
            on_notice=self.seen.append, clock=sb.clock,
            thresholds=Thresholds(grace=GRACE, detect_after=DETECT, max_out_of_service=3),
            watch_timeout=0, calls=self.calls)
        self.ops = self.calls.ops

    def step(self) -> list[NodeNotice]:
        return self.watcher.step()

    def about(self, node: str) -> list[NodeNotice]:
        return [n for n in self.seen if n.node == node]


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    db = Database(f"sqlite:///{tmp_path / 'state.db'}")
    yield db
    db.close()


def run(sb: Sandbox, replicas: list[Replica], seconds: float, step: float = 5.0) -> None:
    """Advance the sandbox clock, each replica taking a pass every ``step`` seconds."""
    for _ in range(int(seconds / step)):
        sb.advance(step)
        for r in replicas:
            r.step()


def healthy(sb: Sandbox, zone: str) -> list[str]:
    return sorted(n["metadata"]["name"] for n in sb.list("Node")
                  if n["metadata"]["labels"].get("topology.kubernetes.io/zone") == zone
                  and any(c["type"] == "Ready" and c["status"] == "True"
                          for c in n["status"]["conditions"]))


def test_a_killed_node_is_noticed_dead_within_detect_after_of_its_lease_going_stale_then_recovered(
        sb: Sandbox, db: Database) -> None:
    r = Replica(sb, db)
    r.step()
    victim = healthy(sb, "ap-southeast-1b")[0]
    sb.break_node(victim)  # the instance stops: no alert, no person, only the Lease goes quiet
    run(sb, [r], 120)
    [dead] = r.about(victim)
    lease = sb.get("Lease", "kube-node-lease", victim)
    renewed = dead.detected_at - timedelta(seconds=GRACE)
    assert lease["spec"]["renewTime"].startswith(renewed.strftime("%Y-%m-%dT%H:%M:%S"))
    assert dead.verdict == "dead" and dead.zone == "ap-southeast-1b"
    assert dead.noticed_at - dead.detected_at <= timedelta(seconds=DETECT)
    assert dead.suggestion is not None and dead.suggestion.runbook == "node-dead-ngns"
    assert dict(dead.suggestion.params) == {"cluster": "sandbox", "node": victim}
    assert "stopped" in dead.reason
    assert set(r.ops) <= READS  # it only reads
    sb.repair_node(victim)
    run(sb, [r], 30)
    [_, back] = r.about(victim)
    assert (back.verdict, back.detected_at, back.suggestion) == ("recovered", dead.detected_at, None)


def test_a_sick_node_with_a_live_kubelet_is_sick_never_offered_the_fence(
        sb: Sandbox, db: Database) -> None:
    r = Replica(sb, db)
    r.step()  # notices the scenario's dead node: its own EC2 read
    before = len(r.ops)
    node = healthy(sb, "ap-southeast-1c")[0]
    sb.sicken_kubelet(node, "cni")
    run(sb, [r], 15)
    [sick] = r.about(node)
    assert sick.verdict == "sick" and "ALIVE" in sick.reason and "VPC CNI" in sick.reason
    assert sick.suggestion is not None and sick.suggestion.runbook == "node-not-ready-triage"
    assert "DescribeInstanceStatus" not in r.ops[before:]  # a live kubelet needs no EC2 read
    sb.sicken_kubelet(node, None)
    run(sb, [r], 15)
    assert [n.verdict for n in r.about(node)] == ["sick", "recovered"]


def test_a_hung_machine_is_hung_then_dead_once_its_status_checks_fail(
        sb: Sandbox, db: Database) -> None:
    r = Replica(sb, db)
    r.step()
    victim = healthy(sb, "ap-southeast-1a")[0]
    sb.break_node(victim, hung=True)  # the instance runs on; its kubelet is silent
    run(sb, [r], 90)
    [hung] = r.about(victim)
    assert hung.verdict == "hung" and "does not confirm" in hung.reason
    assert hung.suggestion is not None and hung.suggestion.runbook == "node-dead-ngns"
    run(sb, [r], 300)  # EC2's status checks fail within minutes: triaged again, now dead
    assert [n.verdict for n in r.about(victim)] == ["hung", "dead"]
    assert r.watcher.stats.triages <= 2 + 300 / DETECT + 1  # again every detect_after, not per pass
    sb.recover_guest(victim)
    run(sb, [r], 30)
    assert [n.verdict for n in r.about(victim)] == ["hung", "dead", "recovered"]


def test_two_replicas_over_one_store_hand_each_notice_on_once(sb: Sandbox, db: Database) -> None:
    a, b = Replica(sb, db), Replica(sb, db)
    a.step(), b.step()
    victim = healthy(sb, "ap-southeast-1a")[0]
    sb.break_node(victim)
    run(sb, [a, b], 120)
    both = a.about(victim) + b.about(victim)
    assert [n.verdict for n in both] == ["dead"]
    assert a.watcher.stats.duplicates + b.watcher.stats.duplicates >= 1
    sb.repair_node(victim)
    run(sb, [a, b], 30)


def test_twenty_nodes_of_one_zone_are_one_zone_notice(sb: Sandbox, db: Database) -> None:
    names = add_nodes(sb, "ap-southeast-1c", 20)
    sb.settle()
    r = Replica(sb, db)
    run(sb, [r], 15)
    for name in names:
        sb.ec2.set_state(sb._instance(name), "stopped", reason_code="Server.InternalError",
                         reason_message="Server.InternalError: Internal error on the host")
    sb.settle()
    run(sb, [r], 120)
    mine = [n for n in r.seen if set(n.nodes) & set(names) or n.node in names]
    [zone] = mine
    assert zone.verdict == "zone" and zone.zone == "ap-southeast-1c" and set(zone.nodes) >= set(names)
    assert zone.suggestion is not None and zone.suggestion.runbook == "zone-outage-ngns"
    assert dict(zone.suggestion.params) == {"cluster": "sandbox", "zone": "ap-southeast-1c"}
    # bounded reads: one EC2 read per pass with suspects at most, watches never a list per node
    assert r.ops.count("DescribeInstanceStatus") <= r.watcher.stats.triages <= 3
    assert r.ops.count("list_node") == 1 and r.ops.count("list_namespaced_lease") == 1
    assert r.watcher.stats.requests <= 2 * r.watcher.stats.passes + r.watcher.stats.triages + 2
    # the zone comes back: one notice for the zone (its one card is edited), none per node
    for name in names:
        sb.repair_node(name)
    before = len(r.seen)
    run(sb, [r], 60)
    back = [n for n in r.seen[before:] if set(n.nodes) & set(names) or n.node in names
            or n.zone == "ap-southeast-1c"]
    [zone_back] = back
    assert (zone_back.verdict, zone_back.node, zone_back.zone) == ("recovered", "", "ap-southeast-1c")
    assert set(zone_back.nodes) == set(names) and zone_back.detected_at == zone.detected_at


def test_a_watch_older_than_the_kept_history_relists_and_misses_nothing(
        sb: Sandbox, db: Database) -> None:
    r = Replica(sb, db)
    r.step()
    victim = healthy(sb, "ap-southeast-1b")[0]
    sb.advance(400)  # past the 5-minute compaction: the next watch from its version is 410 Gone
    sb.break_node(victim)
    sb.advance(90)
    r.step()
    assert r.watcher.stats.relists == 2  # both watches expired, both listed again
    assert [n.verdict for n in r.about(victim)] == ["dead"]
    assert r.ops.count("list_node") == 2 and r.ops.count("list_namespaced_lease") == 2
    sb.repair_node(victim)
    sb.advance(30)
