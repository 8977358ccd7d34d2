"""``/metrics`` over real HTTP after driving runs on the engine's fakes: the counters' values."""

from __future__ import annotations

import subprocess
import sys

from bot.engine.commands import Approve
from bot.runtime.leases import HOST
from tests.fakes.engine_harness import make_engine, runbook
from tests.frontends.observe import endpoints, get, observe, scrape, serving, value

__all__ = ["make_engine"]  # the fixture

BOOKS = {
    "poke-and-set": runbook("poke-and-set", """
- id: poke
  title: Poke f
  action: fake.flaky
  with: {name: f, failures: 1}
  retries: {count: 2, backoff: 10s}
- id: change
  title: Set x
  action: fake.set
  with: {name: x, value: "on"}
""", approvals="groups: [sre]\n"),
    "set": runbook("set", """
- id: change
  title: Set y
  action: fake.set
  with: {name: y, value: "on"}
""", approvals="groups: [sre]\n"),
}


def test_a_run_with_a_retry_and_an_approval_is_counted_as_it_happened(make_engine) -> None:
    e = make_engine(BOOKS)
    metrics = observe(e)
    run = e.start("poke-and-set", by="alice")
    assert e.state(run).steps["poke"].status == "waiting"  # failed once: retried after 10 s
    e.clock.advance(10)
    e.runner.run_due()
    assert e.state(run).status == "awaiting_approval"
    e.clock.advance(300)  # the approver takes five minutes
    out = e.runner.submit(Approve(run_id=run, actor="bob", step="change"))
    assert out.ok, out.message
    e.clock.advance(2)
    e.runner.drive(run)
    assert e.state(run).status == "succeeded"

    with serving(endpoints(e, metrics)) as base:
        m = scrape(base)
    assert value(m, "runbook_bot_runs_total", runbook="poke-and-set", status="started") == 1
    assert value(m, "runbook_bot_runs_total", runbook="poke-and-set", status="succeeded") == 1
    assert value(m, "runbook_bot_runs_total", runbook="poke-and-set", status="failed") == 0
    steps = "runbook_bot_steps_total"
    assert value(m, steps, runbook="poke-and-set", action="fake.flaky", outcome="applied") == 1
    assert value(m, steps, runbook="poke-and-set", action="fake.set", outcome="applied") == 1
    assert value(m, steps, runbook="poke-and-set", action="fake.flaky", outcome="failed") == 0
    assert value(m, "runbook_bot_step_retries_total", runbook="poke-and-set", action="fake.flaky") == 1
    # the client's call records: two attempts, the first an error
    assert value(m, "runbook_bot_api_calls_total", service="fake", operation="Flaky") == 2
    assert value(m, "runbook_bot_api_errors_total", service="fake", operation="Flaky", code="Boom") == 1
    # the run's context is still resolved through the wrapped catalog, and its call counted
    assert e.events(run).count("run.context") == 1
    assert value(m, "runbook_bot_api_calls_total", service="sts", operation="GetCallerIdentity") == 1
    assert value(m, "runbook_bot_approval_wait_seconds_count", runbook="poke-and-set") == 1
    assert value(m, "runbook_bot_approval_wait_seconds_sum", runbook="poke-and-set") == 300
    assert value(m, "runbook_bot_approval_to_apply_seconds_count", runbook="poke-and-set") == 1
    assert value(m, "runbook_bot_approval_to_apply_seconds_sum", runbook="poke-and-set") == 2
    assert value(m, "runbook_bot_worker_last_loop_timestamp_seconds") == e.clock.now().timestamp() - 302


