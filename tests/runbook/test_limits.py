"""Expressions and templates that would hang a worker or allocate gigabytes fail fast and clearly.

Each attack runs in a child process with a memory cap and a timeout, so an attack that got through
shows as a failed test, not as a stalled or swapping test run.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import textwrap

import pytest

from bot.errors import ExpressionError, RunbookError
from bot.runbook.limits import MAX_SEQUENCE
from bot.runbook.loader import load_text
from bot.runbook.templating import evaluate, render

# ('e'xpression or 't'emplate, source); params come at run time, so no static check sees them
ATTACKS = [
    ("e", "(params.nine ** 999) ** 999"),
    ("e", "params.big ** 999"),
    ("e", "'x'.center(params.huge)"),
    ("e", "'x'.ljust(params.huge)"),
    ("e", "'x'.rjust(params.huge)"),
    ("e", "'x'.zfill(params.huge)"),
    ("e", "'\\t'.expandtabs(params.huge)"),
    ("e", "params.s.replace('x', params.s)"),
    ("e", "params.s.join([params.s, params.s])"),
    ("e", "params.wide.format(1)"),
    ("e", "'{:{}}'.format(1, params.huge)"),
    ("e", "params.pct % 1"),
    ("e", "'%*d' % (params.huge, 1)"),
    ("e", "'x'|center(params.huge)"),
    ("e", "params.pct|format(1)"),
    ("e", "params.s|replace('x', params.s)"),
    ("e", "[params.s, params.s]|join(params.s)"),
    ("e", "'a b c'|wordwrap(1, wrapstring=params.s)"),
    ("e", "'x'|indent(params.huge, true)"),
    ("e", "[1]|tojson(indent=params.huge)"),
    ("e", "[1]|slice(params.huge)|list"),
    ("e", "[1]|batch(params.huge, 'x')|list"),
    ("e", "[params.s]|map('center', params.huge)|list"),
    ("e", "params.amp|forceescape|forceescape|forceescape|forceescape|forceescape"),
    ("t", "{% for a in params.s %}{% for b in params.s %}{% endfor %}{% endfor %}"),
    ("t", "{% for a in params.s %}{% for b in params.s %}{{ a }}{% endfor %}{% endfor %}"),
    ("t", "{% for a in params.s %}{{ params.s }}{% endfor %}"),
]
PARAMS = {"nine": 9, "big": 10**1000, "huge": 10**9, "s": "x" * MAX_SEQUENCE,
          "wide": "{:999999999}", "pct": "%999999999d", "amp": "&" * 50_000}

_CHILD = textwrap.dedent("""
    import json, sys, time
    from bot.runbook.templating import evaluate, render
    attacks, params = json.loads(sys.stdin.read())
    params["big"] = 10 ** 1000
    for kind, source in attacks:
        started = time.monotonic()
        try:
            value = (evaluate if kind == "e" else render)(source, {"params": params})
            outcome = f"built {len(str(value))} characters"
        except Exception as e:
            outcome = f"{type(e).__name__}: {e}"
        print(json.dumps([source, outcome, time.monotonic() - started]), flush=True)
