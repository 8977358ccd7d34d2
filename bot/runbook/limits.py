"""What one runbook may cost: bounds on its file, its YAML, and every expression it evaluates.

Runbooks are data, and a worker evaluates them for every run it carries, so one poisoned runbook
must fail fast with a clear error, never exhaust the worker's memory or stall its other runs. Every
bound lives here (docs/runbook-language.md, "Limits"):

- the file: at most ``MAX_FILE_BYTES`` of text, and at most ``MAX_NODES`` nodes and
  ``MAX_EXPANDED_BYTES`` of scalars once YAML aliases are expanded (a 2 MB block aliased 50,000
  times is a few lines of text);
- an expression or template: nothing it builds (a string, a list, the digits of a number) may be
  longer than ``MAX_SEQUENCE``, or than all the data it was handed (its context) where that is
  longer (``allowed()``: one bound per evaluation, so steps cannot compound); its loops walk at
  most ``MAX_SEQUENCE`` items in all, and it may run for at most ``MAX_SECONDS``.

A value's size (``size_of``) is deep: a list holding a 60,000-character string twice holds 120,000
characters, so a list of references cannot stand in for the copies a later ``|tojson``, ``|string``
or ``|map`` would make. Sizes are checked *as each value is built*, never after a chain of them (an
allocation of gigabytes cannot be taken back, and a pod has 512Mi):

- estimated *before* building, from the operands, wherever one operation can build many times its
  operands: ``~`` (each operand as text), ``+`` and ``*`` on strings and lists, ``**``, ``%`` and
  ``|format`` and ``str.format`` (widths and each argument as text, per field), ``join``,
  ``center``/``ljust``/``rjust``/``zfill``/``expandtabs``/``replace`` (methods or filters),
  ``|indent``, ``|wordwrap``, ``|batch``, ``|slice``, ``|sum`` of lists, ``|string``, ``|tojson``,
  ``|pprint``, ``|escape``/``|forceescape``, ``|urlencode``, ``|urlize`` and ``|xmlattr``;
- checked as soon as built where an operation builds at most a few times its largest operand
  (``|upper``, ``|list``, ``|sort``, ``|dictsort``, method calls, list and dict literals, each
  ``{% set %}`` value): the operands were within the limit, so this one step cannot overshoot far;
- counted item by item where a filter builds lazily (``|map``, ``|select``, ``|batch``, …:
  ``Metered``), so ``|list`` or ``|join`` of a million new strings stops at the limit;
- counted piece by piece for the output: each ``{{ }}`` is sized before it is turned into text
  (``check_output``), and a ``{% set %}…{% endset %}`` or ``{% filter %}`` block's output is an
  ``Output`` that refuses the piece that would take it past the limit.

The time budget is checked on every loop item, filter, method call, operator and chunk of output,
so a loop that builds nothing still ends. The static checks (``check_tree``, in
``bot.runbook.static_limits``) find the same mistakes written as literals when a runbook is
validated, and a chain of ``{% set s = s ~ s %}`` (or ``+``, ``[s, s]``, ``|join``, …) that
multiplies a value past the limit.
"""

from __future__ import annotations

import itertools
import re
import string
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, MappingView
from contextlib import contextmanager
from typing import Any

MAX_FILE_BYTES = 262_144  # 256 KiB; the largest shipped runbook is 12 KB, this size validates in ~2 s of CPU
MAX_NODES = 200_000  # YAML nodes after aliases expand ("billion laughs")
MAX_EXPANDED_BYTES = 4_000_000  # bytes of scalars after aliases expand
MAX_SEQUENCE = 100_000  # the longest string, list or number (in bits) one evaluation may build
MAX_EXPONENT = 1_000  # the largest exponent of ``**``
MAX_SECONDS = 1.0  # the time one evaluation of an expression or template may take
MAX_JSON_INDENT = 16  # ``|tojson(indent=...)``: the output grows with indent times depth
MAX_WALK = 16 * MAX_SEQUENCE  # the most of one value measured: a value handed in counts at most this


class LimitExceeded(Exception):
    """An expression would build or run for more than a limit allows."""


# -- the per-evaluation budget -----------------------------------------------------------------


