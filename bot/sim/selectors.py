"""Label and field selectors with the API server's semantics, including its refusals.

A field selector on a label the real server does not index (e.g. ``spec.nodeName`` on
VolumeAttachments) is refused with 400, as in Kubernetes, so clients learn to filter client-side.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from bot.sim.errors import ApiError
from bot.sim.resources import Resource

Predicate = Callable[[dict[str, Any]], bool]

_SET_RE = re.compile(r"^\s*(!?)([A-Za-z0-9./_-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_top(expr: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in expr:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def label_selector(expr: str | None) -> Predicate:
    if not expr:
        return lambda obj: True
    tests: list[Predicate] = []
    for term in _split_top(expr):
        tests.append(_label_term(term))

    def match(obj: dict[str, Any]) -> bool:
        return all(t(obj) for t in tests)
    return match


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return obj.get("metadata", {}).get("labels") or {}


def _label_term(term: str) -> Predicate:
    m = _SET_RE.match(term)
    if m:
        key, op = m.group(2), m.group(3)
        values = {v.strip() for v in m.group(4).split(",") if v.strip()}
        if op == "in":
            return lambda o: _labels(o).get(key) in values
        return lambda o: _labels(o).get(key) not in values
    for op in ("!=", "==", "="):
        if op in term:
            key, value = (s.strip() for s in term.split(op, 1))
            if op == "!=":
                return lambda o: _labels(o).get(key) != value
            return lambda o: _labels(o).get(key) == value
    if term.startswith("!"):
        key = term[1:].strip()
        return lambda o: key not in _labels(o)
    if re.fullmatch(r"[A-Za-z0-9./_-]+", term):
        return lambda o: term in _labels(o)
    raise ApiError(400, "BadRequest", f"unable to parse requirement: {term!r}")


def dotted(obj: Any, path: str) -> Any:
    cur = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def _field_value(obj: dict[str, Any], path: str) -> str:
    # events index source.component under the label "source"
    value = dotted(obj, "source.component") if path == "source" else dotted(obj, path)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def field_selector(expr: str | None, resource: Resource) -> Predicate:
    if not expr:
        return lambda obj: True
    allowed = {"metadata.name", "metadata.namespace", *resource.fields}
    tests: list[Predicate] = []
    for term in _split_top(expr):
        for op in ("!=", "==", "="):
            if op in term:
                key, value = (s.strip() for s in term.split(op, 1))
                break
        else:
            raise ApiError(400, "BadRequest", f"invalid selector: {term!r}")
        if key not in allowed:
            raise ApiError(400, "BadRequest",
                           f'field label not supported: {key}', )
        if op == "!=":
            tests.append(_field_test(key, value, negate=True))
        else:
            tests.append(_field_test(key, value, negate=False))

    def match(obj: dict[str, Any]) -> bool:
        return all(t(obj) for t in tests)
    return match


def _field_test(key: str, value: str, *, negate: bool) -> Any:
    def test(obj: dict[str, Any]) -> bool:
        return (_field_value(obj, key) != value) if negate else (_field_value(obj, key) == value)

    return test
