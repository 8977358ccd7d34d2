"""The Job controller: pods run to completion, and a finished Job says so.

A Job (batch/v1) keeps ``parallelism`` pods (default 1) running until ``completions`` of them
(default 1) have succeeded. Its pods are named ``<job>-<5 letters>``, labelled ``job-name`` and
``controller-uid`` (and their ``batch.kubernetes.io/`` forms), owned by the Job, and carry the
``batch.kubernetes.io/job-tracking`` finalizer: the controller lifts it only once it has counted
the pod in ``status.succeeded`` or ``status.failed``, so a Job pod deleted by force, or by pod GC
from a deleted node, stays until then (a pod deleted before it finished counts as failed).
A pod being deleted is replaced at once (``podReplacementPolicy: TerminatingOrFailed``, the
default) and shown in ``status.terminating``.

Once enough pods succeeded the Job gets ``SuccessCriteriaMet`` and, when none of its pods is still
running or terminating, ``Complete`` (both ``CompletionsReached``, "Reached expected number of
succeeded pods") with ``completionTime``, and a ``Completed`` event; more than ``backoffLimit``
(default 6) failures make it ``Failed`` (``BackoffLimitExceeded``). A suspended Job starts no pod.
How long a pod runs before its container exits 0 is the sandbox's choice: option
``job_run_seconds`` (default 30), applied by the kubelet (``finished``). Not modelled: indexed
Jobs, ``activeDeadlineSeconds``, pod failure policies, success policies, ``ttlSecondsAfterFinished``
and the exponential back-off between retries.
"""

from __future__ import annotations

import copy
from typing import Any

from bot.sim.controllers.context import Context, seconds_option
from bot.sim.controllers.deployments import _owned, _suffix
from bot.sim.controllers.workloads import DEFAULT_TOLERATIONS
from bot.sim.store import ts

TRACKING = "batch.kubernetes.io/job-tracking"
RUN_SECONDS = 30.0
SOURCE = "job-controller"
DONE = ("Succeeded", "Failed")
COMPLETE = ("CompletionsReached", "Reached expected number of succeeded pods")
BACKOFF = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")


def run_seconds(ctx: Context) -> float:
    return seconds_option(ctx, "job_run_seconds", RUN_SECONDS)


def finished(ctx: Context, pod: dict[str, Any]) -> bool:
    """For the kubelet: has this running pod of a Job been running long enough to exit 0?"""
    if not any(r.get("kind") == "Job" and r.get("controller")
               for r in pod["metadata"].get("ownerReferences") or ()):
        return False
    started = [cs["state"]["running"]["startedAt"] for cs in pod.get("status", {}).get(
        "containerStatuses") or () if cs.get("state", {}).get("running")]
    return bool(started) and ctx.seconds_since(min(started)) >= run_seconds(ctx)


def succeed(ctx: Context, pod: dict[str, Any]) -> None:
    """The kubelet's report of a pod whose containers all exited 0."""
    now = ts(ctx.now)

    def apply(p: dict[str, Any]) -> None:
        st = p.setdefault("status", {})
        st["phase"] = "Succeeded"
        st["containerStatuses"] = [{
            **{k: v for k, v in cs.items() if k not in ("state", "ready", "started")},
            "ready": False, "started": False,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": now,
                                     "startedAt": cs.get("state", {}).get("running", {}).get(
                                         "startedAt", now)}}}
            for cs in st.get("containerStatuses") or ()]
        st["conditions"] = [{"type": "Ready", "status": "False", "reason": "PodCompleted"},
                            {"type": "PodScheduled", "status": "True"}]
    ctx.store.mutate("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"], apply)


def _condition(job: dict[str, Any], ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True"
               for c in job.get("status", {}).get("conditions") or ())


def reconcile_jobs(ctx: Context) -> None:
    pods = ctx.items("Pod")
    jobs = ctx.items("Job")
    for job in jobs:
        if job["metadata"].get("deletionTimestamp"):
            for pod in _owned(pods, job):  # a Job being deleted counts nothing more
                _release(ctx, pod)
            continue
        _sync(ctx, job, _owned(pods, job))
    live = {j["metadata"]["uid"] for j in jobs if not j["metadata"].get("deletionTimestamp")}
    for pod in pods:  # orphaned (the Job deleted with propagation Orphan) or its Job gone
        if TRACKING in (pod["metadata"].get("finalizers") or ()) and not any(
                r.get("uid") in live and r.get("controller")
                for r in pod["metadata"].get("ownerReferences") or ()):
            _release(ctx, pod)


def _release(ctx: Context, pod: dict[str, Any]) -> None:
    """Lift the tracking finalizer: the pod may go when it is deleted."""
    ctx.store.mutate("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"],
                     lambda p: p["metadata"].update(finalizers=[
                         f for f in p["metadata"].get("finalizers") or () if f != TRACKING]))


