"""The shipped actions, listed explicitly: this tuple is the whole catalog a runbook can call.

Each module defines its actions (``ACTIONS``) next to their implementation; nothing registers itself
on import, so the catalog is the same whatever was imported first. A new module's ``ACTIONS`` is
added here (docs/actions.md, "Adding an action"). Importing this module imports no SDK, so
``runbook-bot validate`` and ``--help`` stay fast.
"""

from __future__ import annotations

from typing import Any

from bot.actions import (
    claims,
    ec2,
    ec2_snapshots,
    flow,
    kube,
    kube_storage,
    node_health,
    nodeclaims,
    pv_blockers,
    reports,
    volumeattachments_delete,
    volumes_detach,
    zone,
    zone_fence,
)
from bot.actions.registry import ActionSpec, Registry

BUILTIN: tuple[ActionSpec[Any], ...] = (
    *kube.ACTIONS,
    *node_health.ACTIONS,
    *kube_storage.ACTIONS,
    *volumeattachments_delete.ACTIONS,
    *claims.ACTIONS,
    *pv_blockers.ACTIONS,
    *reports.ACTIONS,
    *ec2.ACTIONS,
    *volumes_detach.ACTIONS,
    *nodeclaims.ACTIONS,
    *ec2_snapshots.ACTIONS,
    *flow.ACTIONS,
    *zone.ACTIONS,
    *zone_fence.ACTIONS,
)


def builtin_actions() -> Registry:
    """A registry of every shipped action (a new one each call: callers may add their own)."""
    return Registry(BUILTIN)
