"""An approval carries to a re-planned batch only when the batch did nothing but lose items.

``plan.narrowed`` decides it for the conductor: the dropped items, or None (ask again). Before,
it compared only ``batch.common`` and ``batch.items``, so a re-planned batch that had gained an
approvers raise (a machine found to hold local data), another change, other data or another fact
outside the batch returned ``{}``, and the conductor moved the votes to the new hash without
counting them against the larger number. The shape is that of ``k8s.zone.fence_taint``.
"""

from __future__ import annotations

from typing import Any

import pytest

from bot.engine.approvals import RAISE_KEY
from bot.engine.plan import Change, Fact, Plan, narrowed

CLUSTER = Fact("cluster c1", "out_of_service_nodes", [])
ZONE = Fact("zone az1", "nodes_outside", [])


def _node(n: int, *, ready: str = "Unknown", state: str = "running") -> tuple[list[Change], list[Fact]]:
    return ([Change("Instance", f"i-{n}", "force-stop", state, "stopped"),
             Change("Node", f"n{n}", "taint", "", "node.kubernetes.io/out-of-service")],
            [Fact(f"node n{n}", "ready", ready), Fact(f"instance i-{n}", "state", state)])


def _batch(*, back: bool = False, data: dict[str, Any] | None = None,
           changes: tuple[Change, ...] = (), facts: tuple[Fact, ...] = (ZONE, CLUSTER)) -> Plan:
    """Nodes n1 and n2 in a batch; ``back``: n2 came back Ready and is dropped."""
    all_changes: list[Change] = []
    all_facts: list[Fact] = [facts[0]]
    items: dict[str, str] = {}
    nodes: dict[str, Any] = {}
    for n in (1, 2):
        ch, fs = _node(n, ready="True" if back and n == 2 else "Unknown")
        all_facts += fs
        if back and n == 2:
            continue
        all_changes += ch
        items[f"n{n}"] = f"h{n}"
        nodes[f"n{n}"] = {"instance_id": f"i-{n}", "stop": True}
    dropped = {"n2": "the node came back Ready"} if back else {}
    return Plan(action="k8s.zone.fence_taint", params={},
                changes=tuple(all_changes) + changes, facts=tuple(all_facts) + facts[1:],
                data={"batch": {"common": "c", "items": items, "dropped": dropped},
                      "nodes": nodes, **(data or {})})


def test_a_batch_that_only_lost_an_item_whose_facts_changed_narrows_the_approved_one():
    assert narrowed(_batch().to_dict(), _batch(back=True)) == {"n2": "the node came back Ready"}


def test_a_batch_planned_again_unchanged_narrows_to_nothing_dropped():
    assert narrowed(_batch().to_dict(), _batch()) == {}


RAISE = {RAISE_KEY: {"by": 1, "why": "THE FENCE DESTROYS DATA: claim db/data-0"}}


@pytest.mark.parametrize(("old", "new"), [
    # a raise that appeared: the approvers were fewer than the new plan needs
    ({}, {"data": RAISE}),
    ({"data": RAISE}, {"data": {RAISE_KEY: {"by": 1, "why": "THE FENCE DESTROYS DATA: another"}}}),
    ({"data": RAISE}, {"data": {RAISE_KEY: {"by": 2, "why": RAISE[RAISE_KEY]["why"]}}}),
    # other data outside the batch
    ({}, {"data": {"mode": "terminate"}}),
    # a change outside the batch's items
    ({}, {"changes": (Change("Cluster", "c1", "annotate", "", "x"),)}),
    # a fact outside the batch's items, read differently
    ({}, {"facts": (Fact("zone az1", "nodes_outside", ["n9 (zone az2)"]), CLUSTER)}),
    ({}, {"facts": (ZONE, Fact("cluster c1", "out_of_service_nodes", ["n7", "n8"]))}),
])
def test_a_batch_that_changed_anything_outside_its_items_is_not_narrowed(old, new):
    approved = _batch(**old).to_dict()
    for back in (False, True):
        assert narrowed(approved, _batch(back=back, **new)) is None, (old, new, back)


def test_a_kept_items_own_data_must_be_as_approved():
    new = _batch(back=True)
    nodes = {"n1": {"instance_id": "i-1", "stop": False}}  # n1 is no longer stopped
    changed = Plan(action=new.action, params={}, changes=new.changes, facts=new.facts,
                   data={**new.data, "nodes": nodes})
    assert narrowed(_batch().to_dict(), changed) is None


def test_a_batch_raise_that_stays_the_same_still_narrows():
    assert narrowed(_batch(data=RAISE).to_dict(), _batch(back=True, data=RAISE)) == {
        "n2": "the node came back Ready"}
