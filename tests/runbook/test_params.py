"""Run parameters are coerced to their declared types, or every problem is named at once."""

from __future__ import annotations

from typing import Any

import pytest

from bot.errors import ParamError
from bot.runbook.model import Param, Runbook
from bot.runbook.params import check_params, coerce_param, coerce_params, parse_assignments


def runbook(params: dict[str, Any]) -> Runbook:
    return Runbook.model_validate({
        "apiVersion": "runbook-bot/v1", "kind": "Runbook",
        "metadata": {"name": "p", "title": "P"},
        "spec": {"params": params, "steps": [{"id": "a", "title": "A", "manual": "Look"}]},
    })


@pytest.mark.parametrize(
    ("spec", "raw", "value"),
    [
        ({"type": "string"}, "ip-1", "ip-1"),
        ({"type": "string", "pattern": "^ip-[0-9]+$"}, "ip-12", "ip-12"),
        ({"type": "integer"}, " 42 ", 42),
        ({"type": "integer", "minimum": 1, "maximum": 3}, "3", 3),
        ({"type": "boolean"}, "yes", True),
        ({"type": "boolean"}, "Off", False),
        ({"type": "boolean"}, False, False),
        ({"type": "enum", "values": ["a", "b"]}, "b", "b"),
        ({"type": "duration"}, "6m", 360.0),
        ({"type": "duration"}, "1h30m", 5400.0),
        ({"type": "duration"}, 90, 90.0),
    ],
)
def test_a_param_is_coerced_to_its_type(spec: dict[str, Any], raw: Any, value: Any) -> None:
    assert coerce_param("x", Param.model_validate(spec), raw) == value


@pytest.mark.parametrize(
    ("spec", "raw", "message"),
    [
        ({"type": "string", "pattern": "^ip-[0-9]+$"}, "web",
         "param 'x': 'web' does not match the pattern ^ip-[0-9]+$"),
        ({"type": "integer"}, "four", "param 'x': expected an integer, got 'four'"),
        ({"type": "integer"}, True, "param 'x': expected an integer, got True"),
        ({"type": "integer", "minimum": 1}, "0", "param 'x': 0 is below the minimum 1"),
        ({"type": "integer", "maximum": 3}, "9", "param 'x': 9 is above the maximum 3"),
        ({"type": "boolean"}, "maybe", "param 'x': expected true or false, got 'maybe'"),
        ({"type": "enum", "values": ["a", "b"]}, "c", "param 'x': 'c' is not one of a, b"),
        ({"type": "duration"}, "6 minutes",
         "param 'x': expected a duration such as 30s, 6m or 1h, got '6 minutes'"),
    ],
)
def test_an_invalid_param_names_itself_and_what_is_valid(
    spec: dict[str, Any], raw: Any, message: str
) -> None:
    with pytest.raises(ParamError) as caught:
        coerce_param("x", Param.model_validate(spec), raw)
    assert str(caught.value) == message


def test_defaults_fill_in_and_unset_optional_params_are_none() -> None:
    rb = runbook({"node": {"required": True}, "wait": {"type": "duration", "default": "6m"},
                  "cluster": {}})
    assert coerce_params(rb, {"node": "n1"}) == {"node": "n1", "wait": 360.0, "cluster": None}


def test_every_param_problem_is_reported_at_once() -> None:
    rb = runbook({"node": {"required": True, "description": "the dead node"},
                  "count": {"type": "integer"}})
    with pytest.raises(ParamError) as caught:
        coerce_params(rb, {"count": "x", "nod": "n1"})
    assert str(caught.value) == (
        "unknown param 'nod' (this runbook takes: node, count); "
        "missing required param 'node' (the dead node); "
        "param 'count': expected an integer, got 'x'"
    )


def test_assignments_split_at_the_first_equals_sign() -> None:
    assert parse_assignments(["node=ip-1", " selector = app=es "]) == {"node": "ip-1", "selector": "app=es"}


def test_an_assignment_without_equals_is_a_param_error() -> None:
    with pytest.raises(ParamError) as caught:
        parse_assignments(["node"])
    assert str(caught.value) == "expected key=value, got 'node'"


def test_a_form_gets_each_problem_next_to_its_field_in_the_same_check() -> None:
    rb = runbook({"node": {"required": True, "description": "the dead node"},
                  "count": {"type": "integer"}, "wait": {"type": "duration", "default": "6m"}})
    check = check_params(rb, {"count": "x", "nod": "n1", "zz": ""})
    assert not check.ok and check.fields == {
        "": "unknown params nod, zz (this runbook takes: node, count, wait)",
        "node": "required: the dead node",
        "count": "expected an integer, got 'x'",
    }
    with pytest.raises(ParamError) as caught:
        coerce_params(rb, {"count": "x", "nod": "n1", "zz": ""})
    assert str(caught.value) == "; ".join(check.problems)
    good = check_params(rb, {"node": "n1", "count": ""})  # an empty field is a field not given
    assert good.ok and good.fields == {} and good.values == {"node": "n1", "count": None, "wait": 360.0}


def test_a_list_param_takes_text_separated_by_commas_or_a_list_and_checks_each_element():
    spec = Param(type="list", pattern="^ip-[0-9]+$")
    assert coerce_param("nodes", spec, "ip-1, ip-2,ip-1") == ["ip-1", "ip-2"]
    assert coerce_param("nodes", spec, ["ip-3"]) == ["ip-3"]
    with pytest.raises(ParamError, match=r"param 'nodes': 'IP-4' does not match the pattern"):
        coerce_param("nodes", spec, "ip-1,IP-4")
    with pytest.raises(ParamError, match="expected a list"):
        coerce_param("nodes", spec, 7)
