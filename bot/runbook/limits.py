"""What one runbook may cost: bounds on its file, its YAML, and every expression it evaluates.

Runbooks are data, and a worker evaluates them for every run it carries, so one poisoned runbook
must fail fast with a clear error, never exhaust the worker's memory or stall its other runs. Every
bound lives here (docs/runbook-language.md, "Limits"):

- the file: at most ``MAX_FILE_BYTES`` of text, and at most ``MAX_NODES`` nodes and
  ``MAX_EXPANDED_BYTES`` of scalars once YAML aliases are expanded (a 2 MB block aliased 50,000
  times is a few lines of text);
- an expression or template: nothing it builds (a string, a list, the digits of a number) may be
  longer than ``MAX_SEQUENCE``, its loops walk at most ``MAX_SEQUENCE`` items in all, and it may
  run for at most ``MAX_SECONDS``.

A result's size is estimated *before* it is built wherever one call can build it (``'x'.center(n)``,
``'%*d'``, ``|indent``, ``|replace``, ``**``): an allocation of gigabytes cannot be taken back
afterwards. What grows only a little per call (``|forceescape``, ``+``) is checked afterwards, so a
chain of them cannot grow either. The time budget is checked on every loop item, filter, method
call, operator and chunk of output, so a loop that builds nothing still ends. The static checks
(``check_tree``) find the same mistakes written as literals when a runbook is validated.
"""

from __future__ import annotations

import re
import string
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from jinja2 import nodes

MAX_FILE_BYTES = 262_144  # 256 KiB; the largest shipped runbook is 12 KB, this size validates in ~2 s of CPU
MAX_NODES = 200_000  # YAML nodes after aliases expand ("billion laughs")
MAX_EXPANDED_BYTES = 4_000_000  # bytes of scalars after aliases expand
MAX_SEQUENCE = 100_000  # the longest string, list or number (in bits) one evaluation may build
MAX_EXPONENT = 1_000  # the largest exponent of ``**``
MAX_SECONDS = 1.0  # the time one evaluation of an expression or template may take
MAX_JSON_INDENT = 16  # ``|tojson(indent=...)``: the output grows with indent times depth


class LimitExceeded(Exception):
    """An expression would build or run for more than a limit allows."""


# -- the per-evaluation budget -----------------------------------------------------------------


class _Budget:
    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds
        self.seconds = seconds
        self.items = MAX_SEQUENCE

    def spend(self, items: int = 0) -> None:
        self.items -= items
        if self.items < 0:
            raise LimitExceeded(f"its loops walk more than {MAX_SEQUENCE} items")
        if time.monotonic() > self.deadline:
            raise LimitExceeded(f"it ran for more than {self.seconds:g} s")


_local = threading.local()


@contextmanager
def budget() -> Iterator[None]:
    """One evaluation's budget of time and loop items, for the calling thread."""
    outer = getattr(_local, "budget", None)
    if outer is not None:  # nested (a filter rendering a template): the outer budget counts
        yield
        return
    _local.budget = _Budget(MAX_SECONDS)
    try:
        yield
    finally:
        _local.budget = None


def spend(items: int = 0) -> None:
    """Charge the running evaluation (if any) ``items`` loop items, and check its time."""
    current: _Budget | None = getattr(_local, "budget", None)
    if current is not None:
        current.spend(items)


def counted(iterable: Iterable[Any]) -> Iterator[Any]:
    """An iterable that charges the budget one item per item: what every ``{% for %}`` walks."""
    for item in iterable:
        spend(1)
        yield item


# -- sizes, estimated before building --------------------------------------------------------


