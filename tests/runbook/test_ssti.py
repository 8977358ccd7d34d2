"""Template injection fails with a clear error, both when a runbook is validated and when it runs."""

from __future__ import annotations

import pytest

from bot.actions.registry import Registry
from bot.errors import ExpressionError, RunbookError
from bot.runbook.loader import load_text
from bot.runbook.templating import evaluate, render, render_value

CONTEXT = {"params": {"node": "n1"}, "steps": {}, "run": {"id": "r1"}}

# (payload as a template, the words the error must contain)
PAYLOADS = [
    ("{{ ''.__class__.__mro__ }}", "is not allowed (names starting with '_' are blocked)"),
    ("{{ cycler.__init__.__globals__ }}", "'__globals__' is not allowed"),
    ("{{ params|attr('__class__') }}", "'__class__' is not allowed"),
    ("{{ params.node|attr('__class__') }}", "'__class__' is not allowed"),
    ("{{ [params]|map(attribute='__class__')|list }}", "'__class__' is not allowed"),
    ("{{ [params]|selectattr('__class__.__name__')|list }}", "'__class__.__name__' is not allowed"),
    ("{{ params['__class__'] }}", "'__class__' is not allowed"),
    ("{{ lipsum.__globals__.os }}", "'__globals__' is not allowed"),
    ("{{ request.application.__globals__ }}", "'__globals__' is not allowed"),
    ("{{ self._TemplateReference__context }}", "is not allowed"),
    ("{{ config.items() }}", "config"),
    ("{{ lipsum() }}", "lipsum"),
    ("{{ range(10) }}", "range"),
    ("{{ self }}", "'self' (the template object) is not available"),
    ("{% include '/etc/passwd' %}", "include statements are not allowed"),
    ("{% import 'os' as os %}", "import statements are not allowed"),
    ("{% macro m() %}{% endmacro %}", "macro statements are not allowed"),
    ("{{ namespace() }}", "namespace"),
    ("{{ joiner() }}", "joiner"),
    ("{{ dict(a=1) }}", "dict"),
]


@pytest.mark.parametrize(("payload", "words"), PAYLOADS, ids=[p for p, _ in PAYLOADS])
def test_a_payload_is_rejected_at_render_time(payload: str, words: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        render(payload, CONTEXT)
    assert words in str(caught.value)


@pytest.mark.parametrize(("payload", "words"), PAYLOADS, ids=[p for p, _ in PAYLOADS])
def test_a_payload_is_rejected_as_a_native_with_value(payload: str, words: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        render_value({"message": payload}, CONTEXT)
    assert words in str(caught.value)


@pytest.mark.parametrize(("payload", "words"), PAYLOADS, ids=[p for p, _ in PAYLOADS])
def test_a_payload_is_rejected_when_the_runbook_is_validated(
    payload: str, words: str, minimal: str, catalog: Registry
) -> None:
    text = minimal.replace('"ready={{ steps.read.outputs.ready }}"', repr(payload).replace("\\\\", "\\"))
    with pytest.raises(RunbookError) as caught:
        load_text(text, file="rb.yaml", catalog=catalog)
    (problem,) = caught.value.problems
    assert (problem.line, problem.col) == (23, 18)
    assert words in problem.message


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("'{0.__class__}'.format(params)", "unsafe"),
        ("'x' * 10**9", "repetition would build"),
        ("9 ** 99999", "exponent 99999 is too large"),
        ("[0] * 1000000", "repetition would build"),
        ("params.pop('node')", "unsafe"),
        ("params.update(x=1)", "unsafe"),
    ],
)
def test_unsafe_calls_and_huge_values_are_refused_at_evaluation(expression: str, words: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        evaluate(expression, {"params": {"node": "n1"}})
    assert words in str(caught.value)


def test_a_misspelt_name_is_an_error_not_an_empty_string() -> None:
    with pytest.raises(ExpressionError) as caught:
        render("node={{ params.nod }}", CONTEXT)
    assert "'dict object' has no attribute 'nod'" in str(caught.value)
