"""The one face for action authors: everything an action module imports from the bot, in one place.

An action is its params model, a read-only ``plan``, an idempotent ``apply`` and the ``action(...)``
that joins them (docs/actions.md, "Adding an action"). What those are written with lives in several
small modules (the spec in ``registry``, ``Env`` in ``env``, ``Plan``/``Change``/``Fact``/``Result``
in ``bot.engine.plan``, the errors in ``bot.errors``, the forms of params values in
``declarations``, the object parsers in ``objects``, ``poll_interval`` in ``polling``); an action
imports them from here instead::

    from bot.actions.authoring import ClusterParams, Env, NodeName, Plan, Result, action

This module only re-exports: it defines nothing, and it sits in the layers of ``.importlinter``
just above the modules it gathers, so every action, helper and interlock rule may import it. The
interlock rules themselves (``interlocks``, ``interlocks_release``) and the params models of the
shipped actions (``declarations``) stay modules of their own.
"""

from __future__ import annotations

from bot.actions.declarations import (
    DNS1123_SUBDOMAIN,
    QUALIFIED_NAME,
    ClaimRef,
    ClusterParams,
    Finalizer,
    InstanceId,
    NodeName,
    NodeParams,
    ObjectName,
    TaintKey,
    TaintValue,
    VolumeId,
    ZoneName,
)
from bot.actions.env import Env
from bot.actions.objects import (
    AUTO_MODE_EBS_DRIVER,
    CORDONED_BY,
    CSI_NODE_ID,
    EBS_DRIVER,
    EBS_DRIVERS,
    FENCED_STATES,
    IN_TREE_EBS_PLUGIN,
    LIVE_STATES,
    OUT_OF_SERVICE_TAINT,
    TAG_CREATED_FOR_NAMESPACE,
    TAG_CREATED_FOR_PV,
    TAG_CREATED_FOR_PVC,
    TAG_CSI_CLUSTER,
    TAG_CSI_VOLUME_NAME,
    TAINT_AT,
    TAINT_BOOT_ID,
    ZONE_KEYS,
    Obj,
    annotations_of,
    boot_id_of,
    csi_instance_id_of,
    ebs_driver_of_pv,
    ebs_volume_id_of_pv,
    ec2_tags,
    has_taint,
    heartbeat_of,
    instance_id_of,
    instance_state,
    is_ebs_driver,
    meta,
    nodes_of_instance,
    operator_of,
    parse_time,
    pod_claims,
    pod_finished,
    pv_named_by_tags,
    pv_zone,
    ready_condition,
    set_taint,
    taints_of,
    terminating,
    tolerates,
    va_node,
    zone_of_node,
)
from bot.actions.polling import poll_interval
from bot.actions.registry import ActionSpec, Applier, Planner, action
from bot.engine.plan import Change, Fact, Plan, Result, canonical_json
from bot.errors import InterlockBlocked, ParamError, PermanentError, RetryableError
from bot.runbook.model import Duration

# sorted as ruff wants; the module docstring says where each group comes from
__all__ = [
    "AUTO_MODE_EBS_DRIVER", "CORDONED_BY", "CSI_NODE_ID", "DNS1123_SUBDOMAIN", "EBS_DRIVER",
    "EBS_DRIVERS", "FENCED_STATES", "IN_TREE_EBS_PLUGIN", "LIVE_STATES", "OUT_OF_SERVICE_TAINT",
    "QUALIFIED_NAME", "TAG_CREATED_FOR_NAMESPACE", "TAG_CREATED_FOR_PV", "TAG_CREATED_FOR_PVC",
    "TAG_CSI_CLUSTER", "TAG_CSI_VOLUME_NAME", "TAINT_AT", "TAINT_BOOT_ID", "ZONE_KEYS", "ActionSpec",
    "Applier", "Change", "ClaimRef", "ClusterParams", "Duration", "Env", "Fact", "Finalizer",
    "InstanceId", "InterlockBlocked", "NodeName", "NodeParams", "Obj", "ObjectName", "ParamError",
    "PermanentError", "Plan", "Planner", "Result", "RetryableError", "TaintKey", "TaintValue",
    "VolumeId", "ZoneName", "action", "annotations_of", "boot_id_of", "canonical_json",
    "csi_instance_id_of", "ebs_driver_of_pv", "ebs_volume_id_of_pv", "ec2_tags", "has_taint",
    "heartbeat_of", "instance_id_of", "instance_state", "is_ebs_driver", "meta", "nodes_of_instance",
    "operator_of", "parse_time", "pod_claims", "pod_finished", "poll_interval", "pv_named_by_tags",
    "pv_zone", "ready_condition", "set_taint", "taints_of", "terminating", "tolerates", "va_node",
    "zone_of_node"
]
