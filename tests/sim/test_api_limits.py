"""What the API server refuses and when: 422 for invalid objects, 429 with Retry-After under a
configured throttle rate, and informer lag: controllers react a sandbox delay after a write, and
a violation is still dated and attributed to the write that caused it."""

from __future__ import annotations

from typing import Any

import pytest

from bot.sim.authz import ADMIN_TOKEN
from tests.sim.kit import api_for

OOS = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}


@pytest.fixture
def sb(pool: Any) -> Any:
    return pool.get("stuck-terminating")


@pytest.mark.parametrize(("patch", "field"), [
    ({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoSchedule"}]}},
     "spec.taints[1]"),
    ({"metadata": {"labels": {"team": "search team"}}}, "metadata.labels"),
    ({"metadata": {"labels": {"-bad-key": "x"}}}, "metadata.labels"),
    ({"spec": {"taints": [{"key": "a", "effect": "Sometimes"}]}}, "spec.taints[0].effect"),
])
def test_an_invalid_node_is_refused_with_422_naming_the_field(sb, patch, field):
    node = sb.list("Node")[0]
    http = api_for(sb)
    try:
        code, body = http("PATCH", f"/api/v1/nodes/{node['metadata']['name']}", patch,
                          content_type="application/merge-patch+json")
    finally:
        http.close()
    assert (code, body["reason"]) == (422, "Invalid"), body
    assert field in [c["field"] for c in body["details"]["causes"]]
    assert sb.get("Node", None, node["metadata"]["name"])["metadata"]["resourceVersion"] == \
        node["metadata"]["resourceVersion"]


def test_a_throttled_api_server_answers_429_with_retry_after_and_throttles_nothing_by_default(pool):
    assert pool.get("stuck-terminating").api.throttle_rate == 0.0
    sb = pool.fresh("stuck-terminating", api_throttle_rate=0.5)
    http = api_for(sb)
    try:
        answers = [http("GET", "/api/v1/nodes") for _ in range(20)]
    finally:
        http.close()
    refused = [body for code, body in answers if code == 429]
    assert 3 <= len(refused) <= 17 and {c for c, _ in answers} == {200, 429}
    assert refused[0]["reason"] == "TooManyRequests" and refused[0]["details"]["retryAfterSeconds"] == 1
    conn = api_for(sb).conn  # the header itself, on a fresh request until one is refused
    try:
        for _ in range(50):
            conn.request("GET", "/api/v1/nodes", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
            resp = conn.getresponse()
            resp.read()
            if resp.status == 429:
                assert resp.getheader("Retry-After") == "1"
                break
        else:
            raise AssertionError("no request was refused")
    finally:
        conn.close()


def test_with_informer_lag_controllers_react_later_and_the_violation_is_the_write_s(pool):
    sb = pool.fresh("zombie-attachments", informer_lag=20, pod_exit_seconds=0)  # exit on SIGTERM
    node = sb.facts["node"]
    http = api_for(sb)
    try:
        written = sb.now_ts()
        code, _ = http("PATCH", f"/api/v1/nodes/{node}", {"spec": {"taints": [OOS]}},
                       content_type="application/strategic-merge-patch+json")
    finally:
        http.close()
    assert code == 200
    va = sb.facts["volume_attachment"]
    assert sb.find("VolumeAttachment", None, va) and sb.violations == []  # nobody reacted yet
    sb.advance(15)
    assert sb.find("VolumeAttachment", None, va) and sb.violations == []
    sb.advance(5)
    assert sb.find("VolumeAttachment", None, va) is None  # the taint detached it, 20 s late
    [v] = [v for v in sb.violations if v.kind == "oos-taint-on-running"]
    assert v.time == written and v.cause.startswith(f"PATCH /api/v1/nodes/{node} by kubernetes-admin")
