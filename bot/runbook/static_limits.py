"""The static half of the runbook limits (``bot.runbook.limits``): what a template's syntax tree
shows will break them, found when a runbook is validated rather than when it runs.

Literals (``9 ** 99999``, ``'x'.center(10**9)``, a ``%`` or ``str.format`` width of a billion) and
chains of ``{% set %}`` that multiply a value past ``MAX_SEQUENCE`` are refused as written. The
evaluation-time checks stay in ``bot.runbook.limits``; this module is separate so that each stays
one subject, within the module-size budget (docs/architecture.md).
"""

from __future__ import annotations

from typing import Any

from jinja2 import nodes

from bot.runbook.limits import (
    MAX_EXPONENT,
    MAX_SEQUENCE,
    STR_METHODS,
    LimitExceeded,
    check_printf,
    check_str_format,
)


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
    _check_set_chains(tree)


def _has_power(node: nodes.Node) -> bool:
    return isinstance(node, nodes.Pow) or any(True for _ in node.find_all(nodes.Pow))


def _literal_widths(args: list[nodes.Expr], what: str) -> None:
    for arg in args[:1]:
        width = _const(arg)
        if isinstance(width, int) and not isinstance(width, bool) and width > MAX_SEQUENCE:
            raise LimitExceeded(f"{what}({width}) would build {width} items (at most {MAX_SEQUENCE})")


# filters whose result is a string or list holding the whole of their input (``(s ~ s)|upper``
# still doubles ``s``)
_WHOLE = frozenset({"upper", "lower", "title", "capitalize", "list", "string", "join", "sort",
                    "reverse", "dictsort", "batch", "tojson", "pprint", "escape", "e", "forceescape",
                    "safe", "center", "indent", "wordwrap", "urlencode", "format"})


class _Chains:
    """What the ``{% set %}`` statements written so far make of each variable: how many copies
    of a first value it holds (``weights``), and whether it is surely a string or a list (so
    ``+`` and ``*`` on it build, rather than add numbers)."""

    def __init__(self) -> None:
        self.weights: dict[str, int] = {}
        self.sequences: set[str] = set()

    def is_sequence(self, node: nodes.Node) -> bool:
        if isinstance(node, nodes.Name):
            return node.name in self.sequences
        if isinstance(node, nodes.Const):
            return isinstance(node.value, str | list | tuple)
        if isinstance(node, nodes.Add):
            return self.is_sequence(node.left) or self.is_sequence(node.right)
        if isinstance(node, nodes.Mod):
            return isinstance(_const(node.left), str)
        if isinstance(node, nodes.Call):
            return isinstance(node.node, nodes.Getattr) and node.node.attr in ("format", "join")
        return isinstance(node, nodes.Concat | nodes.List | nodes.Tuple | nodes.Dict) or (
            isinstance(node, nodes.Filter) and node.name in _WHOLE)

    def copies(self, node: nodes.Node) -> int:
        """How many first values an expression's value holds whole (0: none known)."""
        if isinstance(node, nodes.Name):
            return self.weights.get(node.name, 1) if node.ctx == "load" else 0
        if isinstance(node, nodes.Concat | nodes.Output):
            return sum(self.copies(child) for child in node.nodes)
        if isinstance(node, nodes.List | nodes.Tuple):
            return sum(self.copies(item) for item in node.items)
        if isinstance(node, nodes.Dict):
            return sum(self.copies(pair.key) + self.copies(pair.value) for pair in node.items)
        if isinstance(node, nodes.Add | nodes.Mod) and self.is_sequence(node):
            return self.copies(node.left) + self.copies(node.right)
        if isinstance(node, nodes.Mul):
            for seq, times in ((node.left, node.right), (node.right, node.left)):
                count = _const(times)
                if isinstance(count, int) and count > 0 and self.is_sequence(seq):
                    return self.copies(seq) * count
            return 0
        if isinstance(node, nodes.CondExpr):
            return max(self.copies(node.expr1), self.copies(node.expr2) if node.expr2 else 0)
        if isinstance(node, nodes.Filter) and node.name in _WHOLE and node.node is not None:
            args = node.args if node.name in ("join", "format") else []
            return self.copies(node.node) + sum(self.copies(arg) for arg in args)
        if (isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr)
                and node.node.attr in ("format", "join")):
            return self.copies(node.node.node) + sum(self.copies(arg) for arg in node.args)
        return 0

    def assign(self, name: str, body: list[nodes.Node], sequence: bool) -> None:
        weight = sum(self.copies(node) for node in body)
        self.weights[name] = weight or 1
        if sequence:
            self.sequences.add(name)
        else:
            self.sequences.discard(name)
        if weight > MAX_SEQUENCE:
            raise LimitExceeded(f"the chain of {{% set %}} that builds {name!r} copies its first "
                                f"value {weight} times (at most {MAX_SEQUENCE})")


def _check_set_chains(tree: nodes.Node) -> None:
    """``{% set s = s ~ s %}`` written 17 times copies ``s`` 2**17 times: refused as written, also
    through other variables (``{% set t = s ~ s %}{% set s = t %}``). Only what surely builds a
    string or a list counts (``~``, literals, ``|join``, …; ``+`` and ``*`` of one), and sets are
    followed in the order written, a set inside a loop or a branch counting once."""
    chains = _Chains()
    for node in tree.find_all((nodes.Assign, nodes.AssignBlock)):
        if not isinstance(node, nodes.Assign | nodes.AssignBlock):
            continue
        if not isinstance(node.target, nodes.Name):
            for ref in node.target.find_all(nodes.Name):
                chains.assign(ref.name, [], False)
        elif isinstance(node, nodes.Assign):
            chains.assign(node.target.name, [node.node], chains.is_sequence(node.node))
        else:
            chains.assign(node.target.name, list(node.body), True)
