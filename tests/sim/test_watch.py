"""Watches as clients use them: the Python client's watch, `kubectl get -w` and `kubectl wait`
see changes as they happen; a watch or a `continue` token older than the kept history is 410."""

from __future__ import annotations

import subprocess
import threading
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.rest import ApiException

from tests.sim.kit import KUBECTL, api_for, kube_for, needs_kubectl

NS = "watching"


@pytest.fixture
def sb(pool: Any) -> Any:
    sb = pool.get("stuck-terminating")
    if sb.find("Namespace", None, NS) is None:
        sb.create("Namespace", {"metadata": {"name": NS}})
    return sb


def _pod(sb: Any, name: str) -> dict[str, Any]:
    return sb.create("Pod", {"metadata": {"name": name, "namespace": NS},
                             "spec": {"containers": [{"name": "c", "image": "busybox"}]}}, NS)


def test_the_python_client_s_watch_sees_additions_changes_and_deletions_after_its_version(sb):
    api = kube_for(sb)
    core = k8s.CoreV1Api(api)
    rv = core.list_namespaced_pod(NS).metadata.resource_version
    _pod(sb, "w-one")
    sb.store.mutate("Pod", NS, "w-one", lambda p: p["metadata"].setdefault("labels", {}).update(a="1"))
    sb.store.remove(sb.res("Pod"), NS, "w-one")
    seen = []
    for ev in watch.Watch().stream(core.list_namespaced_pod, NS, resource_version=rv, timeout_seconds=2):
        seen.append((ev["type"], ev["object"].metadata.name))
        if ev["type"] == "DELETED":
            break
    api.close()
    assert seen == [("ADDED", "w-one"), ("MODIFIED", "w-one"), ("DELETED", "w-one")]


def test_a_watch_follows_a_write_made_while_it_waits(sb):
    api = kube_for(sb)
    core = k8s.CoreV1Api(api)
    rv = core.list_namespaced_pod(NS).metadata.resource_version
    timer = threading.Timer(0.3, lambda: _pod(sb, "w-later"))
    timer.start()
    w = watch.Watch()
    got = None
    for ev in w.stream(core.list_namespaced_pod, NS, resource_version=rv, timeout_seconds=5):
        got = (ev["type"], ev["object"].metadata.name)
        w.stop()
    timer.join()
    api.close()
    assert got == ("ADDED", "w-later")


def test_a_watch_and_a_continue_token_older_than_the_kept_history_get_410(pool):
    sb = pool.fresh("stuck-terminating")
    api = kube_for(sb)
    core = k8s.CoreV1Api(api)
    first = core.list_persistent_volume(limit=1)
    old_rv, token = first.metadata.resource_version, first.metadata._continue
    assert token
    sb.advance(400)  # past the 5-minute compaction window
    sb.create("Namespace", {"metadata": {"name": "after-compaction"}})
    with pytest.raises(ApiException) as e:
        core.list_persistent_volume(limit=1, _continue=token)
    assert (e.value.status, "Expired") == (410, e.value.reason) or '"reason":"Expired"' in \
        e.value.body.replace(" ", "")
    with pytest.raises(ApiException) as e:
        for _ in watch.Watch().stream(core.list_node, resource_version=old_rv, timeout_seconds=2):
            pass
    assert e.value.status == 410
    api.close()
    http = api_for(sb)
    code, body = http("GET", f"/api/v1/persistentvolumes?limit=1&continue={token}")
    http.close()
    assert code == 410 and body["reason"] == "Expired" and body["metadata"]["continue"]


def _kubectl_popen(sb: Any, *args: str) -> subprocess.Popen[str]:
    assert KUBECTL is not None
    return subprocess.Popen([KUBECTL, "--kubeconfig", str(sb.kubeconfig_path), "--cache-dir",
                             str(sb.workdir / "kubectl-cache"), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@needs_kubectl
@pytest.mark.kubectl
def test_kubectl_get_w_prints_each_change_as_it_happens(sb):
    _pod(sb, "w-kubectl")
    # the list form: its watch resumes at the list's resourceVersion, so no change falls between
    proc = _kubectl_popen(sb, "get", "pods", "-n", NS, "--field-selector", "metadata.name=w-kubectl",
                          "-w", "--output-watch-events", "--no-headers", "--request-timeout", "20s")
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.split()[:2] == ["ADDED", "w-kubectl"], first
        sb.store.mutate("Pod", NS, "w-kubectl", lambda p: p.update(status={"phase": "Running"}))
        second = proc.stdout.readline()
        assert second.split()[:1] == ["MODIFIED"] and "Running" in second, second
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


@needs_kubectl
@pytest.mark.kubectl
def test_kubectl_wait_returns_when_the_condition_comes_true(sb):
    _pod(sb, "w-wait")
    proc = _kubectl_popen(sb, "wait", "-n", NS, "pod/w-wait", "--for=jsonpath={.status.phase}=Running",
                          "--timeout=20s")
    threading.Timer(0.5, lambda: sb.store.mutate(
        "Pod", NS, "w-wait", lambda p: p.update(status={"phase": "Running"}))).start()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out.strip() == "pod/w-wait condition met"
    gone = _kubectl_popen(sb, "wait", "-n", NS, "pod/w-wait", "--for=delete", "--timeout=20s")
    threading.Timer(0.5, lambda: sb.store.remove(sb.res("Pod"), NS, "w-wait")).start()
    out, err = gone.communicate(timeout=30)
    assert gone.returncode == 0, err
    assert "condition met" in out
