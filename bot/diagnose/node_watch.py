"""The node watcher's triage: the ``Triage`` port of ``bot/engine/node_watch.py``.

Sick is not dead. Each suspect the watcher hands over is judged by ``actions/liveness.classify``,
the one rule interlock 8, ``diagnose`` and the alert cards use, from the Node and Lease the watches
already hold and ONE EC2 read for the whole batch (``DescribeInstanceStatus`` with
``IncludeAllInstances``: the state and the status checks of every instance at once), made only
for the suspects whose kubelet is silent. Verdicts: ``dead`` (EC2 confirms the machine down:
stopped, terminated, gone, or a status check impaired), ``hung`` (silent, but the instance runs
and passes its checks: the fence is break-glass only), ``sick`` (a live kubelet posting
``Ready=False``: its cause, never a fence), or none (Ready after all). Read-only.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from bot.actions.liveness import AMBIGUOUS, DEAD, SICK, classify
from bot.actions.objects import instance_id_of
from bot.engine.node_watch import Suspect, Triage, Triaged, Verdict, renewed_at

# liveness's verdicts -> the watcher's (a silent machine EC2 does not confirm down is hung)
VERDICTS: dict[str, Verdict] = {DEAD: "dead", AMBIGUOUS: "hung", SICK: "sick"}


class InstanceStatuses(Protocol):
    def describe_instance_status(self, instance_ids: Sequence[str]) -> dict[str, dict[str, Any]]: ...


def _silent(s: Suspect, now: datetime, grace: float) -> bool:
    renewed = renewed_at(s.lease)
    return renewed is None or (now - renewed).total_seconds() >= grace


def triage_with(ec2: InstanceStatuses, *, grace: float) -> Triage:
    """A ``Triage`` reading EC2 through ``ec2`` (a cluster's ``Ec2Client``, bound read-only)."""
    def triage(cluster: str, suspects: Sequence[Suspect], now: datetime) -> list[Triaged]:
        ids = {s.node: instance_id_of(s.node_obj or {}) for s in suspects}
        wanted = sorted({i for s in suspects if (i := ids[s.node]) and _silent(s, now, grace)})
        statuses = ec2.describe_instance_status(wanted) if wanted else {}
        out = []
        for s in suspects:
            iid = ids[s.node]
            st = statuses.get(iid) if iid else None
            instance = ({"State": st.get("InstanceState") or {}} if st is not None
                        else {"State": {"Name": "absent"}} if iid in wanted else None)
            lv = classify(node=s.node_obj, lease=s.lease, instance=instance, status=st, now=now,
                          grace=grace)
            out.append(Triaged(s.node, VERDICTS.get(lv.verdict), lv.words()))
        return out
    return triage
