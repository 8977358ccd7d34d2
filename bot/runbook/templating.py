"""Sandboxed Jinja2 for runbook expressions and templated strings.

Runbooks are data written by many people and rendered by a process that holds cluster and AWS
credentials, so template injection must be impossible, not merely unlikely:
- ``ImmutableSandboxedEnvironment``: no attribute starting with ``_``, no mutation of containers;
- no globals at all (``cycler``, ``joiner``, ``namespace``, ``lipsum``, ``range``, ``dict`` removed),
  so ``{{ cycler.__init__.__globals__ }}`` has nothing to start from;
- ``StrictUndefined``: a misspelt name is an error, never an empty string;
- a static check (``check_safe``) rejects any ``_``-prefixed attribute or subscript, and any
  ``_``-prefixed attribute name handed to a filter or test (``|attr('__class__')``,
  ``|map(attribute='__dict__')``), before rendering;
- what an evaluation may build and how long it may run are bounded (``limits.py``), so
  ``'x' * 10**12``, ``'x'.center(10**9)`` or two nested loops over a long string are a clear
  error, not an exhausted or stalled worker.

Two forms (docs/runbook-language.md):
- a bare *expression* (``when``, ``guards[].expr``, ``wait_until.expr``, ``foreach``, ``outputs``);
- a *template* string with ``{{ }}`` (``with`` values, ``manual``, titles, messages). A template
  that is exactly one ``{{ expr }}`` keeps the expression's native type (a list stays a list).
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, TemplateSyntaxError, Undefined, nodes
from jinja2.exceptions import SecurityError, UndefinedError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from bot.errors import ExpressionError
from bot.runbook import limits
from bot.runbook.limits import MAX_EXPONENT, MAX_SEQUENCE

__all__ = ["ENV", "MAX_EXPONENT", "MAX_SEQUENCE", "check_safe", "evaluate", "parse_expression",
           "parse_template", "render", "render_value", "whole_expression"]

_WHOLE = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\}\}).)*)\}\}\s*$", re.DOTALL)


LOOP_FILTER = "_loop_budget"  # wraps every ``{% for %}``'s iterable: each item is charged


class _Environment(ImmutableSandboxedEnvironment):
    """The sandbox, with every way of building something big or running long bounded (limits.py)."""

    intercepted_binops = frozenset({"*", "**", "%"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        limits.spend()
        if operator == "**":
            limits.check_power(left, right)
        elif operator == "*":
            limits.check_repeat(left, right)
        elif operator == "%" and isinstance(left, str):
            limits.check_printf(left)
        result = super().call_binop(context, operator, left, right)
        limits.check_result(result, (left, right), f"'{operator}'")
        return result

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        limits.spend()
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str):
            limits.check_str_method(owner, getattr(__obj, "__name__", ""), args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        limits.check_result(result, (owner, *args, *kwargs.values()), "the call")
        return result

    def wrap_str_format(self, value: Any) -> Any:
        wrapped = super().wrap_str_format(value)
        if wrapped is not None:
            limits.check_str_format(value.__self__)
        return wrapped


def _bounded_filter(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` checked against the limits before and after it runs."""
    inner = inspect.unwrap(fn)
    passes = getattr(fn, "jinja_pass_arg", None) is not None
    # an async variant passes the context to its wrapper only, which drops it for the function
    dropped = passes and getattr(inner, "jinja_pass_arg", None) is None
    signature = inspect.signature(inner)

    @functools.wraps(fn)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        limits.spend()
        own = args[1:] if passes else args
        try:
            bound = signature.bind(*(own if dropped else args), **kwargs).arguments
        except TypeError:
            bound = {}  # wrong arguments: the filter itself says so
        if bound:
            limits.check_filter(name, bound)
        result = fn(*args, **kwargs)
        limits.check_result(result, (*own, *kwargs.values()), f"|{name}")
        return result

    return bounded


def _make_env() -> ImmutableSandboxedEnvironment:
    env = _Environment(undefined=StrictUndefined, autoescape=False)
    env.globals.clear()
    env.filters = {name: _bounded_filter(name, fn) for name, fn in env.filters.items()}
    env.filters[LOOP_FILTER] = limits.counted
    return env


ENV = _make_env()


def _unsafe(name: str, source: str) -> ExpressionError:
    return ExpressionError(
        f"unsafe expression: access to {name!r} is not allowed "
        f"(names starting with '_' are blocked) in {source!r}"
    )


