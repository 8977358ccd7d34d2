"""Every operation that builds a value is bounded as it builds, so a template cannot grow a value
past ``MAX_SEQUENCE`` one doubling at a time (issue: templates that OOM a 512Mi replica).

The attacker writes the runbook, or sets the alert labels its params are templated from. Each
attack runs in one child process with a memory cap: it is timed once, then run again under
``tracemalloc``, so an attack that gets through is a failed test, not a swapping test run.
"""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
import textwrap
import time

import pytest

from bot.errors import RunbookError
from bot.runbook.limits import MAX_SEQUENCE
from bot.runbook.loader import load_text
from bot.runbook.templating import evaluate, render


def _chain(init: str, body: str, end: str = "{{ s|length }}", times: int = 30) -> str:
    """``s`` set to ``init``, then to ``body`` (built from ``s``) ``times`` times: 2**30 if doubled."""
    return "{% set s = " + init + " %}" + ("{% set s = " + body + " %}") * times + end


# (name, template); params.s, handed in, is MAX_SEQUENCE characters: what is built may be as long
ATTACKS = [
    ("s ~ s", _chain('"x"', "s ~ s")),
    ("str s + s", _chain('"x"', "s + s")),
    ("list s + s", _chain("[1]", "s + s")),
    ("[s, s]|join", _chain('"x"', "[s, s]|join")),
    ("(s, s)|join", _chain('"x"', "(s, s)|join")),
    ("(s ~ s)|upper", _chain('"x"', "(s ~ s)|upper")),
    ("s|list + s|list", _chain('"x"', "s|list + s|list")),
    ("format filter", _chain('"x"', '"%s%s"|format(s, s)')),
    ("% operator", _chain('"x"', '"%s%s" % (s, s)')),
    ("str.format", _chain('"x"', '"{}{}".format(s, s)')),
    ("{a: s, b: s}|tojson", _chain('"x"', '{"a": s, "b": s}|tojson')),
    ("center", _chain('"x"', "s|center(s|length * 2)")),
    ("s * 2", _chain('"x"', "s * 2")),
    ("replace", _chain('"x"', 's|replace("x", "xx")')),
    ("sum of lists", _chain("[1]", "[s, s]|sum(start=[])")),
    ("escape", _chain('"&"', "(s ~ s)|forceescape")),
    ("[s, s] then |tojson", _chain('"x"', "[s, s]", "{{ s|tojson|length }}")),
    ("[s, s] then |string", _chain('"x"', "[s, s]", "{{ s|string|length }}")),
    ("[s, s] then |pprint", _chain('"x"', "[s, s]", "{{ s|pprint|length }}")),
    ("[s, s] then output", _chain('"x"', "[s, s]", "{{ s }}")),
    ("[s, s] then ~", _chain('"x"', "[s, s]", '{{ (s ~ "")|length }}')),
    ("[s, s] then |map|join", _chain('"x"', "[s, s]", "{{ s|map('string')|join|length }}")),
    ("{a: s, b: s} then |tojson", _chain('"x"', '{"a": s, "b": s}', "{{ s|tojson|length }}")),
    ("set block of a loop", "{% set b %}{% for c in params.s %}{{ params.s }}{% endfor %}{% endset %}"
                            "{{ b|length }}"),
    ("set block", "{% set b %}{{ params.s }}{{ params.s }}{% endset %}{{ b|length }}"),
    ("filter block of a loop", "{% filter upper %}{% for c in params.s %}{{ params.s }}{% endfor %}"
                               "{% endfilter %}"),
    ("a loop of ~", "{% for c in params.s %}{{ (params.s ~ params.s)|length }}{% endfor %}"),
    ("one ~ of 60", "{% set s = params.s %}{{ (" + " ~ ".join(["s"] * 60) + ")|length }}"),
    ("|map|list", "{{ params.s|map('center', 1000)|list|length }}"),
    ("|map|join", "{{ params.s|map('center', 1000)|join|length }}"),
    ("[s] * 1000|map", "{{ ([params.s] * 1000)|map('upper')|list|length }}"),
    ("|map|join(s)", "{{ params.s[:2000]|map('lower')|join(params.s)|length }}"),
    ("s.join(|map)", "{{ params.s.join(params.s[:2000]|map('lower'))|length }}"),
    ("%(a)s repeated", "{{ ('%(a)s%(a)s%(a)s' % {'a': params.s})|length }}"),
    ("{0} repeated", "{{ '{0}{0}{0}'.format(params.s)|length }}"),
    ("|urlize target", "{{ ('a.co ' * 20000)|urlize(target=params.s)|length }}"),
    ("|list|tojson", "{{ params.s|list|tojson|length }}"),
    ("|xmlattr", "{{ {'a': params.s}|xmlattr|length }}"),
]
# attacks that hold a list of up to MAX_SEQUENCE items when refused: 8 bytes a pointer
LISTS = {"list s + s", "s|list + s|list", "sum of lists", "|list|tojson"}

