"""The node watcher's decisions as data, and its loop and stream on fakes (no sandbox): who is a
suspect and since when, what a storm is, a 410 in the middle of a watch stream, and a loop that
stops when told."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from bot.clients.kube_watch import EXPIRED, follow
from bot.engine.node_watch import (
    NodeNotice,
    Suspect,
    Thresholds,
    Triaged,
    storm_zones,
    suggestion,
    suspects,
)
from bot.engine.ports import ManualClock
from bot.errors import RetryableError
from bot.runtime.node_watcher import NodeWatcher

T0 = datetime(2026, 12, 3, 3, 0, tzinfo=UTC)
TH = Thresholds(grace=50.0, detect_after=60.0, max_out_of_service=3)


def ts(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node(name: str, ready: str = "True", zone: str = "ap-southeast-1a",
         since: datetime = T0) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "1",
                         "labels": {"topology.kubernetes.io/zone": zone}},
            "spec": {"providerID": f"aws:///{zone}/i-0123456789abcdef0"},
            "status": {"conditions": [{"type": "Ready", "status": ready,
                                       "lastTransitionTime": ts(since)}]}}


def lease(name: str, renewed: datetime) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "1"}, "spec": {"renewTime": ts(renewed)}}


def test_a_lease_is_a_suspect_after_detect_after_and_went_stale_a_grace_after_its_renewal():
    nodes = {"a": node("a"), "b": node("b"), "c": node("c", "False", since=T0 + timedelta(seconds=5))}
    leases = {"a": lease("a", T0), "b": lease("b", T0 + timedelta(seconds=55)),
              "c": lease("c", T0 + timedelta(seconds=58))}
    now = T0 + timedelta(seconds=60)
    found = {s.node: s.detected_at for s in suspects(nodes, leases, now, TH)}
    # a: silent 60 s, stale since renewal + 50 s; b: fresh; c: alive, Ready=False since 5 s
    assert found == {"a": T0 + timedelta(seconds=50), "c": T0 + timedelta(seconds=5)}
    assert suspects(nodes, leases, now - timedelta(seconds=1), TH)[0].node == "c"  # a: not yet


def test_a_not_ready_node_whose_lease_was_not_seen_yet_is_no_suspect():
    """Without its Lease a live kubelet's silence cannot be told from a dead one's: triaged as
    silent, a node only posting Ready=False (its kubelet alive) would be offered the fence."""
    nodes = {"c": node("c", "False", since=T0)}
    now = T0 + timedelta(minutes=3)  # Ready=False for 3 minutes: normal for a sick kubelet
    assert suspects(nodes, {}, now, TH) == []
    assert [s.node for s in suspects(nodes, {"c": lease("c", now)}, now, TH)] == ["c"]  # sick


def test_a_storm_is_more_than_max_out_of_service_or_most_of_a_zone_never_one_node():
    zone = {f"n{i}": node(f"n{i}") for i in range(10)}
    other = {f"m{i}": node(f"m{i}", zone="ap-southeast-1b") for i in range(3)}
    nodes = {**zone, **other}
    zones = {n: str(o["metadata"]["labels"]["topology.kubernetes.io/zone"]) for n, o in nodes.items()}

    def down(names: Sequence[str]) -> list[Triaged]:
        return [Triaged(n, "dead", "") for n in names]

    assert set(storm_zones(down([f"n{i}" for i in range(4)]), zones, nodes, TH)) == {"ap-southeast-1a"}
    assert storm_zones(down(["n0", "n1", "n2"]), zones, nodes, TH) == {}
    assert set(storm_zones(down(["m0", "m1"]), zones, nodes, TH)) == {"ap-southeast-1b"}
    assert storm_zones(down(["m0"]), zones, nodes, TH) == {}


def test_a_sick_node_is_offered_the_triage_and_never_the_fence():
    s = suggestion("prod", "sick", "n1")
    assert s is not None and s.runbook == "node-not-ready-triage"
    for verdict in ("dead", "hung"):
        fence = suggestion("prod", verdict, "n1")
        assert fence is not None and fence.runbook == "node-dead-ngns"
    assert suggestion("prod", "recovered", "n1") is None


class Chunks:
    """A watch response: JSON lines split across chunks anywhere."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.raw = b"".join(json.dumps(e).encode() + b"\n" for e in events)
        self.headers: dict[str, str] = {}
        self.released = False

    def stream(self, decode_content: bool = True) -> Iterator[bytes]:
        for i in range(0, len(self.raw), 7):
            yield self.raw[i:i + 7]

    def release_conn(self) -> None:
        self.released = True


def test_a_410_error_event_in_the_middle_of_a_watch_asks_for_a_relist():
    resp = Chunks([{"type": "MODIFIED", "object": node("a")},
                   {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}},
                   {"type": "MODIFIED", "object": node("b")}])
    records: list[tuple[str, str]] = []
    got = list(follow(lambda **kw: resp, operation="list_node", resource_version="7", timeout=5,
                      page_size=500, record=lambda o, out, h: records.append((o, out)),
                      translate=lambda e, operation: e))
    assert [e["type"] for e in got] == ["MODIFIED", EXPIRED]
    assert records == [("watch_node", "ok")] and resp.released


def test_an_expired_version_on_the_request_itself_asks_for_a_relist():
    def send(**kw: Any) -> Any:
        raise RetryableError("gone", service="kubernetes", operation="list_node", code="Expired")

    got = list(follow(send, operation="list_node", resource_version="7", timeout=5, page_size=500,
                      record=lambda *a: None, translate=lambda e, operation: e))
    assert [e["type"] for e in got] == [EXPIRED]


def test_the_loop_runs_passes_until_stopped_and_never_sleeps_past_the_stop():
    passes: list[str] = []
    first = threading.Event()

    def watch(*, resource_version: str, timeout: int) -> list[dict[str, Any]]:
        passes.append(resource_version)
        first.set()
        return [] if resource_version else [
            {"type": "LIST", "items": [], "object": {"metadata": {"resourceVersion": "5"}}}]

    def triage(cluster: str, found: Sequence[Suspect], now: datetime) -> list[Triaged]:
        return []

    class Claims:
        def claim(self, key: str, *, now: float) -> bool:
            return True

    seen: list[NodeNotice] = []
    w = NodeWatcher("prod", nodes=watch, leases=watch, triage=triage, claims=Claims(),
                    on_notice=seen.append, clock=ManualClock(T0), interval=3600.0)
    w.start()
    assert first.wait(5)
    w.stop(timeout=5)
    assert w._thread is not None and not w._thread.is_alive()
    assert w.stats.passes == 1 and passes == ["", ""] and seen == []
