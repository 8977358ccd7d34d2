"""How a DELETE treats the object's dependents: the ``propagationPolicy`` of its DeleteOptions.

The API server decides it per request and leaves the work to the garbage collector
(``bot.sim.controllers.ownergc``): ``Background`` removes the object at once and the collector
deletes its dependents afterwards; ``Foreground`` and ``Orphan`` keep the object, with
``deletionTimestamp`` and a finalizer (``foregroundDeletion``, ``orphan``) that only the collector
lifts, once the dependents are gone or no longer name it. A request that names no policy gets the
resource's default: ``Orphan`` for batch/v1 Jobs (kept so for backwards compatibility, which is
why ``kubectl delete job`` sends ``Background`` explicitly), ``Background`` for every other kind
the sandbox serves. The deprecated ``orphanDependents`` flag still maps onto the two.
"""

from __future__ import annotations

from typing import Any

from bot.sim.errors import ApiError
from bot.sim.resources import Resource

BACKGROUND, FOREGROUND, ORPHAN = "Background", "Foreground", "Orphan"
POLICIES = (FOREGROUND, BACKGROUND, ORPHAN)  # in the order the API server's message lists them
ORPHAN_FINALIZER = "orphan"
FOREGROUND_FINALIZER = "foregroundDeletion"
FINALIZER = {ORPHAN: ORPHAN_FINALIZER, FOREGROUND: FOREGROUND_FINALIZER}


def default_policy(res: Resource) -> str:
    return ORPHAN if (res.group, res.version, res.kind) == ("batch", "v1", "Job") else BACKGROUND


def _invalid(detail: str) -> ApiError:
    return ApiError(422, "Invalid", f'DeleteOptions.meta.k8s.io "" is invalid: {detail}')


def requested_policy(res: Resource, options: dict[str, Any], query: dict[str, str]) -> str:
    """The policy of one DELETE, from its body or its query string, checked as the API server
    checks DeleteOptions (422 naming the field and the values it accepts)."""
    policy = options.get("propagationPolicy", query.get("propagationPolicy"))
    orphan = options.get("orphanDependents", query.get("orphanDependents"))
    if policy is not None and orphan is not None:
        raise _invalid(f"propagationPolicy: Invalid value: \"{policy}\": orphanDependents and "
                       "deletionPropagation cannot be both set")
    if policy is not None:
        if policy not in POLICIES:
            raise _invalid(f'propagationPolicy: Unsupported value: "{policy}": supported values: '
                           + ", ".join(f'"{p}"' for p in POLICIES))
        return str(policy)
    if orphan is not None:
        return ORPHAN if str(orphan).lower() == "true" else BACKGROUND
    return default_policy(res)
