"""KubeClient against a real HTTP server: translation, pagination, records, optimistic writes."""

from __future__ import annotations

import socket

import pytest

from bot.clients.kube import KubeClient
from bot.errors import ConfigError, PermanentError, PolicyError, RetryableError


def _client(fake, tmp_path, **kw):
    return KubeClient.from_config(kubeconfig=str(fake.kubeconfig(tmp_path)), request_timeout=2.0,
                                  sleep=lambda _s: None, **kw)


def _node(name):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {}}


def test_reads_return_plain_dicts_and_are_recorded(fake_kube, tmp_path):
    fake_kube.put("nodes", _node("n1"))
    calls = []
    node = _client(fake_kube, tmp_path).bound(calls).get_node("n1")
    assert type(node) is dict and node["metadata"]["name"] == "n1"
    assert [(c.service, c.operation, c.targets, c.outcome) for c in calls] == [
        ("kubernetes", "read_node", ("n1",), "ok")]


def test_a_missing_object_is_a_permanent_not_found_and_find_returns_none(fake_kube, tmp_path):
    calls = []
    kube = _client(fake_kube, tmp_path).bound(calls)
    with pytest.raises(PermanentError) as e:
        kube.get_node("gone")
    assert e.value.code == "NotFound" and e.value.service == "kubernetes"
    assert e.value.operation == "read_node" and e.value.__cause__ is not None
    assert kube.find(lambda: kube.get_node("gone")) is None
    assert [c.outcome for c in calls] == ["NotFound", "NotFound"]


@pytest.mark.parametrize("page_size, requests", [(2, 3), (5, 1), (500, 1)])
def test_lists_follow_continue_tokens(fake_kube, tmp_path, page_size, requests):
    for i in range(5):
        fake_kube.put("nodes", _node(f"n{i}"))
    calls = []
    nodes = _client(fake_kube, tmp_path, page_size=page_size).bound(calls).list_nodes()
    assert sorted(n["metadata"]["name"] for n in nodes) == [f"n{i}" for i in range(5)]
    assert len(calls) == requests


@pytest.mark.parametrize("status, reason, error, code, attempts", [
    (403, "Forbidden", PermanentError, "Forbidden", 1),
    (422, "Invalid", PermanentError, "Invalid", 1),
    (401, "Unauthorized", PermanentError, "Unauthorized", 1),
    (500, "InternalError", RetryableError, "InternalError", 3),
    (503, "ServiceUnavailable", RetryableError, "ServiceUnavailable", 3),
])
def test_http_errors_are_split_into_permanent_and_retryable(fake_kube, tmp_path, status, reason,
                                                           error, code, attempts):
    fake_kube.put("nodes", _node("n1"))
    fake_kube.fail_next = [(status, reason)] * 5
    calls = []
    with pytest.raises(error) as e:
        _client(fake_kube, tmp_path).bound(calls).get_node("n1")
    assert type(e.value) is error and e.value.code == code and str(status) in str(e.value)
    assert len(calls) == attempts  # reads retry server errors twice, never client errors


def test_a_server_error_that_clears_is_retried_into_success(fake_kube, tmp_path):
    fake_kube.put("nodes", _node("n1"))
    fake_kube.fail_next = [(500, "InternalError")]
    calls = []
    assert _client(fake_kube, tmp_path).bound(calls).get_node("n1")["metadata"]["name"] == "n1"
    assert [c.outcome for c in calls] == ["InternalError", "ok"]


def test_a_write_is_not_retried_on_a_server_error(fake_kube, tmp_path):
    fake_kube.put("nodes", _node("n1"))
    kube = _client(fake_kube, tmp_path)
    node = kube.get_node("n1")
    fake_kube.fail_next = [(500, "InternalError")]
    calls = []
    with pytest.raises(RetryableError):
        kube.bound(calls).update(kind="Node", name="n1", current=node,
                                 mutate=lambda o: {**o, "spec": {"unschedulable": True}})
    assert [c.operation for c in calls] == ["replace_node"]


def test_throttling_beyond_the_read_retries_is_retryable(fake_kube, tmp_path):
    fake_kube.put("nodes", _node("n1"))
    fake_kube.throttle_next = 10
    with pytest.raises(RetryableError) as e:
        _client(fake_kube, tmp_path).get_node("n1")
    assert e.value.code == "TooManyRequests" and e.value.retry_after == 0


def test_update_writes_with_the_read_resource_version_and_skips_a_no_op(fake_kube, tmp_path):
    fake_kube.put("nodes", _node("n1"))
    calls = []
    kube = _client(fake_kube, tmp_path).bound(calls)

    def cordon(obj):
        if obj["spec"].get("unschedulable"):
            return None
        obj["spec"]["unschedulable"] = True
        return obj

    written, changed = kube.update(kind="Node", name="n1", mutate=cordon)
    assert changed and written["spec"]["unschedulable"] is True
    again, changed_again = kube.update(kind="Node", name="n1", mutate=cordon)
    assert not changed_again
    assert again["metadata"]["resourceVersion"] == written["metadata"]["resourceVersion"]
    assert [c.operation for c in calls] == ["read_node", "replace_node", "read_node"]


