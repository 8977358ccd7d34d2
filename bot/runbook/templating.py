"""Sandboxed Jinja2 for runbook expressions and templated strings.

Runbooks are data written by many people and rendered by a process that holds cluster and AWS
credentials, so template injection must be impossible, not merely unlikely:
- ``ImmutableSandboxedEnvironment``: no attribute starting with ``_``, no mutation of containers;
- no globals at all (``cycler``, ``joiner``, ``namespace``, ``lipsum``, ``range``, ``dict`` removed),
  so ``{{ cycler.__init__.__globals__ }}`` has nothing to start from;
- ``StrictUndefined``: a misspelt name is an error, never an empty string;
- a static check (``check_safe``) rejects any ``_``-prefixed attribute or subscript before rendering.

Two forms (docs/runbook-language.md):
- a bare *expression* (``when``, ``guards[].expr``, ``wait_until.expr``, ``foreach``, ``outputs``);
- a *template* string with ``{{ }}`` (``with`` values, ``manual``, titles, messages). A template
  that is exactly one ``{{ expr }}`` keeps the expression's native type (a list stays a list).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, TemplateSyntaxError, Undefined, nodes
from jinja2.exceptions import SecurityError, UndefinedError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from bot.errors import ExpressionError

_WHOLE = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\}\}).)*)\}\}\s*$", re.DOTALL)


def _make_env() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(undefined=StrictUndefined, autoescape=False)
    env.globals.clear()
    return env


ENV = _make_env()


def check_safe(tree: nodes.Node, source: str) -> None:
    """Reject private attribute access statically, so unsafe input fails before it ever runs."""
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        name = node.attr if isinstance(node, nodes.Getattr) else None
        if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
            name = node.arg.value if isinstance(node.arg.value, str) else None
        if name is not None and name.startswith("_"):
            raise ExpressionError(
                f"unsafe expression: access to {name!r} is not allowed "
                f"(names starting with '_' are blocked) in {source!r}"
            )


@lru_cache(maxsize=4096)
def _compiled_expression(source: str) -> Any:
    try:
        tree = ENV.parse("{{ " + source + " }}")
        check_safe(tree, source)
        return ENV.compile_expression(source, undefined_to_none=False)
    except TemplateSyntaxError as e:
        raise ExpressionError(f"syntax error in expression {source!r}: {e.message}") from None


@lru_cache(maxsize=4096)
def _compiled_template(source: str) -> Any:
    try:
        tree = ENV.parse(source)
        check_safe(tree, source)
        return ENV.from_string(source)
    except TemplateSyntaxError as e:
        raise ExpressionError(
            f"syntax error in template {source!r} (line {e.lineno}): {e.message}"
        ) from None


def parse_expression(source: str) -> nodes.Template:
    """The Jinja AST of a bare expression, for static reference checks."""
    try:
        tree = ENV.parse("{{ " + source + " }}")
    except TemplateSyntaxError as e:
        raise ExpressionError(f"syntax error in expression {source!r}: {e.message}") from None
    check_safe(tree, source)
    return tree


def parse_template(source: str) -> nodes.Template:
    """The Jinja AST of a template string, for static reference checks."""
    try:
        tree = ENV.parse(source)
    except TemplateSyntaxError as e:
        raise ExpressionError(
            f"syntax error in template {source!r} (line {e.lineno}): {e.message}"
        ) from None
    check_safe(tree, source)
    return tree


def _explain(e: Exception, source: str) -> ExpressionError:
    if isinstance(e, SecurityError):
        return ExpressionError(f"unsafe expression {source!r}: {e}")
    if isinstance(e, UndefinedError):
        return ExpressionError(f"{e.message} in {source!r}")
    return ExpressionError(f"{type(e).__name__} in {source!r}: {e}")


def evaluate(source: str, context: Mapping[str, Any]) -> Any:
    """Evaluate a bare expression against the context and return its native value."""
    fn = _compiled_expression(source)
    try:
        result = fn(**context)
        if isinstance(result, Undefined):
            str(result)  # raises the UndefinedError (or SecurityError) it stands for
        return result
    except Exception as e:  # every render failure becomes one clear ExpressionError
        raise _explain(e, source) from None


def render(source: str, context: Mapping[str, Any]) -> str:
    """Render a template string to text."""
    template = _compiled_template(source)
    try:
        return str(template.render(**context))
    except Exception as e:
        raise _explain(e, source) from None


def render_value(value: Any, context: Mapping[str, Any]) -> Any:
    """Render every string inside a ``with`` value; a lone ``{{ expr }}`` keeps its native type."""
    if isinstance(value, str):
        if "{" not in value:
            return value
        whole = _WHOLE.match(value)
        if whole and "{%" not in value:
            return evaluate(whole.group("expr").strip(), context)
        return render(value, context)
    if isinstance(value, Mapping):
        return {k: render_value(v, context) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [render_value(v, context) for v in value]
    return value


def whole_expression(value: str) -> str | None:
    """The inner expression if ``value`` is exactly one ``{{ expr }}``, else None."""
    whole = _WHOLE.match(value)
    return whole.group("expr").strip() if whole and "{%" not in value else None