class _Budget:
    def __init__(self, seconds: float, context: Mapping[str, Any] | None) -> None:
        self.deadline = time.monotonic() + seconds
        self.seconds = seconds
        self.items = MAX_SEQUENCE
        self.context = context
        self.given: int | None = None  # the size of the context, measured when first needed

    def given_size(self) -> int:
        if self.given is None:
            self.given = size_of(self.context, MAX_WALK) if self.context is not None else 0
            self.context = None
        return self.given

    def spend(self, items: int = 0) -> None:
        self.items -= items
        if self.items < 0:
            raise LimitExceeded(f"its loops walk more than {MAX_SEQUENCE} items")
        if time.monotonic() > self.deadline:
            raise LimitExceeded(f"it ran for more than {self.seconds:g} s")


_local = threading.local()


@contextmanager
def budget(context: Mapping[str, Any] | None = None) -> Iterator[None]:
    """One evaluation's budget of time and loop items, for the calling thread; what it builds may
    be as long as all of ``context`` (the data it was handed) where that is over ``MAX_SEQUENCE``."""
    outer = getattr(_local, "budget", None)
    if outer is not None:  # nested (a filter rendering a template): the outer budget counts
        yield
        return
    _local.budget = _Budget(MAX_SECONDS, context)
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

_CONTAINERS = (list, tuple, dict, set, frozenset, Mapping, MappingView)
_SEQUENCES = frozenset({list, tuple, set, frozenset})  # checked first: ``isinstance`` of an ABC is slow


def _is_mapping(value: Any) -> bool:
    return type(value) is dict or (type(value) not in _SEQUENCES and isinstance(value, Mapping))


def _is_container(value: Any) -> bool:
    kind = type(value)
    return kind in _SEQUENCES or kind is dict or isinstance(value, _CONTAINERS)


def _children(value: Any) -> Iterator[Any]:
    """A container's items; a mapping's keys and values (so it has twice its ``len`` of them)."""
    return itertools.chain.from_iterable(value.items()) if _is_mapping(value) else iter(value)


def _count(value: Any) -> int:
    return 2 * len(value) if _is_mapping(value) else len(value)


def size_of(value: Any, cap: int = MAX_SEQUENCE) -> int:
    """What ``value`` holds: a string's characters, a number's bits, and for a container every item
    inside it, however deep (a string inside counts its characters, anything else at least 1), so a
    container holding one list twice counts it twice. Counting stops past ``cap``: ``cap + 1``
    means "more than ``cap``"."""
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value.bit_length()
    if not _is_container(value):
        return 0
    # each item counts 1 as soon as its container is entered (so a long list is over at once),
    # and what it holds beyond that when it is reached
    total, walked = _count(value), 0
    done: dict[int, int] = {}  # a container met again (``[s, s]``) is counted, not walked, again
    stack: list[tuple[Any, Iterator[Any], int]] = [(value, _children(value), 0)]
    while stack and total <= cap:
        container, items, start = stack[-1]
        for item in items:
            kind = type(item)
            if kind is str or (kind is not int and isinstance(item, str | bytes)):
                total += len(item) - 1 if item else 0
            elif kind is int or (kind is not bool and isinstance(item, int)):
                total += item.bit_length() // 64
            elif _is_container(item) and len(item):
                if (known := done.get(id(item))) is not None:
                    total += known - 1
                    continue
                walked += 1
                stack.append((item, _children(item), total - 1))
                total += _count(item) - 1
                break
            if total > cap:
                break
        else:
            stack.pop()
            if total - start >= 64:  # a small one is as quick to walk again
                done[id(container)] = total - start
        if walked > cap:  # a nest of containers costs its walk, too
            return cap + 1
    return total if total <= cap else cap + 1


def _json_escapes(s: str) -> int:
    """What ``|tojson`` adds to a string: ``\\"``, ``\\n``, …, and ``\\u003c`` for ``<>&'``."""
    return sum(s.count(c) for c in '"\\\n\r\t') + 5 * sum(s.count(c) for c in "<>&'")