""")


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2_000_000_000, 2_000_000_000))


@pytest.fixture(scope="module")
def outcomes() -> dict[str, tuple[str, float]]:
    params = {k: v for k, v in PARAMS.items() if k != "big"}
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps([ATTACKS, params]),
                              capture_output=True, text=True, timeout=60, preexec_fn=_capped)
        out = done.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    return {source: (outcome, seconds) for source, outcome, seconds in map(json.loads, out.splitlines())}


@pytest.mark.parametrize(("kind", "source"), ATTACKS, ids=[s for _, s in ATTACKS])
def test_an_expression_that_would_build_too_much_or_run_too_long_is_refused_fast(
    kind: str, source: str, outcomes: dict[str, tuple[str, float]]
) -> None:
    assert source in outcomes, "the attack hung the evaluation (no answer within the timeout)"
    outcome, seconds = outcomes[source]
    assert outcome.startswith("ExpressionError: ") and "is too costly to evaluate" in outcome, outcome
    assert seconds < 2.0


@pytest.mark.parametrize(
    ("source", "value"),
    [("2 ** 1000", 2**1000), ("'x'.center(80)|length", 80), ("'%5d' % 42", "   42"),
     ("'{:>6}'.format('ab')", "    ab"), ("params.s|length", MAX_SEQUENCE),
     ("params.s|replace('x', 'y')|length", MAX_SEQUENCE), ("['a', 'b']|join(', ')", "a, b"),
     ("'a\\nb'|indent(2, true)", "  a\n  b"), ("[1, 2, 3]|batch(2, 0)|list", [[1, 2], [3, 0]]),
     ("{'a': [1]}|tojson(indent=2)|length", 22)],
)
def test_ordinary_expressions_stay_within_the_limits(source: str, value: object) -> None:
    assert evaluate(source, {"params": {"s": "x" * MAX_SEQUENCE}}) == value


def test_a_loop_over_a_long_list_within_the_budget_renders() -> None:
    items = list(range(300))
    text = render("{% for a in params.xs %}{% for b in params.xs %}.{% endfor %}{% endfor %}",
                  {"params": {"xs": items}})
    assert len(text) == 90_000


def test_the_time_budget_stops_a_slow_template(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bot.runbook.limits.MAX_SECONDS", 0.0)
    with pytest.raises(ExpressionError, match=r"too costly to evaluate: it ran for more than 0 s"):
        render("{% for a in params.s %}{{ a }}{% endfor %}", {"params": {"s": "abc"}})


def test_the_budget_is_per_evaluation_not_per_process() -> None:
    source = "{% for a in params.s %}{% endfor %}"
    for _ in range(5):  # each walks 60 % of the budget
        render(source, {"params": {"s": "x" * (MAX_SEQUENCE * 6 // 10)}})


LITERAL = [
    ("9 ** 999 ** 999", "'**' may not be nested"),
    ("2 ** 99999", "exponent 99999 is too large"),
    ("'x'.center(1000000000)", "center(1000000000) would build 1000000000 items"),
    ("'{:999999999}'.format(1)", "the format would build"),
    ("'%999999999d' % 1", "the format would build"),
    ("'x'|indent(999999999)", "|indent(999999999) would build"),
    ("{% for a in [1] recursive %}{{ loop([a]) }}{% endfor %}", "recursive loops are not allowed"),
]


@pytest.mark.parametrize(("payload", "words"), LITERAL, ids=[p for p, _ in LITERAL])
def test_a_literal_over_a_limit_is_a_located_error_when_the_runbook_is_validated(
    payload: str, words: str, minimal: str, catalog: object
) -> None:
    expr = payload if payload.startswith("{%") else "{{ " + payload + " }}"
    text = minimal.replace('"ready={{ steps.read.outputs.ready }}"', json.dumps(expr))
    with pytest.raises(RunbookError) as caught:
        load_text(text, file="rb.yaml", catalog=catalog)  # type: ignore[arg-type]
    (problem,) = caught.value.problems
    assert (problem.line, problem.col) == (23, 18)
    assert "is too costly to evaluate" in problem.message and words in problem.message


def test_validate_on_the_command_line_names_the_costly_expression(tmp_path, minimal: str) -> None:
    path = tmp_path / "rb.yaml"
    path.write_text(minimal.replace('"ready={{ steps.read.outputs.ready }}"',
                                    json.dumps("{{ 'x'.center(1000000000) }}")))
    done = subprocess.run([sys.executable, "-m", "bot", "validate", str(path)], capture_output=True,
                          text=True, timeout=60, preexec_fn=_capped)
    assert done.returncode != 0
    assert f"{path}:23:18:" in done.stdout + done.stderr
    assert "too costly to evaluate" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_evaluate_keeps_no_budget_between_threads_of_one_process() -> None:
    import threading

    errors: list[BaseException] = []

    def work() -> None:
        try:
            evaluate("'x' * 10", {})
        except BaseException as e:  # pragma: no cover - shown by the assert
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


# -- the file and its YAML ----------------------------------------------------------------------

HEAD = "apiVersion: runbook-bot/v1\nkind: Runbook\nmetadata:\n  name: bomb\n  title: Bomb\nspec:\n"


def _alias_bomb(block: int, times: int) -> str:
    return (HEAD + f'  x-block: &b "{"x" * block}"\n  steps:\n    - id: tell\n      title: Tell\n'
            "      action: notify\n      with:\n        message: [" + ", ".join(["*b"] * times) + "]\n")


def _validate(path: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bot", "validate", str(path)], capture_output=True,
                          text=True, timeout=60, preexec_fn=_capped)


def test_a_yaml_alias_bomb_measured_in_bytes_is_refused_without_running_out_of_memory(tmp_path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb(100_000, 30_000))  # 220 KB of text, 3 GB once expanded
    done = _validate(path)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "MemoryError" not in done.stderr and "Traceback" not in done.stderr
    assert f"{path}:1:1: the document expands to more than 4000000 characters" in done.stdout


def test_a_runbook_file_over_the_size_limit_is_refused_before_it_is_parsed(tmp_path) -> None:
    path = tmp_path / "big.yaml"
    step = ("    - id: s{i}\n      title: Step\n      action: notify\n"
            "      with: {{message: \"hello {{{{ params.node }}}}\"}}\n")
    path.write_text(HEAD + "  params:\n    node: {type: string}\n  steps:\n"
                    + "".join(step.format(i=i) for i in range(120_000)))  # 10 MB
    done = _validate(path)
    assert done.returncode == 1
    assert f"{path}:1:1: the file is {path.stat().st_size} bytes; a runbook may be at most 262144" \
        in done.stdout


def test_text_over_the_size_limit_is_refused_however_it_arrives(minimal: str) -> None:
    text = minimal + "# " + "x" * 300_000 + "\n"
    with pytest.raises(RunbookError, match="a runbook may be at most 262144 bytes"):
        load_text(text, file="rb.yaml", catalog=None)


def test_aliases_that_expand_moderately_still_load(catalog: object) -> None:
    steps = "".join(f"    - id: s{i}\n      title: *t\n      action: notify\n"
                    f"      with: {{message: hi}}\n" for i in range(1, 100))
    text = (HEAD.replace("  title: Bomb\n", f"  title: &t \"{'x' * 150}\"\n") + "  steps:\n" + steps)
    runbook = load_text(text, file="rb.yaml", catalog=catalog)  # type: ignore[arg-type]
    assert runbook.spec.steps[-1].title == "x" * 150