_CHILD = textwrap.dedent("""
    import json, sys, time, tracemalloc
    from bot.runbook import static_limits
    from bot.runbook.templating import render
    # what the evaluation refuses, not validation: the static check sees most of these chains
    # (test_a_chain_of_sets_that_doubles_a_value_is_flagged_when_the_runbook_is_validated)
    static_limits._check_set_chains = lambda tree: None
    attacks, limit = json.loads(sys.stdin.read())
    context = {"params": {"s": "x" * limit}}
    for name, source in attacks:
        outcomes = []
        for traced in (False, True):
            if traced:
                tracemalloc.start()
            started = time.monotonic()
            try:
                outcome = f"built {len(render(source, context))} characters"
            except Exception as e:
                outcome = f"{type(e).__name__}: …{str(e)[-200:]}"  # the end names the limit
            seconds = time.monotonic() - started
            peak = tracemalloc.get_traced_memory()[1] if traced else 0
            tracemalloc.stop()
            outcomes.append((outcome, seconds, peak))
        print(json.dumps([name, outcomes[0][0], outcomes[0][1], outcomes[1][2]]), flush=True)
""")


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2_000_000_000, 2_000_000_000))


@pytest.fixture(scope="module")
def outcomes() -> dict[str, tuple[str, float, int]]:
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps([ATTACKS, MAX_SEQUENCE]),
                              capture_output=True, text=True, timeout=120, preexec_fn=_capped)
        out = done.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    return {name: (outcome, seconds, peak)
            for name, outcome, seconds, peak in map(json.loads, out.splitlines())}


@pytest.mark.parametrize("name", [name for name, _ in ATTACKS])
def test_a_template_that_builds_past_the_limit_is_refused_before_it_allocates(
    name: str, outcomes: dict[str, tuple[str, float, int]]
) -> None:
    assert name in outcomes, "the attack hung or killed the evaluation (no answer within the timeout)"
    outcome, seconds, peak = outcomes[name]
    assert outcome.startswith("ExpressionError: …") and "is too costly to evaluate" in outcome, outcome
    assert re.search(r"would build .* items \(at most \d+(, as much as the data it was handed)?\)$"
                     r"|renders more than 100000 characters$", outcome), outcome
    assert seconds < 0.5, f"refused only after {seconds:.2f} s"
    # a value within the limit is at most MAX_SEQUENCE one-byte characters (a list: 8-byte pointers),
    # and a refused attack holds a few of them (params.s is allocated before the trace); measured:
    # about 0.1 MB for strings, 1.6 MB for three lists of 65,536 (``s|list + s|list``)
    bound = 20 * MAX_SEQUENCE if name in LISTS else 5 * MAX_SEQUENCE
    assert peak < bound, f"peaked at {peak / 1e6:.2f} MB before it was refused"


def test_flattening_many_lists_with_sum_takes_linear_time() -> None:
    started = time.monotonic()
    flat = evaluate("params.s|batch(1)|sum(start=[])", {"params": {"s": "x" * MAX_SEQUENCE}})
    assert flat == ["x"] * MAX_SEQUENCE
    # quadratic ``sum`` (a copy of the running list per item) takes 19 s here; linear about 0.1 s,
    # so a bound far from both holds on a loaded machine and still catches the regression
    assert time.monotonic() - started < 5.0