def text_size(value: Any, cap: int = MAX_SEQUENCE, indent: int = 0, json: bool = False) -> int:
    """About how long ``str(value)`` or (``json``) its JSON is: strings and numbers as written,
    containers with their brackets, quotes and separators, and with ``indent``, each item on a line
    indented by ``indent`` per level. Counting stops past ``cap``: ``cap + 1`` means "more than
    ``cap``"."""
    total = 0
    stack: list[Iterator[Any]] = [iter((value,))]  # one iterator per level
    while stack:
        quotes = 2 if len(stack) > 1 else 0  # a string inside a container is written quoted
        for item in stack[-1]:
            kind = type(item)
            if kind is str or (kind is not int and isinstance(item, str | bytes)):
                total += len(item) + quotes + (_json_escapes(item) if json and isinstance(
                    item, str) else 0)
            elif kind is int or (kind is not bool and isinstance(item, int)):
                total += item.bit_length() * 302 // 1000 + 2
            elif kind is bool or item is None:
                total += 5
            elif _is_container(item):
                per = 2 + 2 * _is_mapping(item) + (indent * len(stack) + 1 if indent else 0)
                total += 2 + len(item) * per
                stack.append(_children(item))
                break
            else:
                total += 24  # a float, or anything else written by its ``str``
            if total > cap:
                return cap + 1
        else:
            stack.pop()
        if total > cap:
            return cap + 1
    return total


def _text(value: Any) -> int:
    return text_size(value, MAX_WALK)


def _total(sizes: Iterable[int], cap: int = MAX_WALK) -> int:
    """The sum of sizes each counted up to ``cap``: ``cap + 1`` ("more than ``cap``") if one of
    them was cut short."""
    total = 0
    for size in sizes:
        if size > cap:
            return cap + 1
        total += size
        if total > MAX_WALK:
            break  # far past any limit: the rest need not be counted
    return total


def _refuse_if(size: int, what: str, allowed: int = MAX_SEQUENCE) -> None:
    if size > allowed:
        amount = f"more than {allowed}" if size == allowed + 1 else str(size)
        why = "" if allowed == MAX_SEQUENCE else ", as much as the data it was handed"
        raise LimitExceeded(f"{what} would build {amount} items (at most {allowed}{why})")


def allowed() -> int:
    """How long a built value may be: ``MAX_SEQUENCE``, or all the data the running evaluation was
    handed if that is longer (one bound for the whole evaluation, so steps cannot compound)."""
    current: _Budget | None = getattr(_local, "budget", None)
    return max(MAX_SEQUENCE, current.given_size() if current is not None else 0)


def _check(what: str, estimate: int | Callable[[int], int]) -> None:
    """Refuse a value ``estimate`` (or ``estimate(cap)``: ``cap + 1`` is longer than ``cap``) long
    if that is more than ``allowed()``."""
    size = estimate if isinstance(estimate, int) else estimate(MAX_SEQUENCE)
    if size <= MAX_SEQUENCE:
        return
    bound = allowed()
    if bound > MAX_SEQUENCE and not isinstance(estimate, int):
        size = estimate(bound)
    _refuse_if(size, what, bound)


def check_result(result: Any, what: str) -> None:
    """A value just built may not be longer than ``allowed()``: one step builds at most a few times
    its operands, which were checked the same way, so a chain of steps cannot overshoot."""
    _check(what, lambda cap: size_of(result, cap))


def check_literal(value: list[Any] | tuple[Any, ...] | dict[Any, Any]) -> None:
    """``[s, s]``, ``{'a': s, 'b': s}``: a literal holds its items, so it is as long as all of them."""
    check_result(value, "the literal")


def check_concat(values: tuple[Any, ...]) -> None:
    """``a ~ b ~ c`` writes each operand as text, then joins them."""
    _check("'~'", lambda cap: _total((text_size(v, cap) for v in values), cap))


def check_add(left: Any, right: Any) -> None:
    if (isinstance(left, str) and isinstance(right, str)) or (
            isinstance(left, list | tuple) and isinstance(right, list | tuple)):
        _check("'+'", lambda cap: _total((size_of(left, cap), size_of(right, cap)), cap))


def check_output(value: Any) -> Any:
    """Each ``{{ }}`` of a template, sized before it is turned into text (the environment's
    ``finalize``): a template renders at most ``MAX_SEQUENCE`` characters in all."""
    if text_size(value, MAX_SEQUENCE) > MAX_SEQUENCE:
        raise LimitExceeded(f"it renders more than {MAX_SEQUENCE} characters")
    return value


