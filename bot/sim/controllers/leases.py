"""Node Leases: the kubelet's cheap heartbeat, and the liveness signal that outlives Ready.

Since Kubernetes 1.14 (NodeLease, GA in 1.17) every kubelet keeps a ``coordination.k8s.io/v1``
Lease ``kube-node-lease/<node name>`` (holder: the node, 40 s duration, an ownerReference to its
Node) and renews it every 10 s (``nodeLeaseRenewInterval``, a quarter of the duration), whatever
its Ready status, while the Node's own status is posted only on change or every 5 minutes. A fresh
Lease is therefore what says "this kubelet is alive", and the node lifecycle controller reads it.

A renewal is one small write per node per 10 s, as on a real cluster; it bumps the one
resourceVersion counter and enters the watch history like any write, but no event is recorded.
A Lease whose Node is gone is the garbage collector's to delete (``controllers/ownergc.py``).
"""

from __future__ import annotations

from typing import Any

from bot.sim.controllers.context import Context
from bot.sim.store import micro_ts

NAMESPACE = "kube-node-lease"
LEASE_DURATION = 40  # seconds: the kubelet's nodeLeaseDurationSeconds
RENEW_INTERVAL = 0.25 * LEASE_DURATION  # nodeLeaseRenewIntervalFraction 0.25: every 10 s


def lease_of(ctx: Context, node: str) -> dict[str, Any] | None:
    return ctx.find("Lease", NAMESPACE, node)


def renew(ctx: Context, node: dict[str, Any]) -> None:
    """What a live kubelet does every 10 s: create its Lease, or renew it once it is due."""
    name = node["metadata"]["name"]
    lease = lease_of(ctx, name)
    if lease is not None and ctx.seconds_since(
            lease.get("spec", {}).get("renewTime")) < RENEW_INTERVAL:
        return  # not due: most passes (the stamp is formatted only for a write)
    now = micro_ts(ctx.now)
    if lease is None:
        ctx.store.create(ctx.store_res("Lease"), {
            "metadata": {"name": name, "namespace": NAMESPACE, "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}]},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION,
                     "renewTime": now}}, NAMESPACE)
        return

    def apply(obj: dict[str, Any]) -> None:
        spec = obj.setdefault("spec", {})
        spec.update(holderIdentity=name, leaseDurationSeconds=LEASE_DURATION, renewTime=now)
    ctx.store.mutate("Lease", NAMESPACE, name, apply)