def test_a_large_value_handed_in_passes_through_filters_unchanged_in_size() -> None:
    pods = [{"name": f"pod-{i:05d}", "ready": i % 3 != 0, "restarts": i % 7, "node": f"n{i % 40}",
             "labels": {"app": "web", "tier": "front"}} for i in range(3_000)]
    context = {"steps": {"pods": {"outputs": {"items": pods}}}, "params": {"s": "x" * MAX_SEQUENCE}}
    items = "steps.pods.outputs['items']"
    assert evaluate(f"{items}|selectattr('ready')|list|length", context) == 2_000
    assert evaluate(f"{items}|rejectattr('ready')|map(attribute='name')|first", context) == "pod-00000"
    assert evaluate(f"{items}|map(attribute='labels')|list|length", context) == 3_000
    assert evaluate(f"{items}|sum(attribute='restarts')", context) == sum(p["restarts"] for p in pods)
    assert len(evaluate(f"{items}|groupby('node')", context)) == 40
    assert evaluate("params.s|upper|length", context) == MAX_SEQUENCE
    assert evaluate("(params.s[:50000] ~ params.s[:50000])|length", context) == MAX_SEQUENCE
    assert evaluate("(params.s|list)[:3]", context) == ["x", "x", "x"]
    text = render("{% set ok = " + items + "|selectattr('ready')|list %}{{ ok|length }} ready: "
                  "{% for p in ok[:3] %}{{ p.name }}{% if not loop.last %}, {% endif %}{% endfor %}",
                  context)
    assert text == "2000 ready: pod-00001, pod-00002, pod-00004"


def test_ordinary_building_stays_within_the_limits() -> None:
    context = {"params": {"zone": "eu-west-1a", "names": ["a", "b"]}}
    assert render("{% set short = '.' ~ params.zone[:-1] ~ '.compute.internal' %}{{ short }}",
                  context) == ".eu-west-1.compute.internal"
    assert evaluate("params.names + ['c']", context) == ["a", "b", "c"]
    assert evaluate("[[1], [2, 3]]|sum(start=[])", context) == [1, 2, 3]
    assert evaluate("'%s-%s' % ('a', 'b')", context) == "a-b"
    assert evaluate("'{}={}'.format('a', 1)", context) == "a=1"
    assert evaluate("{'a': params.names}|tojson", context) == '{"a": ["a", "b"]}'
    assert render("{% set b %}{% for n in params.names %}[{{ n }}]{% endfor %}{% endset %}{{ b }}",
                  context) == "[a][b]"


CHAINS = [
    ("{% set s = 'x' %}" + "{% set s = s ~ s %}" * 17, "'s' copies its first value 131072 times"),
    ("{% set s = [1] %}" + "{% set s = s + s %}" * 20, "'s' copies its first value 131072 times"),
    ("{% set s = 'x' %}" + "{% set s = [s, s, s, s]|join %}" * 9, "'s' copies its first value 262144"),
    ("{% set s = 'x' %}" + "{% set s = (s ~ s)|upper %}" * 17, "'s' copies its first value 131072"),
    ("{% set s = 'x' %}" + "{% set t = s ~ s %}{% set s = t %}" * 17, "'t' copies its first value 131072"),
    ("{% set s = params.x %}" + "{% set s %}{{ s }}{{ s }}{% endset %}" * 17, "'s' copies its first"),
]


@pytest.mark.parametrize(("template", "words"), CHAINS, ids=["~", "+", "join", "upper", "via t", "block"])
def test_a_chain_of_sets_that_doubles_a_value_is_flagged_when_the_runbook_is_validated(
    template: str, words: str, minimal: str, catalog: object
) -> None:
    text = minimal.replace('"ready={{ steps.read.outputs.ready }}"', json.dumps(template))
    with pytest.raises(RunbookError) as caught:
        load_text(text, file="rb.yaml", catalog=catalog)  # type: ignore[arg-type]
    (problem,) = caught.value.problems
    assert (problem.line, problem.col) == (23, 18)
    assert "is too costly to evaluate" in problem.message and words in problem.message, problem.message


@pytest.mark.parametrize("template", [
    "{% set s = steps.read.outputs.ready ~ '' %}" + "{% set s = s ~ ', ' ~ s %}" * 3 + "{{ s }}",
    "{% set n = 1 %}" + "{% set n = n + n %}" * 30 + "{{ n }}",  # numbers: nothing is built
    "{% set n = 1 %}" + "{% set n = n * 2 %}" * 30 + "{{ n }}",
    "{% set m = '' %}{% for i in [1, 2] %}{% set m = m ~ i ~ ', ' %}{% endfor %}{{ m }}",
])
def test_sets_that_do_not_multiply_a_value_still_validate(
    template: str, minimal: str, catalog: object
) -> None:
    text = minimal.replace('"ready={{ steps.read.outputs.ready }}"', json.dumps(template))
    load_text(text, file="rb.yaml", catalog=catalog)  # type: ignore[arg-type]