def _size(value: Any) -> int:
    if isinstance(value, str | list | tuple | dict | set | frozenset):
        return len(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value.bit_length()
    return 0


def _refuse_if(size: int, what: str, allowed: int = MAX_SEQUENCE) -> None:
    if size > allowed:
        raise LimitExceeded(f"{what} would build {size} items (at most {MAX_SEQUENCE})")


def check_result(result: Any, inputs: Iterable[Any], what: str) -> None:
    """A built value may not exceed ``MAX_SEQUENCE``, unless its inputs were already as long."""
    size = _size(result)
    if size > MAX_SEQUENCE:
        _refuse_if(size, what, max(MAX_SEQUENCE, *(_size(v) for v in inputs)))


_PRINTF = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?([a-zA-Z%])")
_NUMBER = re.compile(r"\d+")


def check_printf(fmt: str) -> None:
    """``'%9999999d' % x``: the widths of a printf-style format, before it is applied."""
    total = len(fmt)
    for width, precision, _ in _PRINTF.findall(fmt):
        if "*" in (width, precision):
            raise LimitExceeded("a '*' width or precision is not allowed in a format")
        total += int(width or 0) + int(precision or 0)
    _refuse_if(total, "the format")


def check_str_format(fmt: str) -> None:
    """``'{:9999999}'.format(x)``: the widths of a ``str.format`` format, before it is applied."""
    total = len(fmt)
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError:
        return  # a malformed format fails on its own when applied
    for _, _, spec, _ in fields:
        if spec and "{" in spec:
            raise LimitExceeded("a nested '{}' width or precision is not allowed in a format")
        total += sum(int(n) for n in _NUMBER.findall(spec or ""))
    _refuse_if(total, "the format")


def _replaced(s: str, old: Any, new: Any, count: Any) -> int:
    old, new = str(old), str(new)
    times = s.count(old) if old else len(s) + 1
    if isinstance(count, int) and count >= 0:
        times = min(times, count)
    return len(s) + times * max(len(new) - len(old), 0)


def _joined(sep: Any, items: Any) -> int:
    if not isinstance(items, list | tuple | str | dict | set | frozenset):
        return 0
    return len(str(sep)) * max(len(items) - 1, 0) + sum(len(str(x)) for x in items)


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _lines(s: Any) -> int:
    return str(s).count("\n") + 1


# str methods that can build a long string in one call: (string, args, kwargs) -> estimated size
STR_METHODS: Mapping[str, Callable[[str, tuple[Any, ...], dict[str, Any]], int]] = {
    "center": lambda s, a, k: max(len(s), _int(a[0] if a else k.get("width"))),
    "ljust": lambda s, a, k: max(len(s), _int(a[0] if a else k.get("width"))),
    "rjust": lambda s, a, k: max(len(s), _int(a[0] if a else k.get("width"))),
    "zfill": lambda s, a, k: max(len(s), _int(a[0] if a else k.get("width"))),
    "expandtabs": lambda s, a, k: len(s) + s.count("\t") * max(_int(a[0] if a else
                                                                    k.get("tabsize", 8)), 0),
    "replace": lambda s, a, k: _replaced(s, a[0] if a else k.get("old", ""),
                                         a[1] if len(a) > 1 else k.get("new", ""),
                                         a[2] if len(a) > 2 else k.get("count", -1)),
    "join": lambda s, a, k: _joined(s, a[0] if a else k.get("iterable")),
}


def check_str_method(s: str, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    estimate = STR_METHODS.get(name)
    if estimate is not None:
        _refuse_if(estimate(s, args, kwargs), f"str.{name}")


def _json_indent(a: Mapping[str, Any]) -> int:
    indent = a.get("indent")
    if _int(indent) > MAX_JSON_INDENT:
        raise LimitExceeded(f"tojson indent {indent} is too large (at most {MAX_JSON_INDENT})")
    return 0


def _filled(a: Mapping[str, Any], count: str) -> int:
    n = _int(a.get(count))
    return n if a.get("fill_with") is not None or count == "slices" else 0


# filters that can build a lot in one call: (bound arguments by name) -> estimated size
FILTERS: Mapping[str, Callable[[Mapping[str, Any]], int]] = {
    "center": lambda a: max(len(str(a["value"])), _int(a.get("width", 80))),
    "indent": lambda a: len(str(a["s"])) + _lines(a["s"]) * (
        len(w) if isinstance(w := a.get("width", 4), str) else _int(w)),
    "replace": lambda a: _replaced(str(a["s"]), a["old"], a["new"], a.get("count")),
    "join": lambda a: _joined(a.get("d", ""), a["value"]),
    "wordwrap": lambda a: len(str(a["s"])) + (len(str(a["s"])) + 1) * len(
        str(a.get("wrapstring") or "\n")),
    "tojson": _json_indent,
    "batch": lambda a: _filled(a, "linecount"),
    "slice": lambda a: _filled(a, "slices"),
}


def check_filter(name: str, bound: Mapping[str, Any]) -> None:
    if name == "format" and isinstance(bound.get("value"), str):
        check_printf(bound["value"])
    estimate = FILTERS.get(name)
    if estimate is not None:
        _refuse_if(estimate(bound), f"|{name}")


def check_power(base: Any, exponent: Any) -> None:
    if isinstance(exponent, int | float) and abs(exponent) > MAX_EXPONENT:
        raise LimitExceeded(f"exponent {exponent!r} is too large (at most {MAX_EXPONENT})")
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0:
        bits = base.bit_length() * exponent
        if bits > MAX_SEQUENCE:
            raise LimitExceeded(f"'**' would build a number of {bits} bits (at most {MAX_SEQUENCE})")


def check_repeat(left: Any, right: Any) -> None:
    for seq, times in ((left, right), (right, left)):
        if isinstance(seq, str | list | tuple) and isinstance(times, int):
            _refuse_if(len(seq) * times, "repetition")


# -- static checks, when a runbook is validated -------------------------------------------------


def _const(node: nodes.Node) -> Any:
    return node.value if isinstance(node, nodes.Const) else None


def check_tree(tree: nodes.Node) -> None:
    """Limits broken by literals (``9 ** 99999``, ``'x'.center(10**9)``), found before running."""
    for power in tree.find_all(nodes.Pow):
        if _has_power(power.left) or _has_power(power.right):
            raise LimitExceeded("'**' may not be nested: each power multiplies the size of the last")
        exponent = _const(power.right)
        if isinstance(exponent, int | float) and abs(exponent) > MAX_EXPONENT:
            raise LimitExceeded(f"exponent {exponent!r} is too large (at most {MAX_EXPONENT})")
    for loop in tree.find_all(nodes.For):
        if loop.recursive:
            raise LimitExceeded("recursive loops are not allowed")
    for mod in tree.find_all(nodes.Mod):
        fmt = _const(mod.left)
        if isinstance(fmt, str):
            check_printf(fmt)
    for call in tree.find_all(nodes.Call):
        target = call.node
        if isinstance(target, nodes.Getattr):
            literal = _const(target.node)
            if isinstance(literal, str) and target.attr in ("format", "format_map"):
                check_str_format(literal)
            if target.attr in STR_METHODS and target.attr != "join":
                _literal_widths(call.args, target.attr)
    for flt in tree.find_all(nodes.Filter):
        fmt = _const(flt.node) if flt.node is not None else None
        if flt.name == "format" and isinstance(fmt, str):
            check_printf(fmt)
        elif flt.name in ("center", "indent", "batch", "slice"):
            _literal_widths(flt.args, f"|{flt.name}")


def _has_power(node: nodes.Node) -> bool:
    return isinstance(node, nodes.Pow) or any(True for _ in node.find_all(nodes.Pow))


def _literal_widths(args: list[nodes.Expr], what: str) -> None:
    for arg in args[:1]:
        width = _const(arg)
        if isinstance(width, int) and not isinstance(width, bool) and width > MAX_SEQUENCE:
            raise LimitExceeded(f"{what}({width}) would build {width} items (at most {MAX_SEQUENCE})")
