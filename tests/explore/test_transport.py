"""The explorer's fast path gives the results of the real one: a timeline played in a fork of a
staged world over the in-process transport ends as it does staged afresh and played over HTTP
(same status, findings, step outcomes, rounds and trace), and the transport answers the product's
clients as the HTTP servers do, watches included."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from bot.clients.kube import KubeClient
from bot.errors import PermanentError
from bot.sim.explore import fork
from bot.sim.explore.driver import Played
from bot.sim.explore.search import explore
from bot.sim.explore.timeline import Timeline
from bot.sim.rehearsal import Rehearsal

NODE = "ip-10-0-1-23.ap-southeast-1.compute.internal"
BASE = Timeline("node-dead-ngns", "node-hung", {"cluster": "sandbox", "node": NODE})

needs_fork = pytest.mark.skipif(not fork.CAN_FORK, reason="os.fork is not available")


@needs_fork
@pytest.mark.slow
def test_timelines_played_in_forks_in_process_end_as_staged_afresh_over_http() -> None:
    # seed 3 meets EC2 and API throttling (botocore's backoff, on the sandbox clock) and a worker
    # killed between ticks; seed 5 ends failed after three crashes and a rejection
    with fork.Stage(BASE, warm=False) as stage:
        for seed in (3, 5):
            tl = replace(BASE, seed=seed)
            fast = stage.play(tl, draw_events=True)
            http = stage.play(tl, draw_events=True, transport="http", afresh=True)
            assert fast.timeline.events, "the timeline drew no event"
            assert fast.differences(http) == [], "\n".join([tl.words(), *fast.trace])
        assert stage.forks == 4


@needs_fork
@pytest.mark.slow
def test_a_staged_world_served_over_http_in_a_fork_plays_as_in_process() -> None:
    # the explorer's sampled cross-check: the fork serves the staged world on sockets (moto as
    # shipped on its own server) and the run is played over HTTP from its start
    from moto.ec2.models.instance_types import INSTANCE_TYPE_OFFERINGS

    regions = {k: set(v) for k, v in INSTANCE_TYPE_OFFERINGS.items()}
    assert all(len(v) > 1 for v in regions.values())
    with fork.Stage(BASE, warm=False) as stage:
        # while it lives, the stage keeps moto's offerings of its own region only
        assert {k: set(v) for k, v in INSTANCE_TYPE_OFFERINGS.items()} == {
            k: {stage.r.sandbox.region} for k in regions}
        tl = replace(BASE, seed=3)
        fast = stage.play(tl, draw_events=True)
        served = stage.play(tl, draw_events=True, transport="http")
        assert fast.differences(served) == [], "\n".join([tl.words(), *fast.trace])
        assert stage.r.sandbox.transport == "inprocess"  # the stage itself never served
        # no server runs in it: the EC2 proxy's socket is bound for the forks, never served
        assert stage.r.sandbox.api._httpd is None and stage.r.sandbox.ec2._serving is None
    # and gives the others back: a sandbox of another region may follow in this process
    assert {k: set(v) for k, v in INSTANCE_TYPE_OFFERINGS.items()} == regions


def test_an_in_process_sandbox_served_over_http_answers_on_sockets(tmp_path: Any) -> None:
    from bot.sim import moto_speed

    with Rehearsal("node-hung", transport="inprocess", workdir=tmp_path) as r:
        assert moto_speed._installed
        before = {n["metadata"]["name"] for n in r.clients().kube.list_nodes()}
        r.serve_over_http()
        try:
            sb = r.sandbox
            assert sb.api._httpd is not None and sb.ec2._httpd is not None
            assert not moto_speed._installed  # moto as shipped, as over HTTP
            assert sb.k8s_url.startswith("https://127.0.0.1:")
            assert sb.ec2.endpoint.startswith("http://127.0.0.1:")
            # the kubeconfig the runner's clients read names the socket, and they answer as before
            assert sb.k8s_url in sb.kubeconfig_path.read_text()
            clients = r.clients()
            assert {n["metadata"]["name"] for n in clients.kube.list_nodes()} == before
            wired = len(sb.ec2.wire)
            ids = [i.id for res in sb.ec2.backend.reservations.values() for i in res.instances]
            assert set(clients.ec2.describe_instances(ids)) == set(ids)
            assert len(sb.ec2.wire) == wired + 1  # through the proxy's socket
        finally:
            moto_speed.install()  # as the other in-process sandboxes of this process expect


def test_the_in_process_transport_answers_the_product_as_http_does() -> None:
    with Rehearsal("node-hung", transport="inprocess") as r:
        assert r.sandbox.api._httpd is None and r.sandbox.ec2._httpd is None  # no server, no thread
        clients = r.clients()
        nodes = clients.kube.list_nodes()
        assert NODE in {n["metadata"]["name"] for n in nodes}
        with pytest.raises(PermanentError) as missing:
            clients.kube.get_node("no-such-node")
        assert missing.value.code == "NotFound"
        ids = [i.id for res in r.sandbox.ec2.backend.reservations.values() for i in res.instances]
        described = clients.ec2.describe_instances(ids)
        assert set(described) == set(ids)
        assert [c.access_key for c in r.sandbox.ec2.wire] == ["testing"]  # the bot's signature

        # RBAC holds as over HTTP: the bot may not watch pods (it may watch nodes, for its node
        # watcher); the sandbox's admin may, and a watch streams its events as they are written,
        # until it times out
        from kubernetes.client.exceptions import ForbiddenException

        with pytest.raises(ForbiddenException):
            clients.kube._group("core").list_pod_for_all_namespaces(watch=True, timeout_seconds=1)
        admin = KubeClient.from_config(kubeconfig=str(r.sandbox.kubeconfig_path), context="sandbox",
                                       pool=r.sandbox.kube_transport())
        resp = admin._group("core").list_node(watch=True, timeout_seconds=1,
                                              _preload_content=False)
        lines = [json.loads(line) for line in resp.stream() for line in line.splitlines() if line]
        assert {e["type"] for e in lines} == {"ADDED"}
        assert NODE in {e["object"]["metadata"]["name"] for e in lines}


@needs_fork
@pytest.mark.slow
def test_a_timeline_that_ends_otherwise_in_process_is_an_explorer_error(monkeypatch) -> None:
    real = fork.finish

    def drifting(*args: object) -> Played:
        return replace(real(*args), status="drifted")  # type: ignore[arg-type]

    monkeypatch.setattr(fork, "finish", drifting)  # the forks' path only, never the HTTP one
    # the first timeline is played in this process (it warms it for the forks); the second forks
    report = explore(BASE, count=2, seed=4, check_every=1)
    assert report.checked == 2 and len(report.errors) == 1
    assert "status: drifted != " in report.errors[0]
    assert "EXPLORER ERROR" in report.words()


@pytest.mark.slow
def test_without_fork_each_timeline_is_staged_afresh_over_http() -> None:
    report = explore(BASE, count=1, seed=4, fork=False)
    assert report.played == 1 and report.checked == 0 and not report.errors


def test_clients_for_http_are_built_before_the_fork_that_serves(tmp_path: Any) -> None:
    from bot.sim import moto_speed

    with Rehearsal("node-hung", transport="inprocess", workdir=tmp_path) as r:
        r.ready_for_http()
        sb = r.sandbox
        assert sb.ec2._httpd is not None and sb.ec2._serving is None  # bound, not served
        assert sb.ec2.endpoint.endswith(".invalid")  # and still in-process until served
        built = dict(sb._over_http)
        assert len(built) == 3  # the controllers', and the bot's EC2 and STS clients
        r.serve_over_http()
        try:
            # the runner and the controllers reach the socket with the clients built before
            assert r.clients().ec2.client in built.values()
            assert sb.ctx is not None and sb.ctx.ec2_client.meta.endpoint_url == sb.ec2.endpoint
            wired = len(sb.ec2.wire)
            ids = [i.id for res in sb.ec2.backend.reservations.values() for i in res.instances]
            assert set(r.clients().ec2.describe_instances(ids)) == set(ids)
            assert len(sb.ec2.wire) == wired + 1
        finally:
            moto_speed.install()


def test_a_sandbox_bound_for_http_and_never_served_stops(tmp_path: Any) -> None:
    r = Rehearsal("node-hung", transport="inprocess", workdir=tmp_path)
    r.start()
    r.ready_for_http()
    r.stop()  # a bound socket with no serving loop is closed, not waited on
    assert r.sandbox.ec2._httpd is None


@needs_fork
def test_a_stage_that_cannot_be_staged_leaves_no_sandbox_running() -> None:
    from bot.errors import NotFound
    from bot.sim.sandbox import Sandbox

    with pytest.raises(NotFound):
        fork.Stage(replace(BASE, runbook="no-such-runbook"), warm=False)
    assert not Sandbox._running  # another sandbox may start in this process
    with fork.Stage(BASE, warm=False) as stage:
        assert stage.r.sandbox.ctx is not None
