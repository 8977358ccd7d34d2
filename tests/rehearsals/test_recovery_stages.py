"""Time to recovery, measured on the sandbox: a node-dead-ngns run records the stages of its
recovery (fenced, tainted, VolumeAttachments gone, volume attached, pod Running elsewhere) in
order, and ``stage_times`` reads them back with sane times and shares."""

from __future__ import annotations

from bot.present.recovery import stage_times

WORLD = ["fenced", "tainted", "attachments_gone", "volume_attached", "pod_running"]


def test_a_node_dead_run_records_its_recovery_stages_in_order(rehearse):
    r = rehearse("node-dead")
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"])
    assert st.status == "succeeded", st.outcome
    events = r.events(st.run_id)
    reached = [e.payload for e in events if e.type == "stage.reached"]
    assert {p["stage"] for p in reached} == set(WORLD)
    assert all(p["source"].startswith("step:") for p in reached)
    assert {p.get("node") for p in reached if p["stage"] == "tainted"} == {f["dead_node"]}
    assert {p.get("volume") for p in reached if p["stage"] == "volume_attached"} == {f["volume_id"]}

    stages = stage_times(events)
    names = [s.stage for s in stages]
    assert names[0] == "run_started" and names[-1] == "run_finished"
    firsts = [names.index(n) for n in WORLD]
    assert firsts == sorted(firsts), names  # in the order a recovery passes them
    seconds = [s.seconds for s in stages]
    assert seconds == sorted(seconds) and seconds[0] == 0.0
    assert stages[-1].seconds > 0
    assert abs(sum(s.share for s in stages) - 1.0) < 0.01
    pod = next(s for s in stages if s.stage == "pod_running")
    assert f["pod"] in pod.subject and 0 < pod.seconds <= stages[-1].seconds
    assert r.verified(st.run_id)
