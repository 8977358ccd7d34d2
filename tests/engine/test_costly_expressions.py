"""A run whose runbook evaluates a costly expression fails fast and clearly; the worker's other
runs carry on. The drive runs in a thread with a deadline, so a hang fails the test."""

from __future__ import annotations

import threading
import time

import pytest

from tests.fakes.engine_harness import runbook

NESTED = "{% for a in params.s %}{% for b in params.s %}{% endfor %}{% endfor %}"
POISON = {
    "nested-loops": runbook("poison", f"""
- id: read
  title: Read
  action: fake.read
  with: {{name: "{NESTED}"}}
""", params="s: {type: string, required: true}\n"),
    "padding": runbook("poison", """
- id: read
  title: Read
  action: fake.read
  when: "'x'.center(params.width) != ''"
  with: {name: x}
""", params="width: {type: integer, required: true}\n"),
}
FINE = runbook("fine", """
- id: read
  title: Read
  action: fake.read
  with: {name: x}
""")


def _drive_within(seconds: float, fn) -> float:
    done = threading.Event()
    failed: list[BaseException] = []
    started = time.monotonic()

    def work() -> None:
        try:
            fn()
        except BaseException as e:
            failed.append(e)
        done.set()

    threading.Thread(target=work, daemon=True).start()
    assert done.wait(seconds), f"the run did not finish within {seconds} s"
    if failed:
        raise failed[0]
    return time.monotonic() - started


@pytest.mark.parametrize("kind", sorted(POISON))
def test_a_run_with_a_costly_expression_fails_fast_and_other_runs_carry_on(make_engine, kind):
    e = make_engine({"poison": POISON[kind], "fine": FINE})
    params = {"s": "x" * 100_000} if kind == "nested-loops" else {"width": 10**9}
    holder: dict[str, str] = {}
    took = _drive_within(30, lambda: holder.setdefault("run", e.start("poison", **params)))
    assert took < 5
    st = e.state(holder["run"])
    assert st.status == "failed"
    assert "is too costly to evaluate" in (st.steps["read"].error or st.outcome or "")
    fine = e.start("fine")
    assert e.state(fine).status == "succeeded"
    assert e.verified(holder["run"])
