"""zone-outage-ngns's closing message stays one readable Slack section however large the outage.

A hundred nodes in ten batches, five of them stuck on failed hosts, ten replaced mid-run, a batch
that failed and twenty claims still waiting: the summary names what needs a person and counts the
rest, in at most 3000 characters (one section). Before, it listed every node with its full reason
and a 100-node outage with stuck hosts failed its own summary step ("at most 3000 characters").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bot.actions.registry import Registry
from bot.runbook.loader import load_runbook
from bot.runbook.templating import render

RUNBOOKS = Path(__file__).parents[2] / "runbooks"
ZONE = "ap-southeast-1a"
STUCK = ("instance i-0123456789abcdef0 is still stopping 600 s after its batch began: a machine on "
         "a failed host can stay stopping for hours. Ask AWS (the host may have failed), or, if "
         "the zone outage is declared, have two people break glass on the step that taints")


def _node(i: int) -> str:
    return f"ip-10-0-{i // 250}-{i % 250}.ap-southeast-1.compute.internal"


def _context(n: int = 100) -> dict[str, Any]:
    batches: list[dict[str, Any]] = []
    for b in range(n // 10):
        names = [_node(b * 10 + k) for k in range(10)]
        if b == 9:  # a batch that failed as a whole
            batches.append({"item": names, "status": "failed", "result": None,
                            "error": "Throttling: Rate exceeded " + "x" * 300})
            continue
        items = []
        for k, name in enumerate(names):
            outcome, reason = "tainted", "out of service"
            if b < 5 and k == 0:
                outcome, reason = "stuck", STUCK
            elif k == 1:
                outcome, reason = "gone", "the Node was deleted during the run " + "y" * 400
            items.append({"node": name, "outcome": outcome, "reason": reason})
        batches.append({"item": names, "status": "succeeded", "error": None,
                        "result": {"items": items}})
    late = [{"claim": f"db/data-{i}", "outcome": "blocked", "reason": "no Ready node in " + "z" * 400}
            for i in range(20)]
    return {"params": {"zone": ZONE},
            "steps": {"recover": {"items": batches}, "fence_held": {"items": []},
                      "survey": {"outputs": {"done": [_node(999)]}},
                      "placement": {"result": {"items": late, "running": 60, "total": 80}}}}


def test_a_hundred_node_summary_fits_one_section_and_names_what_needs_a_person(
        catalog: Registry) -> None:
    rb = load_runbook(RUNBOOKS / "zone-outage-ngns.yaml", catalog=catalog)
    said = render(rb.step("summary").with_["message"], _context())
    assert len(said) <= 3000, len(said)
    assert f"Zone {ZONE}: 76 node(s) out of service in 10 batch(es)" in said
    assert "5 stuck: instance i-0123456789abcdef0 is still stopping" in said
    assert "9 gone: the Node was deleted during the run" in said
    assert f"{_node(0)} (stuck)" in said  # in full: what node-dead-ngns is re-run with
    assert "and 4 more" in said  # fourteen nodes not out of service, ten named
    assert "A batch of 10" in said and "failed: Throttling" in said
    assert "Claims: 60 of 80 in use again." in said and "And 17 more" in said
    assert "node-recovered" in said


def test_a_small_outage_names_every_node_that_is_not_out_of_service(catalog: Registry) -> None:
    rb = load_runbook(RUNBOOKS / "zone-outage-ngns.yaml", catalog=catalog)
    ctx = _context(20)
    said = render(rb.step("summary").with_["message"], ctx)
    assert said.startswith(f"Zone {ZONE}: 16 node(s) out of service in 2 batch(es). ")
    names = [_node(i) for i in (0, 1, 10, 11)]
    assert (f"Not out of service: {names[0]} (stuck), {names[1]} (gone), {names[2]} (stuck), "
            f"{names[3]} (gone). 2 gone: ") in said


def test_a_held_node_fenced_later_in_the_run_counts_as_out_of_service(catalog: Registry) -> None:
    """A machine held by interlock 8 at its batch (maybe alive) and fenced by ``fence_held`` once
    EC2 confirmed it down is out of service, not "held" or "dropped", in the closing message."""
    rb = load_runbook(RUNBOOKS / "zone-outage-ngns.yaml", catalog=catalog)
    names = [_node(k) for k in range(3)]
    recover = {"item": names, "status": "succeeded", "error": None, "result": {"items": [
        {"node": names[0], "outcome": "tainted", "reason": "fenced and out of service"},
        {"node": names[1], "outcome": "held", "reason": "the kubelet is silent"},
        {"node": names[2], "outcome": "held", "reason": "the kubelet is silent"}]}}
    later = {"item": names[1:], "status": "succeeded", "error": None, "result": {"items": [
        {"node": names[1], "outcome": "tainted", "reason": "fenced and out of service"},
        {"node": names[2], "outcome": "dropped", "reason": "changed since approval: Ready again"}]}}
    ctx = {"params": {"zone": ZONE}, "steps": {
        "recover": {"items": [recover]}, "fence_held": {"items": [later]},
        "survey": {"outputs": {"done": []}}, "placement": {"result": None}}}
    said = render(rb.step("summary").with_["message"], ctx)
    assert said.startswith(f"Zone {ZONE}: 2 node(s) out of service in 1 batch(es). ")
    assert f"Not out of service: {names[2]} (dropped)." in said
    assert "held" not in said
