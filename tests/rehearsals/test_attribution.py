"""CloudTrail attribution on the wire: with a cluster ``role_arn``, a run's EC2 writes are made with
an AssumeRole session of its own (SourceIdentity = run id, tags = requester and approvers), as the
sandbox's STS endpoint and the access key that signed each EC2 request show."""

from __future__ import annotations

import json

import pytest

from bot.sim.iam import ADMIN_KEY
from bot.sim.rehearsal import REPO, Rehearsal
from tests.rehearsals.conftest import assert_clean

ROLE = "arn:aws:iam::123456789012:role/runbook-bot"
WRITES = {"StopInstances", "DetachVolume", "DeleteVolume", "CreateSnapshot", "TerminateInstances"}
pytestmark = pytest.mark.slow


@pytest.fixture
def with_role(rehearse):
    def start(scenario: str, role_arn: str | None = ROLE, **options: str) -> Rehearsal:
        return rehearse(scenario, role_arn=role_arn, **options)

    return start


def _run_sessions(r: Rehearsal, run_id: str):
    return [c for c in r.sandbox.ec2.sts.calls
            if c.action == "AssumeRole" and c.source_identity == run_id]


def _bots(r: Rehearsal):
    """The EC2 requests the bot made (the sandbox's controllers sign with their own key)."""
    return [w for w in r.sandbox.ec2.wire if w.access_key != ADMIN_KEY]


def _writes(r: Rehearsal):
    return [w for w in _bots(r) if w.action in WRITES and not w.dry_run]


def test_a_run_assumes_one_session_named_for_it_and_its_writes_use_it(with_role):
    r = with_role("node-hung")
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"])
    assert st.status == "succeeded", st.outcome
    [session] = _run_sessions(r, st.run_id)
    assert session.role_arn == ROLE
    assert session.session_name == f"runbook-bot-{st.run_id}"
    assert session.access_key == "testing"  # assumed from the bot's base identity
    assert session.tags == {"runbook-bot-run": st.run_id, "runbook-bot-requester": "alice",
                            "runbook-bot-approver-1": "bob"}
    assert session.issued_key
    writes = _writes(r)
    assert {w.action for w in writes} == {"StopInstances"}  # the fence (re-sent while it waits)
    assert {w.access_key for w in writes} == {session.issued_key}
    # reads and DryRun checks go through the cluster's shared session, never the run's
    reads = [w for w in _bots(r) if w.action.startswith("Describe") or w.dry_run]
    assert reads and session.issued_key not in {w.access_key for w in reads}
    # the audit shows the AssumeRole among the fence's API calls
    applied = [e for e in r.events(st.run_id)
               if e.type == "step.applied" and e.payload.get("step") == "fence"]
    assert any(c["service"] == "sts" and c["operation"] == "AssumeRole"
               for e in applied for c in e.payload.get("calls") or ())
    assert_clean(r, st.run_id)


def test_a_terminate_fence_is_signed_with_the_runs_session_not_the_shared_client(with_role):
    r = with_role("spot-node-dead")
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"])
    assert st.status == "succeeded", st.outcome
    [session] = _run_sessions(r, st.run_id)
    terminates = [w for w in _writes(r) if w.action == "TerminateInstances"]
    assert terminates, [w.action for w in _writes(r)]
    assert {w.access_key for w in terminates} == {session.issued_key}
    assert_clean(r, st.run_id)


def test_other_approvers_get_a_new_session_of_the_same_run(with_role):
    r = with_role("stuck-detach")
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"])
    assert st.status == "succeeded", st.outcome
    sessions = _run_sessions(r, st.run_id)
    assert [sorted(v for k, v in s.tags.items() if k.startswith("runbook-bot-approver-"))
            for s in sessions][-1] == ["bob", "carol"]  # the two-person force detach
    assert len({tuple(sorted(s.tags.items())) for s in sessions}) == len(sessions)  # none repeated
    keys = {s.issued_key: s for s in sessions}
    writes = _writes(r)
    assert writes and all(w.access_key in keys for w in writes)
    forced = [w for w in writes if w.action == "DetachVolume"][-1]
    assert keys[forced.access_key].tags["runbook-bot-approver-2"] == "carol"
    assert_clean(r, st.run_id)


def test_without_a_role_arn_there_is_no_session_and_writes_use_the_base_identity(with_role):
    r = with_role("node-hung", role_arn=None)
    st = r.run("node-dead-ngns", node=r.facts["node"])
    assert st.status == "succeeded", st.outcome
    assert [c for c in r.sandbox.ec2.sts.calls if c.action == "AssumeRole"] == []
    assert {w.access_key for w in _writes(r)} == {"testing"}


def test_a_role_that_may_not_tag_its_session_fences_nothing(with_role, tmp_path):
    """Without sts:TagSession the run's session cannot be assumed: the write is never sent.

    The cluster's shared session is tagged too (the trust policy requires it of every session), so
    the bot may tag that one: the policy refuses only a session tagged with a run."""
    policy = json.loads((REPO / "deploy" / "iam-policy.json").read_text())
    for st in policy["Statement"]:
        if st["Sid"] == "AssumeClusterRoles":
            st["Action"] = ["sts:AssumeRole", "sts:SetSourceIdentity"]
            policy["Statement"].append({
                "Sid": "TagTheSharedSessionOnly", "Effect": "Allow", "Action": "sts:TagSession",
                "Resource": st["Resource"],
                "Condition": {"Null": {"aws:RequestTag/runbook-bot-run": "true"}}})
            break
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(policy))
    r = with_role("node-hung", iam_policy=str(path))
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"])
    assert st.status != "succeeded"
    fence = st.steps["fence"]
    assert fence.status == "failed" and "AccessDenied" in fence.error, fence.error
    assert _writes(r) == []  # no StopInstances left the bot
    instance = st.steps["node"].result["instance_id"]
    assert r.sandbox.ec2.instance_state(instance) == "running"  # the hung node was not stopped
    assert [a for _, a, _ in r.sandbox.ec2.refused] == ["sts:TagSession"]
    failed = [e for e in r.events(st.run_id)
              if e.type == "step.failed" and e.payload.get("step") == "fence"]
    assert any(c["service"] == "sts" and c["outcome"] == "AccessDenied"
               for e in failed for c in e.payload.get("calls") or ())
