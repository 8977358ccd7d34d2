"""Events as the API server keeps them: the Multi-Attach event once per volume and node, a TTL
after which events are gone, and the scheduler's events.k8s.io events with `series`."""

from __future__ import annotations

from kubernetes import client as k8s

from tests.sim.kit import events, kube_for

NS = "search"


def _multi_attach(sb, pod):
    return [e for e in sb.list("Event", NS) if e["involvedObject"]["name"] == pod
            and e["message"].startswith("Multi-Attach error")]


def test_the_multi_attach_event_is_emitted_once_per_volume_and_node(pool):
    sb = pool.fresh("node-dead", disable_force_detach_on_timeout=True, event_ttl=7200)
    pod = sb.facts["pod"]
    sb.advance(1800, step=30)
    [ev] = _multi_attach(sb, pod)
    assert ev["count"] == 1
    assert len([e for e in events(sb, reason="FailedAttachVolume") if "Multi-Attach" in e.message]) == 1


def test_events_are_gone_after_their_ttl_and_the_ttl_is_settable(pool):
    sb = pool.fresh("node-dead", disable_force_detach_on_timeout=True, event_ttl=600)
    pod = sb.facts["pod"]
    assert _multi_attach(sb, pod)
    sb.advance(600, step=30)
    assert _multi_attach(sb, pod) == []  # the pod still waits, its explanation expired
    assert sb.get("Pod", NS, pod)["status"]["phase"] == "Pending"
    assert sb.options["event_ttl"] == 600


def test_the_default_ttl_is_one_hour(pool):
    sb = pool.fresh("node-dead", disable_force_detach_on_timeout=True)
    pod = sb.facts["pod"]
    written = _multi_attach(sb, pod)[0]["lastTimestamp"]
    from datetime import UTC, datetime
    age = (sb.clock.now() - datetime.strptime(written, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC))
    sb.advance(3590 - age.total_seconds(), step=30)
    assert _multi_attach(sb, pod)
    sb.advance(20)
    assert _multi_attach(sb, pod) == []


def test_scheduler_events_carry_series_and_no_count_or_last_timestamp(pool):
    sb = pool.fresh("az-capacity-deadlock")
    sb.advance(180, step=30)
    api = kube_for(sb)
    try:
        evs = k8s.CoreV1Api(api).list_namespaced_event(
            NS, field_selector=f"involvedObject.name={sb.facts['pod']},reason=FailedScheduling").items
    finally:
        api.close()
    [ev] = evs
    assert ev.event_time is not None and ev.reporting_component == "default-scheduler"
    assert ev.last_timestamp is None and ev.first_timestamp is None and not ev.count
    assert ev.series.count >= 2 and ev.series.last_observed_time > ev.event_time


def test_the_events_k8s_io_view_shows_series_regarding_and_note_and_is_read_only(pool):
    from tests.sim.kit import api_for

    sb = pool.get("az-capacity-deadlock")
    sb.advance(120, step=30)
    pod = sb.facts["pod"]
    http = api_for(sb)
    try:
        code, body = http("GET", f"/apis/events.k8s.io/v1/namespaces/{NS}/events"
                                 f"?fieldSelector=regarding.name%3D{pod},reason%3DFailedScheduling")
        [ev] = body["items"]
        assert code == 200 and body["kind"] == "EventList" and ev["apiVersion"] == "events.k8s.io/v1"
        assert ev["regarding"]["name"] == pod and ev["note"].startswith("0/15 nodes are available")
        assert ev["reportingController"] == "default-scheduler" and ev["series"]["count"] >= 2
        assert "deprecatedLastTimestamp" not in ev
        code, one = http("GET", f"/apis/events.k8s.io/v1/namespaces/{NS}/events/{ev['metadata']['name']}")
        assert code == 200 and one["note"] == ev["note"]
        code, refused = http("DELETE", f"/apis/events.k8s.io/v1/namespaces/{NS}/events/"
                                       f"{ev['metadata']['name']}")
        assert code == 405 and "read-only" in refused["message"]
    finally:
        http.close()
