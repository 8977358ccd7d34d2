"""The sandbox's controllers: the parts of Kubernetes whose rules the runbooks depend on.

Each controller is a function ``reconcile(ctx)`` that looks at the store (and EC2) and moves the
world one step, as the real one would. ``run_all`` calls them in a fixed order so a seed gives one
event sequence.
"""

from __future__ import annotations

from bot.sim.controllers.attachdetach import reconcile_attach_detach, reconcile_attacher
from bot.sim.controllers.cloud import reconcile_cloud_nodes, reconcile_ec2_clock
from bot.sim.controllers.context import Context
from bot.sim.controllers.daemonsets import reconcile_daemonsets
from bot.sim.controllers.deployments import reconcile_deployments, reconcile_replicasets
from bot.sim.controllers.events import reconcile_event_ttl
from bot.sim.controllers.gc import reconcile_pod_gc, reconcile_taint_eviction
from bot.sim.controllers.jobs import reconcile_jobs
from bot.sim.controllers.karpenter import reconcile_nodeclaims
from bot.sim.controllers.kubelet import reconcile_kubelets
from bot.sim.controllers.nodes import reconcile_node_lifecycle
from bot.sim.controllers.ownergc import reconcile_garbage_collector
from bot.sim.controllers.protection import (
    reconcile_pv_controller,
    reconcile_pv_protection,
    reconcile_pvc_protection,
)
from bot.sim.controllers.replacement import reconcile_replacement
from bot.sim.controllers.workloads import reconcile_provisioner, reconcile_scheduler, reconcile_statefulsets

ORDER = (
    reconcile_ec2_clock,
    reconcile_daemonsets,
    reconcile_kubelets,
    reconcile_node_lifecycle,
    reconcile_cloud_nodes,
    reconcile_nodeclaims,
    reconcile_taint_eviction,
    reconcile_pod_gc,
    reconcile_garbage_collector,
    reconcile_statefulsets,
    reconcile_deployments,
    reconcile_replicasets,
    reconcile_jobs,
    reconcile_provisioner,
    reconcile_scheduler,
    reconcile_attach_detach,
    reconcile_attacher,
    reconcile_pvc_protection,
    reconcile_pv_controller,
    reconcile_pv_protection,
    reconcile_event_ttl,
    reconcile_replacement,
)


def run_all(ctx: Context) -> bool:
    """One pass of every controller; True when anything changed."""
    before = ctx.store.resource_version
    for fn in ORDER:
        fn(ctx)
    return ctx.store.resource_version != before


__all__ = ["Context", "run_all"]
