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
  ``'x' * 10**12``, ``'x'.center(10**9)``, 30 times ``{% set s = s ~ s %}`` or two nested loops
  over a long string are a clear error, not an exhausted or stalled worker. Every operation that
  builds a value is checked as it builds: operators, filters and method calls through the
  sandbox's hooks, and what Jinja compiles to plain Python (``~``, list and dict literals, the
  output of a ``{% set %}`` block) through ``_Generator``.

Two forms (docs/runbook-language.md):
- a bare *expression* (``when``, ``guards[].expr``, ``wait_until.expr``, ``foreach``, ``outputs``);
- a *template* string with ``{{ }}`` (``with`` values, ``manual``, titles, messages). A template
  that is exactly one ``{{ expr }}`` keeps the expression's native type (a list stays a list).
"""

from __future__ import annotations

import functools
import inspect
import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, TemplateSyntaxError, Undefined, nodes, pass_environment
from jinja2.compiler import CodeGenerator, Frame
from jinja2.environment import Environment
from jinja2.exceptions import SecurityError, UndefinedError
from jinja2.filters import make_attrgetter, sync_do_sum
from jinja2.runtime import markup_join, str_join
from jinja2.sandbox import ImmutableSandboxedEnvironment

from bot.errors import ExpressionError
from bot.runbook import limits, static_limits
from bot.runbook.limits import MAX_EXPONENT, MAX_SEQUENCE

__all__ = ["ENV", "MAX_EXPONENT", "MAX_SEQUENCE", "check_safe", "evaluate", "parse_expression",
           "parse_template", "render", "render_value", "whole_expression"]

_WHOLE = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\}\}).)*)\}\}\s*$", re.DOTALL)


LOOP_FILTER = "_loop_budget"  # wraps every ``{% for %}``'s iterable: each item is charged


class _Generator(CodeGenerator):
    """Jinja's compiler, but what it would build in plain Python goes through the environment:
    ``~`` (``str_join``), list, tuple and dict literals, and the list a ``{% set %}…{% endset %}``
    or ``{% filter %}`` block writes into. No sandbox hook sees those otherwise."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.call_concat(context, (")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")

    def _literal(self, visit: Callable[[Any, Frame], None], node: nodes.Expr, frame: Frame) -> None:
        self.write("environment.built_literal(")
        visit(node, frame)
        self.write(")")

    def visit_List(self, node: nodes.List, frame: Frame) -> None:
        self._literal(super().visit_List, node, frame)

    def visit_Dict(self, node: nodes.Dict, frame: Frame) -> None:
        self._literal(super().visit_Dict, node, frame)

    def visit_Tuple(self, node: nodes.Tuple, frame: Frame) -> None:
        if node.ctx == "load":
            self._literal(super().visit_Tuple, node, frame)
        else:  # a target: ``{% for a, b in … %}``, ``{% set a, b = … %}``
            super().visit_Tuple(node, frame)

    def buffer(self, frame: Frame) -> None:
        frame.buffer = self.temporary_identifier()
        self.writeline(f"{frame.buffer} = environment.output_buffer()")