def test_refusals_interlocks_and_failures_are_counted(make_engine) -> None:
    e = make_engine(BOOKS)
    metrics = observe(e)
    e.world.lock("y")
    run = e.start("set", by="alice")
    assert e.state(run).steps["change"].blocked
    assert not e.runner.submit(Approve(run_id=run, actor="alice", step="change")).ok  # own run

    with serving(endpoints(e, metrics)) as base:
        m = scrape(base)
    assert value(m, "runbook_bot_steps_total", runbook="set", action="fake.set", outcome="refused") == 1
    assert value(m, "runbook_bot_interlocks_blocked_total", rule="fake-lock") == 1
    assert value(m, "runbook_bot_commands_refused_total", command="approve") == 1
    assert value(m, "runbook_bot_steps_total", runbook="set", action="fake.set", outcome="applied") == 0


def test_a_lease_taken_over_from_a_dead_worker_is_counted_and_logged(make_engine, caplog) -> None:
    e = make_engine(BOOKS)
    metrics = observe(e)
    run = e.start("set", by="alice")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = f"{HOST}:{gone.pid}:deadbeef"
    assert e.db.claim(run, owner=dead, now=e.clock.now(), ttl=3600)
    with caplog.at_level("WARNING", logger="bot.runtime.leases"):
        e.runner.submit(Approve(run_id=run, actor="bob", step="change"))
    assert [r.run_id for r in caplog.records if "took over" in r.getMessage()] == [run]
    with serving(endpoints(e, metrics)) as base:
        assert value(scrape(base), "runbook_bot_lease_takeovers_total") == 1


def test_the_endpoints_take_no_body_and_only_get(make_engine) -> None:
    e = make_engine(BOOKS)
    metrics = observe(e)
    with serving(endpoints(e, metrics)) as base:
        for path in ("/metrics", "/readyz", "/healthz"):
            status, _, body = get(base + path, data=b"x")
            assert status == 413 and "at most 0 bytes" in body, (path, status, body)
        assert get(base + "/nothing")[0] == 404
        assert get(base + "/healthz")[:3:2] == (200, "ok\n")


def test_every_metric_is_documented_and_the_alerts_name_only_metrics_that_exist() -> None:
    import re
    from pathlib import Path

    from ruamel.yaml import YAML

    from bot.frontends.metrics import Metrics

    root = Path(__file__).resolve().parents[2]
    names = set()
    for family in Metrics().registry.collect():
        names.add(family.name + ("_total" if family.type == "counter" else ""))
    doc = (root / "docs" / "observability.md").read_text()
    assert {n for n in names if f"`{n}`" not in doc} == set()
    rules = YAML(typ="safe").load((root / "deploy" / "prometheus-rules.yaml").read_text())
    exprs = [r["expr"] for g in rules["spec"]["groups"] for r in g["rules"]]
    used = {m for e in exprs for m in re.findall(r"runbook_bot_[a-z_]+", e)}
    known = names | {f"{n}_bucket" for n in names}
    assert used and used <= known, used - known


def test_reads_served_from_the_pass_are_not_counted_as_api_calls() -> None:
    from bot.engine.plan import ApiCall
    from bot.frontends.metrics import Metrics

    m = Metrics()
    m.calls_made([ApiCall(service="ec2", operation="DescribeInstances"),
                  ApiCall(service="ec2", operation="DescribeInstances", outcome="cached")])
    assert m.api_calls.labels("ec2", "DescribeInstances")._value.get() == 1
    assert m.api_reads_shared.labels("ec2", "DescribeInstances")._value.get() == 1
    assert m.api_errors.labels("ec2", "DescribeInstances", "cached")._value.get() == 0


def test_a_run_its_outcome_rules_end_partial_is_counted_as_partial_not_succeeded(make_engine) -> None:
    from tests.engine.test_run_outcome import RULES, STEPS

    e = make_engine({"judged": runbook("judged", STEPS) + RULES})
    metrics = observe(e)
    e.world.set("x", "on")
    run = e.start("judged")
    assert e.state(run).status == "partial"
    with serving(endpoints(e, metrics)) as base:
        m = scrape(base)
    runs = "runbook_bot_runs_total"
    assert value(m, runs, runbook="judged", status="partial") == 1
    assert value(m, runs, runbook="judged", status="succeeded") == 0
    assert value(m, runs, runbook="judged", status="failed") == 0
