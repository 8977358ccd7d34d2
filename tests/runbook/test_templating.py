"""Expressions and templates: native values for lone expressions, text otherwise, clear errors."""

from __future__ import annotations

from typing import Any

import pytest

from bot.errors import ExpressionError
from bot.runbook.durations import format_duration, parse_duration
from bot.runbook.templating import evaluate, render, render_value, whole_expression

CTX = {"params": {"node": "n1", "wait": 360.0, "cluster": None},
       "steps": {"a": {"result": {"items": [{"v": "vol-1"}, {"v": "vol-2"}], "count": 2}}}}


@pytest.mark.parametrize(
    ("value", "rendered"),
    [
        ("{{ steps.a.result['items'] | map(attribute='v') | list }}", ["vol-1", "vol-2"]),
        ("{{ steps.a.result.count }}", 2),
        ("  {{ params.wait }}  ", 360.0),
        ("{{ params.cluster }}", None),
        ("{{ params.node == 'n1' }}", True),
        ("node {{ params.node }}", "node n1"),
        ("{{ params.node }}-{{ steps.a.result.count }}", "n1-2"),
        ("{% if params.node %}yes{% endif %}", "yes"),
        ("plain", "plain"),
        (7, 7),
        ({"a": ["{{ params.node }}", {"b": "{{ steps.a.result.count }}"}]}, {"a": ["n1", {"b": 2}]}),
        (("{{ params.node }}",), ["n1"]),
    ],
)
def test_render_value_keeps_native_types_for_a_lone_expression(value: Any, rendered: Any) -> None:
    assert render_value(value, CTX) == rendered


def test_evaluate_returns_the_native_value() -> None:
    assert evaluate("steps.a.result.count > 1 and params.node", CTX) == "n1"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("steps.b.result", "'dict object' has no attribute 'b' in 'steps.b.result'"),
        ("params.node +", "syntax error in expression 'params.node +'"),
        ("params.node | nosuchfilter", "syntax error in expression 'params.node | nosuchfilter': "
                                       "No filter named 'nosuchfilter'."),
        ("1 / 0", "ZeroDivisionError in '1 / 0': division by zero"),
    ],
)
def test_a_bad_expression_is_one_clear_expression_error(source: str, message: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        evaluate(source, CTX)
    assert str(caught.value).startswith(message)


def test_a_template_error_names_the_template() -> None:
    with pytest.raises(ExpressionError) as caught:
        render("{{ params.nope }}", CTX)
    assert str(caught.value) == "'dict object' has no attribute 'nope' in '{{ params.nope }}'"


@pytest.mark.parametrize(("value", "inner"), [("{{ a.b }}", "a.b"), (" {{x}} ", "x"),
                                               ("a {{ x }}", None), ("{{ a }}{{ b }}", None)])
def test_whole_expression_finds_a_lone_expression(value: str, inner: str | None) -> None:
    assert whole_expression(value) == inner


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30.0), ("6m", 360.0), ("1h", 3600.0),
                                               ("1h30m", 5400.0), ("2d", 172800.0), (45, 45.0)])
def test_durations_parse_to_seconds(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "6", "m", "6 m", "1m1h", True, None, -5, "-1s"])
def test_a_malformed_duration_is_a_value_error(text: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_format_duration_inverts_parse_duration() -> None:
    assert [format_duration(s) for s in (0, 45, 390, 5400)] == ["0s", "45s", "6m30s", "1h30m"]