def check_safe(tree: nodes.Node, source: str) -> None:
    """Reject private attribute access statically, so unsafe input fails before it ever runs."""
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        name = node.attr if isinstance(node, nodes.Getattr) else None
        if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
            name = node.arg.value if isinstance(node.arg.value, str) else None
        if name is not None and name.startswith("_"):
            raise _unsafe(name, source)
    for stmt in tree.find_all((nodes.Extends, nodes.Include, nodes.Import, nodes.FromImport,
                               nodes.Macro, nodes.CallBlock, nodes.Block)):
        raise ExpressionError(
            f"unsafe template: {type(stmt).__name__.lower()} statements are not allowed "
            f"(only expressions, if, for and set) in {source!r}"
        )
    for ref in tree.find_all(nodes.Name):
        if ref.name == "self":
            raise ExpressionError(
                f"unsafe template: 'self' (the template object) is not available in {source!r}"
            )
    # Filters and tests such as attr, map, selectattr, sort and groupby take attribute names
    # (dotted paths too) as string arguments; a private name there is the same attack.
    for call in tree.find_all((nodes.Filter, nodes.Test)):
        args = [*call.args, *(kw.value for kw in call.kwargs)]
        for arg in args:
            if isinstance(arg, nodes.Const) and isinstance(arg.value, str):
                for part in arg.value.split("."):
                    if part.startswith("_"):
                        raise _unsafe(arg.value, source)
    try:
        limits.check_tree(tree)
    except limits.LimitExceeded as e:
        raise ExpressionError(f"{source!r} is too costly to evaluate: {e}") from None


def _count_loop_items(tree: nodes.Template) -> nodes.Template:
    """Every ``{% for %}`` walks its items through the budget, so nested loops end."""
    for loop in tree.find_all(nodes.For):
        loop.iter = nodes.Filter(loop.iter, LOOP_FILTER, [], [], None, None, lineno=loop.lineno)
    return tree


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
        return ENV.from_string(_count_loop_items(tree))
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
    if isinstance(e, limits.LimitExceeded):
        return ExpressionError(f"{source!r} is too costly to evaluate: {e}")
    if isinstance(e, MemoryError | RecursionError):
        return ExpressionError(f"{source!r} is too costly to evaluate: {type(e).__name__}")
    if isinstance(e, SecurityError):
        return ExpressionError(f"unsafe expression {source!r}: {e}")
    if isinstance(e, UndefinedError):
        return ExpressionError(f"{e.message} in {source!r}")
    return ExpressionError(f"{type(e).__name__} in {source!r}: {e}")


def evaluate(source: str, context: Mapping[str, Any]) -> Any:
    """Evaluate a bare expression against the context and return its native value."""
    fn = _compiled_expression(source)
    try:
        with limits.budget():
            result = fn(**context)
            if isinstance(result, Undefined):
                str(result)  # raises the UndefinedError (or SecurityError) it stands for
        return result
    except Exception as e:  # every render failure becomes one clear ExpressionError
        raise _explain(e, source) from None


def render(source: str, context: Mapping[str, Any]) -> str:
    """Render a template string to text."""
    if "{" not in source:  # plain text: no need to compile it
        return source
    template = _compiled_template(source)
    try:
        with limits.budget():
            out: list[str] = []
            size = 0
            for chunk in template.generate(**context):  # output is checked as it is made
                size += len(chunk)
                if size > MAX_SEQUENCE:
                    raise limits.LimitExceeded(f"it renders more than {MAX_SEQUENCE} characters")
                limits.spend()
                out.append(chunk)
        return "".join(out)
    except Exception as e:
        raise _explain(e, source) from None


_PLACEHOLDER = re.compile(r"\{\{.*?\}\}", re.S)
_BLOCK = re.compile(r"\{%.*?%\}", re.S)
UNKNOWN = "…"


def render_known(source: str, context: Mapping[str, Any]) -> str:
    """A title rendered as far as ``context`` allows: each ``{{ expr }}`` whose values are not
    known yet (a step not run, a param not given) reads ``…``, never raw template text."""
    try:
        return render(source, context)
    except ExpressionError:
        pass

    def one(match: re.Match[str]) -> str:
        try:
            value = render(match.group(0), context)
        except ExpressionError:
            return UNKNOWN
        return value if value not in ("", "None") else UNKNOWN

    return _BLOCK.sub("", _PLACEHOLDER.sub(one, source))


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
