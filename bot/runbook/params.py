"""Run parameters: turn what a person typed (``-p node=ip-10-0-1-2``, a Slack modal) into typed
values, or say exactly which parameter is wrong and what would be valid. Nothing runs until every
parameter is valid.

A run's params have one normal form, decided here by ``check_params``: every declared param
present (its default filled in, None for an optional one not given), typed, and a duration in
seconds (a float: ``6m`` is 360.0). It is what ``run.created`` records and the audit chain hashes,
what the run's header holds, and what an exported transcript's ``run.params`` carries, so the
audit check compares them as they are. ``written_params`` is for showing only (a duration back as
``6m``); ``shown_as_recorded`` is the one place that accepts that written form against the
recorded one, for exports made while transcripts put it in ``run.params``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from bot.errors import ParamError
from bot.runbook.durations import format_duration, parse_duration
from bot.runbook.model import Param, Runbook

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def coerce_param(name: str, spec: Param, raw: Any) -> Any:
    """One parameter to its typed value; ParamError names it and what is valid."""
    kind = spec.type
    if kind == "string":
        value = str(raw)
        if spec.pattern and not re.fullmatch(spec.pattern, value):
            raise ParamError(f"param {name!r}: {value!r} does not match the pattern {spec.pattern}")
        return value
    if kind == "integer":
        if isinstance(raw, bool):
            raise ParamError(f"param {name!r}: expected an integer, got {raw!r}")
        try:
            number = int(str(raw).strip())
        except ValueError:
            raise ParamError(f"param {name!r}: expected an integer, got {raw!r}") from None
        if spec.minimum is not None and number < spec.minimum:
            raise ParamError(f"param {name!r}: {number} is below the minimum {spec.minimum}")
        if spec.maximum is not None and number > spec.maximum:
            raise ParamError(f"param {name!r}: {number} is above the maximum {spec.maximum}")
        return number
    if kind == "boolean":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ParamError(f"param {name!r}: expected true or false, got {raw!r}")
    if kind == "enum":
        value = str(raw)
        if spec.values is None or value not in spec.values:
            raise ParamError(
                f"param {name!r}: {value!r} is not one of {', '.join(spec.values or ())}"
            )
        return value
    if kind == "duration":
        try:
            return parse_duration(raw)
        except ValueError as e:
            raise ParamError(f"param {name!r}: {e}") from None
    if kind == "list":
        return _list_param(name, spec, raw)
    raise ParamError(f"param {name!r}: unknown type {kind!r}")


def _list_param(name: str, spec: Param, raw: Any) -> list[str]:
    """A list of strings: a YAML/JSON list, or text separated by commas or spaces
    (``-p nodes=a,b``). A ``pattern`` applies to every element."""
    if isinstance(raw, list | tuple):
        values = [str(v).strip() for v in raw]
    elif isinstance(raw, str):
        values = [v for v in re.split(r"[,\s]+", raw) if v]
    else:
        raise ParamError(f"param {name!r}: expected a list, or text separated by commas, "
                         f"got {raw!r}")
    values = list(dict.fromkeys(v for v in values if v))
    bad = [v for v in values if spec.pattern and not re.fullmatch(spec.pattern, v)]
    if bad:
        raise ParamError(f"param {name!r}: {', '.join(map(repr, bad))} "
                         f"{'does' if len(bad) == 1 else 'do'} not match the pattern {spec.pattern}")
    return values


@dataclass(frozen=True)
class ParamCheck:
    """A run's params checked: the typed values, and every problem, for a message or for a form."""

    values: dict[str, Any]  # typed, defaults filled in (complete only when there are no problems)
    problems: list[str]  # each naming its param and what is valid, in the order of the runbook
    fields: dict[str, str]  # param -> what is wrong with it, for a form; "" -> the unknown params

    @property
    def ok(self) -> bool:
        return not self.problems


CLUSTER_PARAM = "cluster"  # the param every shipped runbook passes to its actions' ``cluster``


def check_params(runbook: Runbook, raw: Mapping[str, Any], *,
                 clusters: Collection[str] = ()) -> ParamCheck:
    """Check every parameter of a run at once; an empty value counts as not given.

    ``clusters`` are the configured cluster names: a runbook's ``cluster`` param must name one,
    and may be left out only when one is configured (none configured: any name, the default
    kubeconfig).
    """
    declared = runbook.spec.params
    problems: list[str] = []
    fields: dict[str, str] = {}
    unknown = sorted(set(raw) - set(declared))
    takes = ", ".join(declared) or "none"
    for name in unknown:
        problems.append(f"unknown param {name!r} (this runbook takes: {takes})")
    if unknown:
        fields[""] = (f"unknown param{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
                      f"(this runbook takes: {takes})")
    values: dict[str, Any] = {}
    for name, spec in declared.items():
        if name in raw and raw[name] is not None and raw[name] != "":
            try:
                values[name] = coerce_param(name, spec, raw[name])
            except ParamError as e:
                problems.append(str(e))
                fields[name] = str(e).removeprefix(f"param {name!r}: ")
        elif spec.default is not None:
            values[name] = coerce_param(name, spec, spec.default)
        elif spec.required:
            hint = f" ({spec.description})" if spec.description else ""
            problems.append(f"missing required param {name!r}{hint}")
            fields[name] = "required" + (f": {spec.description}" if spec.description else "")
        else:
            values[name] = None
    if clusters and CLUSTER_PARAM in declared and CLUSTER_PARAM not in fields:
        problem = _cluster_problem(values.get(CLUSTER_PARAM), clusters)
        if problem:
            problems.append(problem)
            fields[CLUSTER_PARAM] = problem
    return ParamCheck(values=values, problems=problems, fields=fields)


def _cluster_problem(value: Any, clusters: Collection[str]) -> str:
    names = ", ".join(sorted(clusters))
    if value is None:
        if len(clusters) == 1:
            return ""
        return f"several clusters are configured; pass the 'cluster' param, one of: {names}"
    if value not in clusters:
        return f"unknown cluster {value!r}; configured: {names}"
    return ""


def coerce_params(runbook: Runbook, raw: Mapping[str, Any], *,
                  clusters: Collection[str] = ()) -> dict[str, Any]:
    """All parameters of a run, typed, with defaults filled in. Reports every problem at once."""
    check = check_params(runbook, raw, clusters=clusters)
    if not check.ok:
        raise ParamError("; ".join(check.problems))
    return check.values


def written_params(runbook: Runbook, values: Mapping[str, Any]) -> dict[str, Any]:
    """Typed params shown as people write them: a duration param's seconds back as ``6m``."""
    out = dict(values)
    for name, spec in runbook.spec.params.items():
        value = out.get(name)
        if spec.type == "duration" and isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = format_duration(value)
    return out


def shown_as_recorded(shown: Any, recorded: Any) -> bool:
    """Whether a param value as a transcript showed it is the value the run recorded: the same
    value, or a duration written as text (``1h30m``) for the seconds recorded (5400.0)."""
    if shown == recorded and type(shown) is type(recorded):
        return True
    if (isinstance(shown, str) and isinstance(recorded, int | float)
            and not isinstance(recorded, bool)):
        try:
            return parse_duration(shown) == float(recorded)
        except ValueError:
            return False
    return False


def parse_assignments(pairs: list[str]) -> dict[str, str]:
    """``["node=ip-1", "force=true"]`` -> a dict; a pair without ``=`` is a ParamError."""
    out: dict[str, str] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ParamError(f"expected key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        out[key.strip()] = value.strip()
    return out