class Output(list[str]):
    """The output of a ``{% set %}…{% endset %}`` or ``{% filter %}`` block (or a loop inside
    one), refused at the piece that would take it past ``MAX_SEQUENCE`` characters."""

    size = 0

    def append(self, piece: str, /) -> None:
        self.size += len(piece)
        if self.size > MAX_SEQUENCE:
            raise LimitExceeded(f"a block renders more than {MAX_SEQUENCE} characters")
        super().append(piece)

    def extend(self, pieces: Iterable[str], /) -> None:
        for piece in pieces:
            self.append(piece)


class Metered(Iterator[Any]):
    """A filter's lazy result (``|map``, ``|select``, ``|batch``, …), whose items are counted as
    they are made (a string by its characters, a list by its items): all of them together may be
    as long as ``allowed()`` (measured once the count passes ``MAX_SEQUENCE``), so ``|list`` or
    ``|join`` of a million new strings stops there."""

    def __init__(self, items: Iterator[Any], what: str) -> None:
        self._items = items
        self._what = what
        self._measured = False
        self.built = 0
        self.bound = MAX_SEQUENCE

    def __iter__(self) -> Metered:
        return self

    def __next__(self) -> Any:
        item = next(self._items)
        # an item's own length: what it holds was built by a filter or call checked on its own
        # (``|map('center', n)``), or metered itself, or handed in, or checked as a literal
        if type(item) is str or _is_container(item) or isinstance(item, str | bytes):
            self.built += _count(item) or 1
        else:
            self.built += 1
        if self.built > self.bound:
            if not self._measured:
                self.bound, self._measured = allowed(), True
            _refuse_if(self.built, self._what, self.bound)
        return item


_PRINTF = re.compile(r"%(?:\(([^)]*)\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?([a-zA-Z%])")
_NUMBER = re.compile(r"\d+")


_NO_ARGS: Any = object()


def check_printf(fmt: str, args: Any = _NO_ARGS) -> None:
    """``'%9999999d' % x``, ``'%s%s' % (s, s)``: the widths of a printf-style format, and each
    argument as text per field that writes it, before it is applied."""
    total = len(fmt)
    positional = iter(args if isinstance(args, tuple) else (args,))
    for key, width, precision, conversion in _PRINTF.findall(fmt):
        if "*" in (width, precision):
            raise LimitExceeded("a '*' width or precision is not allowed in a format")
        total += int(width or 0) + int(precision or 0)
        if args is not _NO_ARGS and conversion != "%":
            arg = args.get(key) if key and isinstance(args, Mapping) else next(positional, None)
            total += _text(arg)
    if args is _NO_ARGS:
        _refuse_if(total, "the format")
    else:
        _check("the format", total)


_FIELD = re.compile(r"[^.\[]*")


def check_str_format(fmt: str, args: tuple[Any, ...] | None = None,
                     kwargs: Mapping[str, Any] | None = None) -> None:
    """``'{:9999999}'.format(x)``, ``'{0}{0}'.format(s)``: the widths of a ``str.format`` format,
    and (when given) each argument as text per field that writes it, before it is applied."""
    total = len(fmt)
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError:
        return  # a malformed format fails on its own when applied
    auto = 0
    for _, field, spec, _ in fields:
        if spec and "{" in spec:
            raise LimitExceeded("a nested '{}' width or precision is not allowed in a format")
        total += sum(int(n) for n in _NUMBER.findall(spec or ""))
        if field is None or args is None:
            continue
        name = m.group() if (m := _FIELD.match(field)) else ""
        if not name:
            name, auto = str(auto), auto + 1
        arg = (args[int(name)] if int(name) < len(args) else None) if name.isdigit() else (
            (kwargs or {}).get(name))
        total += _text(arg)  # an attribute or item of it (``{0.a}``) is shorter than all of it
    _check("the format", total)


def _replaced(s: str, old: Any, new: Any, count: Any) -> int:
    old, new = str(old), str(new)
    times = s.count(old) if old else len(s) + 1
    if isinstance(count, int) and count >= 0:
        times = min(times, count)
    return len(s) + times * max(len(new) - len(old), 0)


