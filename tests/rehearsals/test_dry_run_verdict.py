"""A dry run says what the real run would do: a verdict per step and overall, never "every step
finished" for a run the real one could not finish; and it claims nothing that did not happen."""

from __future__ import annotations

from bot.engine.runstate import AuditDraft
from bot.present.blockkit import final_summary
from bot.present.dryrun import dry_run_verdict
from bot.present.events import live_lines
from bot.present.views import run_view


def _finished_lines(st) -> list[str]:
    ev = AuditDraft(type="run.finished", actor="runbook-bot", ts=st.finished_at, payload={
        "status": str(st.status), "outcome": st.outcome, "compensations": st.compensations,
        "duration_seconds": 1.0})
    return live_lines(st, ev)


def test_a_dry_run_whose_taint_an_interlock_would_refuse_says_it_would_stop_there(rehearse):
    r = rehearse("node-hung")
    st = r.run("node-dead-ngns", node=r.facts["node"], dry_run=True)
    verdict = dry_run_verdict(run_view(st))
    by_key = {v.key: v for v in verdict.steps}
    assert by_key["fence"].text == "would wait for approval from sre-oncall, then apply"
    assert by_key["taint"].text.startswith("would be refused by interlock oos-taint: ")
    assert by_key["urgent"].text == "would post its message (a notify step runs in a dry run too)"
    # a skipped step says why in words, never as its expression
    assert any(v.text.startswith("skipped because ") for v in verdict.steps)
    assert not any("when is false" in v.text or "steps." in v.text for v in verdict.steps)
    assert not verdict.would_succeed and verdict.stop is by_key["taint"]
    assert verdict.headline.startswith("would stop at step taint because it would be refused by "
                                       "interlock oos-taint")
    assert "fence would change them first in a real run" in verdict.headline
    text = "\n".join(_finished_lines(st))
    assert "every step finished" not in text and f"{st.run_id} succeeded" not in text
    assert f"dry run {st.run_id} would stop at step taint" in text
    assert "  fence" in text and "  taint" in text  # one verdict line per step, by id
    slack = str(final_summary(run_view(st)))
    assert "would stop at step taint" in slack and "every step finished" not in slack
    # the closing message claims nothing that was not done: the instance still runs, no taint
    done = st.steps["done"].result or {}
    said = str(done.get("message") or st.steps["done"].message)
    assert "stays stopped" not in said and "keeps the node.kubernetes.io/out-of-service" not in said
    assert "running" in said


def test_a_dry_run_that_would_get_through_says_so_with_its_approvals_and_waits(rehearse):
    r = rehearse("node-dead")
    st = r.run("node-dead-ngns", node=r.facts["node"], dry_run=True)
    verdict = dry_run_verdict(run_view(st))
    by_key = {v.key: v for v in verdict.steps}
    assert by_key["taint"].text == "would wait for approval from sre-oncall, then apply"
    assert by_key["wait_detach"].kind == "would wait"
    assert verdict.would_succeed
    assert verdict.headline.startswith("would succeed (after 1 decision by people and ")
    text = "\n".join(_finished_lines(st))
    assert f"dry run {st.run_id} would succeed" in text and "every step finished" not in text