def test_a_stale_write_is_a_409_that_update_resolves_by_re_reading(fake_kube, tmp_path):
    fake_kube.put("nodes", _node("n1"))
    bumped = []

    def someone_else_writes(plural, name):
        if not bumped:  # a controller adds a label between our read and our write
            bumped.append(1)
            live = fake_kube.objects[(plural, "", name)]
            live["metadata"]["labels"] = {"by": "controller"}
            fake_kube.put(plural, live)

    fake_kube.on_put.append(someone_else_writes)
    kube = _client(fake_kube, tmp_path)
    written, changed = kube.update(kind="Node", name="n1",
                                   mutate=lambda o: {**o, "spec": {"unschedulable": True}})
    assert changed and written["metadata"]["labels"] == {"by": "controller"}  # nothing lost


def test_an_unreachable_api_server_is_retryable(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = tmp_path / "kubeconfig"
    path.write_text(
        '{"apiVersion": "v1", "kind": "Config", "current-context": "c",'
        f' "clusters": [{{"name": "c", "cluster": {{"server": "http://127.0.0.1:{port}"}}}}],'
        ' "users": [{"name": "u", "user": {"token": "t"}}],'
        ' "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}')
    kube = KubeClient.from_config(kubeconfig=str(path), request_timeout=1.0, sleep=lambda _s: None)
    with pytest.raises(RetryableError) as e:
        kube.get_node("n1")
    assert e.value.code in {"ConnectionError", "Timeout"}


def test_a_missing_kubeconfig_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot load Kubernetes config"):
        KubeClient.from_config(kubeconfig=str(tmp_path / "nope"))


def test_an_api_server_that_never_answers_times_out_as_retryable(tmp_path):
    with socket.socket() as silent:  # accepts connections, never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        path = tmp_path / "kubeconfig"
        path.write_text(
            '{"apiVersion": "v1", "kind": "Config", "current-context": "c",'
            f' "clusters": [{{"name": "c", "cluster": {{"server": "http://127.0.0.1:{port}"}}}}],'
            ' "users": [{"name": "u", "user": {"token": "t"}}],'
            ' "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}')
        calls = []
        kube = KubeClient.from_config(kubeconfig=str(path), request_timeout=0.2,
                                      sleep=lambda _s: None, read_retries=0).bound(calls)
        with pytest.raises(RetryableError) as e:
            kube.get_node("n1")
    assert e.value.code == "Timeout" and [c.outcome for c in calls] == ["Timeout"]


def test_every_request_is_recorded_with_the_api_servers_audit_id(fake_kube, tmp_path):
    fake_kube.put("nodes", _node("n1"))
    calls = []
    kube = _client(fake_kube, tmp_path).bound(calls)
    kube.get_node("n1")
    kube.find(lambda: kube.get_node("gone"))
    assert [c.request_id for c in calls] == ["audit-1", "audit-2"]


def test_an_expired_continue_token_starts_the_list_again_from_the_first_page(fake_kube, tmp_path):
    for i in range(5):
        fake_kube.put("nodes", _node(f"n{i}"))
    expired = []

    def expire_the_first_continuation(method, path, query):
        if query.get("continue") and not expired:
            expired.append(query["continue"])
            return 410, "Expired", "The provided continue parameter is too old"
        return None

    fake_kube.fault = expire_the_first_continuation
    calls = []
    nodes = _client(fake_kube, tmp_path, page_size=2).bound(calls).list_nodes()
    assert sorted(n["metadata"]["name"] for n in nodes) == [f"n{i}" for i in range(5)]  # no dupes
    assert [c.outcome for c in calls] == ["ok", "Expired", "ok", "ok", "ok"]


def test_a_token_in_a_non_json_error_body_is_redacted(fake_kube, tmp_path):
    fake_kube.fault = lambda method, path, query: (502, "BadGateway", "upstream said token=abc123secret")
    with pytest.raises(RetryableError) as e:
        _client(fake_kube, tmp_path, read_retries=0).get_node("n1")
    assert "abc123secret" not in str(e.value) and "token=[REDACTED]" in str(e.value)


def test_a_read_only_view_refuses_writes_before_sending_them(fake_kube, tmp_path):
    fake_kube.put("nodes", _node("n1"))
    calls = []
    kube = _client(fake_kube, tmp_path).bound(calls, read_only=True)
    with pytest.raises(PolicyError, match="read-only"):
        kube.update(kind="Node", name="n1", mutate=lambda o: {**o, "spec": {"unschedulable": True}})
    assert [c.operation for c in calls] == ["read_node"]
    assert [m for m, _ in fake_kube.requests] == ["GET"]


def test_the_named_context_of_a_kubeconfig_is_the_cluster_reached(fake_kube, tmp_path):
    fake_kube.put("nodes", _node("n1"))
    path = tmp_path / "kubeconfig"
    path.write_text(
        '{"apiVersion": "v1", "kind": "Config", "current-context": "other",'
        f' "clusters": [{{"name": "fake", "cluster": {{"server": "{fake_kube.url}"}}}},'
        ' {"name": "other", "cluster": {"server": "http://127.0.0.1:9"}}],'
        ' "users": [{"name": "u", "user": {"token": "t"}}],'
        ' "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}},'
        ' {"name": "other", "context": {"cluster": "other", "user": "u"}}]}')
    kube = KubeClient.from_config(kubeconfig=str(path), context="fake", request_timeout=2.0)
    assert kube.get_node("n1")["metadata"]["name"] == "n1"
    with pytest.raises(ConfigError, match="context='nope'"):
        KubeClient.from_config(kubeconfig=str(path), context="nope")


def test_without_a_kubeconfig_the_client_falls_back_to_in_cluster_config(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match=r"[Ss]ervice host"):  # the in-cluster loader's complaint
        KubeClient.from_config()
