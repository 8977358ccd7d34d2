"""A zone outage that does not recover the whole zone ends ``partial``, in every view.

zone-outage-ngns goes on past a node it cannot fence (``on_failure: continue``), so it reaches its
last step with a node of the zone still holding its volumes. Its outcome rules (``spec.outcome``)
must then say so: the stored run, the audit event that seals it, the terminal and the Slack card
all read ``partial`` with the reason, never ``succeeded``.
"""

from __future__ import annotations

import pytest

from bot.cli.runs import exit_of
from bot.present.blockkit import final_summary, run_card
from bot.present.console import runs_table, status
from bot.present.events import live_lines
from bot.present.views import run_view, stored_runbook
from tests.fakes.blockkit_limits import validate_blocks

ZONE = "ap-southeast-1a"
pytestmark = pytest.mark.slow


def test_a_zone_run_with_a_node_iam_will_not_let_it_fence_ends_partial_everywhere(rehearse):
    """One of the two dead machines lacks the cluster tag the IAM policy is conditioned on, so its
    StopInstances is refused: that node stays untainted and the run goes on. Without the outcome
    rules the run reported ``succeeded: every step finished``."""
    r = rehearse("az-outage", policy={"max_out_of_service_nodes": 20}, nodes=2, hung=2)
    f = r.facts
    odd, node = f["instance_ids"][1], f["dead_nodes"][1]
    ec2 = r.sandbox.ec2_client()
    ec2.delete_tags(Resources=[odd], Tags=[{"Key": "kubernetes.io/cluster/sandbox"}])
    ec2.create_tags(Resources=[odd], Tags=[{"Key": "eks:eks-cluster-name", "Value": "sandbox"}])
    r.sandbox.advance(300)  # NotReady longer than fence_min_not_ready
    run_id = r.run("zone-outage-ngns", zone=ZONE).run_id

    st = r.store.load(run_id)  # the run as stored, not as the driver last held it
    assert r.sandbox.ec2.instance_state(odd) == "running"
    assert st.status == "partial", (st.status, st.outcome)
    assert st.outcome.startswith(f"1 node(s) of {ZONE} not out of service: {node} failed ("), st.outcome
    assert "UnauthorizedOperation" in st.outcome and "re-run this runbook" in st.outcome
    assert exit_of(st.status) == 3

    # the audit event that seals the run names the rule that decided, and the chain verifies
    [end] = [e for e in r.events(run_id) if e.type == "run.finished"]
    assert end.payload["status"] == "partial" and end.payload["outcome"] == st.outcome
    assert end.payload["rule"] == 3 and "selectattr('outcome', 'in', ['failed', 'dropped'])" \
        in end.payload["when"]
    assert r.verified(run_id)

    # the terminal: the live line, `status` and `runs`
    assert live_lines(st, end)[0] == f"run {run_id} partial: {st.outcome}"
    view = run_view(st, stored_runbook(st))
    shown = status(view)
    assert "status: partial" in shown and f"outcome: {st.outcome}" in shown
    assert "succeeded: every step finished" not in shown
    row = next(line for line in runs_table([view]).splitlines() if line.startswith(run_id))
    assert row.split()[1] == "partial"

    # Slack: the card and the thread's last reply, as Slack would accept them
    card, last = run_card(view), final_summary(view)
    assert validate_blocks(card) == [] and validate_blocks(last) == []
    fields = [f["text"] for b in card if b["type"] == "section" for f in b.get("fields") or ()]
    assert "*Status*\npartial" in fields, fields
    assert any(b["type"] == "section" and b["text"]["text"].startswith("*Outcome:* 1 node(s)")
               for b in card if "text" in b)
    head = last[0]["text"]["text"]
    assert head.startswith(f":warning: *Run `{run_id}` partial*: 1 node(s) of {ZONE}"), head
    # no invariant broken (assert_clean would also refuse the StopInstances IAM refused on purpose)
    assert not r.judge(run_id).violations and node in st.steps["summary"].message