class _Environment(ImmutableSandboxedEnvironment):
    """The sandbox, with every way of building something big or running long bounded (limits.py)."""

    code_generator_class = _Generator
    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        limits.spend()
        if operator == "**":
            limits.check_power(left, right)
        elif operator == "*":
            limits.check_repeat(left, right)
        elif operator == "%" and isinstance(left, str):
            limits.check_printf(left, right)
        elif operator == "+":
            limits.check_add(left, right)
        result = super().call_binop(context, operator, left, right)
        if operator == "%":  # the others were estimated exactly, or from above
            limits.check_result(result, "'%'")
        return result

    def call_concat(self, context: Any, values: tuple[Any, ...]) -> str:
        limits.spend()
        limits.check_concat(values)
        join = markup_join if context.eval_ctx.autoescape else str_join
        return join(values)

    def built_literal(self, value: Any) -> Any:
        limits.check_literal(value)
        return value

    def output_buffer(self) -> limits.Output:
        return limits.Output()

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        limits.spend()
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str):
            name = getattr(__obj, "__name__", "")
            if name in limits.STR_METHODS:  # ``s.join(xs|map(…))``: list the lazy items to count them
                args = tuple(list(a) if isinstance(a, Iterator) else a for a in args)
            limits.check_str_method(owner, name, args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        if isinstance(result, Iterator):
            return limits.Metered(result, "the call")
        limits.check_result(result, "the call")
        return result

    def wrap_str_format(self, value: Any) -> Any:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        fmt: str = value.__self__
        limits.check_str_format(fmt)
        as_map = value.__name__ == "format_map"

        @functools.wraps(wrapped)
        def bounded(*args: Any, **kwargs: Any) -> Any:
            if as_map and len(args) == 1 and isinstance(args[0], Mapping):
                limits.check_str_format(fmt, (), args[0])
            elif not as_map:
                limits.check_str_format(fmt, args, kwargs)
            return wrapped(*args, **kwargs)

        return bounded


# filters that estimate their result from their items: a lazy input (``|map``, ``|select``) is
# listed first, which counts its items (``limits.Metered``), and handed over as a list
_LISTED = frozenset({"join", "sum"})


def _bounded_filter(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` checked against the limits before it runs, and its result as it is built."""
    inner = inspect.unwrap(fn)
    passes = getattr(fn, "jinja_pass_arg", None) is not None
    # an async variant passes the context to its wrapper only, which drops it for the function
    dropped = passes and getattr(inner, "jinja_pass_arg", None) is None
    signature = inspect.signature(inner)

    @functools.wraps(fn)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        limits.spend()
        if name in _LISTED:
            args = tuple(list(a) if isinstance(a, Iterator) else a for a in args)
        own = args[1:] if passes else args
        try:
            bound = signature.bind(*(own if dropped else args), **kwargs).arguments
        except TypeError:
            bound = {}  # wrong arguments: the filter itself says so
        if bound:
            limits.check_filter(name, bound)
        result = fn(*args, **kwargs)
        if isinstance(result, Iterator):  # lazy: each item is counted as it is made
            return limits.Metered(result, f"|{name}")
        limits.check_result(result, f"|{name}")
        return result

    return bounded


@pass_environment
def _sum(environment: Environment, iterable: Iterable[Any], attribute: str | int | None = None,
         start: Any = 0) -> Any:
    """``|sum``, but lists (or tuples) are joined in one pass: ``sum`` copies the running total for
    each one, so 100,000 one-item lists take 19 s in a single call no time budget can interrupt."""
    if isinstance(start, list | tuple):
        items = list(iterable if attribute is None else map(make_attrgetter(environment, attribute),
                                                              iterable))
        if all(type(item) is type(start) for item in items):
            return type(start)(itertools.chain(start, *items))
        return sync_do_sum(environment, items, None, start)
    return sync_do_sum(environment, iterable, attribute, start)


def _make_env() -> ImmutableSandboxedEnvironment:
    env = _Environment(undefined=StrictUndefined, autoescape=False, finalize=limits.check_output)
    env.globals.clear()
    env.filters["sum"] = _sum
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
        static_limits.check_tree(tree)
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
        with limits.budget(context):
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
        with limits.budget(context):
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


def precompile(value: Any) -> None:
    """Compile every template and expression inside ``value`` (a runbook's fields, nested) ahead
    of use, into the caches ``render`` and ``evaluate`` read. A process about to fork many
    children (the explorer) compiles once, instead of every child compiling the same text. A
    string that is neither a template nor an expression is passed over."""
    if isinstance(value, Mapping):
        for item in value.values():
            precompile(item)
    elif isinstance(value, list | tuple):
        for item in value:
            precompile(item)
    elif isinstance(value, str) and value.strip():
        inner = whole_expression(value) if "{" in value else value
        try:
            if "{" in value:
                _compiled_template(value)
            if inner is not None:
                _compiled_expression(inner)
        except ExpressionError:
            pass