def _joined(sep: Any, items: Any) -> int:
    if not isinstance(items, list | tuple | str | dict | set | frozenset):
        return 0  # a lazy filter's items are listed first (templating), so they are counted there
    return _total((_text(sep) * max(len(items) - 1, 0), *(_text(x) for x in items)))


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
        size = estimate(s, args, kwargs)
        _check(f"str.{name}", size)


def _json_indent(a: Mapping[str, Any]) -> int:
    indent = a.get("indent")
    if _int(indent) > MAX_JSON_INDENT:
        raise LimitExceeded(f"tojson indent {indent} is too large (at most {MAX_JSON_INDENT})")
    return 0


def _json(a: Mapping[str, Any]) -> int:
    return _json_indent(a) or text_size(a["value"], MAX_WALK, _int(a.get("indent")), json=True)


_ESCAPED = "&<>\"'"  # markupsafe writes each as 4 or 5 characters


def _escaped(s: Any) -> int:
    if not isinstance(s, str):
        return 5 * _text(s)
    return len(s) + 4 * sum(s.count(c) for c in _ESCAPED)


_URL_SAFE = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~/"


def _urlencoded(value: Any) -> int:
    if not isinstance(value, str):
        return 3 * _text(value)
    raw = value.encode()
    return len(raw) + 2 * len(raw.translate(None, _URL_SAFE))


_URLISH = re.compile(r"\S*[.@:]\S*")


def _urlized(a: Mapping[str, Any]) -> int:
    s = str(a["value"]) if isinstance(a["value"], str) else ""
    links = sum(1 for _ in _URLISH.finditer(s))  # each may become <a href="…" target=… rel=…>…</a>
    return 2 * len(s) + links * (_text(a.get("target") or "") + _text(a.get("rel") or "") + 64)


def _summed(a: Mapping[str, Any]) -> int:
    """``|sum(start=[])`` joins lists: as many items as they have (each was counted as built)."""
    start, items = a.get("start", 0), a["iterable"]
    if not isinstance(start, list | tuple) or not isinstance(items, list | tuple):
        return 0
    return len(start) + sum(len(x) for x in items if isinstance(x, list | tuple))


def _filled(a: Mapping[str, Any], count: str) -> int:
    n = _int(a.get(count))
    return n if a.get("fill_with") is not None or count == "slices" else 0


# filters that can build a lot in one call: (bound arguments by name) -> estimated size
FILTERS: Mapping[str, Callable[[Mapping[str, Any]], int]] = {
    "center": lambda a: max(_text(a["value"]), _int(a.get("width", 80))),
    "indent": lambda a: _text(a["s"]) + _lines(a["s"]) * (
        len(w) if isinstance(w := a.get("width", 4), str) else _int(w)),
    "replace": lambda a: _replaced(str(a["s"]), a["old"], a["new"], a.get("count")),
    "join": lambda a: _joined(a.get("d", ""), a["value"]),
    "wordwrap": lambda a: _text(a["s"]) + (_text(a["s"]) + 1) * _text(a.get("wrapstring") or "\n"),
    "tojson": _json,
    "pprint": lambda a: text_size(a["value"], MAX_WALK, 1),
    "string": lambda a: _text(a["s"]),
    "escape": lambda a: _escaped(a["s"]),
    "e": lambda a: _escaped(a["s"]),
    "forceescape": lambda a: _escaped(a["value"]),
    "urlencode": lambda a: _urlencoded(a["value"]),
    "urlize": _urlized,
    "xmlattr": lambda a: 6 * _text(a["d"]),
    "sum": _summed,
    "batch": lambda a: _filled(a, "linecount"),
    "slice": lambda a: _filled(a, "slices"),
}


def check_filter(name: str, bound: Mapping[str, Any]) -> None:
    if name == "format" and isinstance(bound.get("value"), str):
        check_printf(bound["value"], bound.get("kwargs") or tuple(bound.get("args", ())))
    estimate = FILTERS.get(name)
    if estimate is not None:
        size = estimate(bound)
        _check(f"|{name}", size)


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
            _check("repetition", size_of(seq, MAX_WALK) * max(times, 0))
    if isinstance(left, int) and isinstance(right, int):
        _check("'*'", left.bit_length() + right.bit_length())