def _sync(ctx: Context, job: dict[str, Any], mine: list[dict[str, Any]]) -> None:
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    status = job.get("status") or {}
    succeeded, failed = _count_finished(ctx, mine, int(status.get("succeeded") or 0),
                                        int(status.get("failed") or 0))
    active = [p for p in mine if not p["metadata"].get("deletionTimestamp")
              and p.get("status", {}).get("phase") not in DONE]
    terminating = [p for p in mine if p["metadata"].get("deletionTimestamp")
                   and p.get("status", {}).get("phase") not in DONE]
    conditions = list(status.get("conditions") or ())
    now = ts(ctx.now)
    over = _condition(job, "Complete") or _condition(job, "Failed")
    if not over:
        over = _progress(ctx, job, active, terminating, conditions, succeeded, failed, now)
    counts = {"active": len(active), "ready": sum(1 for p in active if _ready(p)),
              "terminating": len(terminating), "succeeded": succeeded, "failed": failed}
    ctx.store.mutate("Job", ns, name, lambda j: _write_status(
        j, counts, conditions, now, started=not job["spec"].get("suspend"), over=over))


def _count_finished(ctx: Context, mine: list[dict[str, Any]], succeeded: int,
                    failed: int) -> tuple[int, int]:
    """Count what finished (or was deleted unfinished), then let it go: (succeeded, failed)."""
    for pod in mine:
        meta, phase = pod["metadata"], pod.get("status", {}).get("phase")
        if TRACKING not in (meta.get("finalizers") or ()):
            continue
        if phase == "Succeeded":
            succeeded += 1
        elif phase == "Failed" or meta.get("deletionTimestamp"):
            failed += 1
        else:
            continue
        _release(ctx, pod)
    return succeeded, failed


def _progress(ctx: Context, job: dict[str, Any], active: list[dict[str, Any]],
              terminating: list[dict[str, Any]], conditions: list[dict[str, Any]],
              succeeded: int, failed: int, now: str) -> bool:
    """A Job not yet over: finish it once enough pods succeeded or too many failed, else start
    the pods it still wants (appended to ``active``). True once it is over."""
    spec = job["spec"]
    completions = int(spec.get("completions") or 1)
    if succeeded >= completions or failed > int(spec.get("backoffLimit", 6)):
        return _finish(ctx, job, active, terminating, conditions, ok=succeeded >= completions,
                       now=now)
    if not spec.get("suspend"):
        want = min(int(spec.get("parallelism", 1)), completions - succeeded) - len(active)
        for _ in range(max(0, want)):
            active.append(_create_pod(ctx, job))
    return False


def _finish(ctx: Context, job: dict[str, Any], active: list[dict[str, Any]],
            terminating: list[dict[str, Any]], conditions: list[dict[str, Any]], *, ok: bool,
            now: str) -> bool:
    """The Job met its target (``ok``) or its backoff limit: its target condition, its running
    pods deleted, and its final condition and event once none still runs. True once over."""
    target, final, (reason, message) = ("SuccessCriteriaMet", "Complete", COMPLETE) if ok \
        else ("FailureTarget", "Failed", BACKOFF)
    if not _condition(job, target):
        conditions.append(_cond(target, reason, message, now))
    for pod in active:  # the Job is done: nothing it still runs is wanted
        ctx.store.delete(ctx.store_res("Pod"), job["metadata"]["namespace"],
                         pod["metadata"]["name"])
    if active or terminating:
        return False
    conditions.append(_cond(final, reason, message, now))
    ctx.event(job, type="Normal" if ok else "Warning", reason="Completed" if ok else reason,
              message="Job completed" if ok else message, source=SOURCE)
    return True


def _write_status(j: dict[str, Any], counts: dict[str, int], conditions: list[dict[str, Any]],
                  now: str, *, started: bool, over: bool) -> None:
    st = j.setdefault("status", {})
    st.update(counts, conditions=conditions, uncountedTerminatedPods={})
    if started:
        st.setdefault("startTime", now)
    if over and _condition({"status": st}, "Complete"):
        st.setdefault("completionTime", now)
    for k in counts:
        if not st[k]:
            del st[k]  # the API omits zero counts


def _ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in pod.get("status", {}).get("conditions") or ())


def _cond(ctype: str, reason: str, message: str, now: str) -> dict[str, Any]:
    return {"type": ctype, "status": "True", "reason": reason, "message": message,
            "lastProbeTime": now, "lastTransitionTime": now}


def _create_pod(ctx: Context, job: dict[str, Any]) -> dict[str, Any]:
    ns, name, uid = job["metadata"]["namespace"], job["metadata"]["name"], job["metadata"]["uid"]
    created: dict[str, int] = ctx.state.setdefault("job_pods_created", {})
    n = created[uid] = created.get(uid, 0) + 1
    pod_name = f"{name}-{_suffix(f'{uid}/{n}')}"
    tpl = copy.deepcopy(job["spec"]["template"])
    spec = tpl["spec"]
    spec.setdefault("tolerations", [])
    for tol in DEFAULT_TOLERATIONS:
        if not any(t.get("key") == tol["key"] for t in spec["tolerations"]):
            spec["tolerations"].append(dict(tol))
    labels = {**(tpl.get("metadata") or {}).get("labels", {}), "job-name": name,
              "controller-uid": uid, "batch.kubernetes.io/job-name": name,
              "batch.kubernetes.io/controller-uid": uid}
    pod = ctx.store.create(ctx.store_res("Pod"), {
        "metadata": {"name": pod_name, "namespace": ns, "labels": labels, "finalizers": [TRACKING],
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                          "uid": uid, "controller": True,
                                          "blockOwnerDeletion": True}]},
        "spec": spec, "status": {"phase": "Pending"}}, ns)
    ctx.event(job, type="Normal", reason="SuccessfulCreate", message=f"Created pod: {pod_name}",
              source=SOURCE)
    return pod
