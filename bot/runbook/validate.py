"""Static checks that need the whole runbook and the action catalog.

The model checks each field on its own; these checks catch what only shows across the document,
before anything runs against a cluster: an action that does not exist, a ``with`` param the action
does not take, a reference to a param never declared or to a step that has not run yet, a ``goto``
into nowhere, and, above all, a destructive step whose approval was weakened below the floor.

Expressions are checked by walking their Jinja2 AST (``jinja2.nodes``): every ``Name`` and every
``Getattr``/``Getitem`` chain rooted at a context name (``params``, ``steps``, ``item``, ``run``,
``result``, ``plan``) is resolved against what exists at that point of the runbook.

The runbook layer does not import ``bot.actions``; callers pass the registry, which satisfies the
small ``Catalog`` protocol below.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from jinja2 import nodes
from pydantic import BaseModel, ValidationError

from bot.errors import ExpressionError, ParamError, Problem
from bot.runbook.autorun import writing_steps
from bot.runbook.model import MAX_BATCH, Approval, Runbook, Step
from bot.runbook.params import coerce_param
from bot.runbook.templating import parse_expression, parse_template

Loc = tuple[str | int, ...]


class ActionFacts(Protocol):
    @property
    def params_model(self) -> type[BaseModel]: ...
    @property
    def destructive(self) -> bool: ...


class Catalog(Protocol):
    """What validation needs from the action registry."""

    def __contains__(self, name: object) -> bool: ...
    def get(self, name: str) -> ActionFacts: ...
    def names(self) -> list[str]: ...


class Locator(Protocol):
    def __call__(self, loc: Loc, message: str, *, key: bool = False) -> Problem: ...


def _nowhere(loc: Loc, message: str, *, key: bool = False) -> Problem:
    return Problem("<runbook>", 0, 0, message)


RUN_FIELDS = ("id", "requester", "started_at")
STEP_FIELDS = ("result", "outputs", "status", "items")
# ``x.items`` on a result finds the dict method before the key: results must use ``x['items']``
DICT_METHODS = frozenset({"items", "keys", "values", "get", "pop", "update", "copy", "clear",
                          "setdefault", "popitem", "fromkeys"})


@dataclass(frozen=True)
class Scope:
    """What an expression may refer to, depending on where in the step it is written."""

    step_index: int
    item: bool = False
    result: bool = False
    plan: bool = False

    def roots(self) -> list[str]:
        names = ["params", "steps", "run"]
        if self.item:
            names.append("item")
        if self.result:
            names.append("result")
        if self.plan:
            names.append("plan")
        return names


def _suggest(name: str, options: list[str]) -> str:
    close = difflib.get_close_matches(name, options, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _listing(options: list[str]) -> str:
    return ", ".join(options) if options else "none"


class _Checker:
    def __init__(self, runbook: Runbook, catalog: Catalog | None, locate: Locator) -> None:
        self.runbook = runbook
        self.catalog = catalog
        self.locate = locate
        self.problems: list[Problem] = []
        self.order: dict[str, int] = {}
        for index, step in enumerate(runbook.spec.steps):
            self.order.setdefault(step.id, index)

    def add(self, loc: Loc, message: str, *, key: bool = False) -> None:
        self.problems.append(self.locate(loc, message, key=key))

    # -- references -------------------------------------------------------------------------

    def expression(self, loc: Loc, source: str, scope: Scope, *, template: bool) -> None:
        try:
            tree = parse_template(source) if template else parse_expression(source)
        except ExpressionError as e:
            self.add(loc, str(e))
            return
        local = {n.name for n in tree.find_all(nodes.Name) if n.ctx in ("store", "param")}
        if any(isinstance(n, nodes.For) for n in tree.find_all(nodes.For)):
            local.add("loop")
        for message in self._walk(tree, scope, local):
            self.add(loc, f"{message} [in {source!r}]")

    def _walk(self, node: nodes.Node, scope: Scope, local: set[str]) -> Iterator[str]:
        if isinstance(node, nodes.Getattr | nodes.Getitem | nodes.Name):
            chain: list[str | None] = []
            dotted: list[bool] = []  # per element: written with a dot (not brackets)
            cursor: nodes.Node = node
            dynamic: list[nodes.Node] = []
            while isinstance(cursor, nodes.Getattr | nodes.Getitem):
                dotted.append(isinstance(cursor, nodes.Getattr))
                if isinstance(cursor, nodes.Getattr):
                    chain.append(cursor.attr)
                elif isinstance(cursor.arg, nodes.Const) and isinstance(cursor.arg.value, str):
                    chain.append(cursor.arg.value)
                else:
                    chain.append(None)
                    dynamic.append(cursor.arg)
                cursor = cursor.node
            chain.reverse()
            dotted.reverse()
            if isinstance(cursor, nodes.Name):
                if cursor.ctx == "load" and cursor.name not in local:
                    yield from self._reference(cursor.name, chain, node, scope, dotted)
            else:
                yield from self._walk(cursor, scope, local)
            for arg in dynamic:
                yield from self._walk(arg, scope, local)
            return
        for child in node.iter_child_nodes():
            yield from self._walk(child, scope, local)

    def _reference(
        self, root: str, chain: list[str | None], node: nodes.Node, scope: Scope,
        dotted: list[bool] | None = None,
    ) -> Iterator[str]:
        roots = scope.roots()
        if root not in roots:
            why = {
                "item": "'item' exists only in a step with 'foreach'",
                "result": "'result' exists only in 'outputs' and 'wait_until'",
                "plan": "'plan' exists only in 'guards'",
            }.get(root, f"unknown name {root!r}{_suggest(root, roots)}")
            yield f"{why}; here you can use: {', '.join(roots)}"
            return
        first = chain[0] if chain else None
        if root == "params" and first is not None:
            declared = list(self.runbook.spec.params)
            if first not in declared:
                yield (f"unknown param {first!r}{_suggest(first, declared)}; "
                       f"declared params: {_listing(declared)}")
        elif root == "run" and first is not None and first not in RUN_FIELDS:
            yield f"unknown field run.{first}; run has: {', '.join(RUN_FIELDS)}"
        elif root == "steps" and first is not None:
            yield from self._step_reference(first, chain[1:], scope, (dotted or [])[1:])
        elif (root == "result" and isinstance(node, nodes.Getattr) and len(chain) == 1
              and first in DICT_METHODS):
            yield f"write result[{first!r}], not result.{first} (that is the dict method)"

    def _step_reference(self, step_id: str, rest: list[str | None], scope: Scope,
                        dotted: list[bool] | None = None) -> Iterator[str]:
        earlier = [s.id for s in self.runbook.spec.steps[: scope.step_index]]
        if step_id not in self.order:
            # an outcome rule comes after every step: "before this one" would read oddly there
            which = ("steps" if scope.step_index >= len(self.runbook.spec.steps)
                     else "steps before this one")
            yield (f"unknown step {step_id!r}{_suggest(step_id, list(self.order))}; "
                   f"{which}: {_listing(earlier)}")
            return
        if self.order[step_id] >= scope.step_index:
            yield (f"step {step_id!r} does not run before this one; steps.<id> can only read "
                   f"earlier steps: {_listing(earlier)}"
                   + ("; use 'result' for this step's own result" if scope.result else ""))
            return
        if not rest or rest[0] is None:
            return
        part = rest[0]
        if part not in STEP_FIELDS:
            yield (f"unknown field steps.{step_id}.{part}{_suggest(part, list(STEP_FIELDS))}; "
                   f"a step has: {', '.join(STEP_FIELDS)}")
            return
        target = self.runbook.spec.steps[self.order[step_id]]
        if part == "outputs" and len(rest) > 1 and rest[1] is not None:
            outputs = list(target.outputs)
            if rest[1] not in outputs:
                yield (f"step {step_id!r} has no output {rest[1]!r}{_suggest(rest[1], outputs)}; "
                       f"its outputs: {_listing(outputs)}")
        if part == "result" and len(rest) > 1 and rest[1] in DICT_METHODS \
                and (dotted is None or len(dotted) < 2 or dotted[1]):
            yield (f"write steps.{step_id}.result[{rest[1]!r}], not .{rest[1]} "
                   f"(that is the dict method)")

    # -- steps ------------------------------------------------------------------------------

    def step(self, index: int, step: Step) -> None:
        at: Loc = ("spec", "steps", index)
        each = step.foreach is not None
        base = Scope(index, item=each)
        if step.id in self.order and self.order[step.id] != index:
            first = self.locate(("spec", "steps", self.order[step.id], "id"), "")
            self.add((*at, "id"), f"duplicate step id {step.id!r} (first used at line {first.line})")
        self.expression((*at, "title"), step.title, base, template=True)
        if step.manual is not None:
            self.expression((*at, "manual"), step.manual, base, template=True)
        if isinstance(step.when, str):
            self.expression((*at, "when"), step.when, Scope(index), template=False)
        elif step.when is not None:
            self.expression((*at, "when", "expr"), step.when.expr, Scope(index), template=False)
            self.expression((*at, "when", "because"), step.when.because, Scope(index),
                            template=True)
        if step.foreach is not None:
            self.expression((*at, "foreach"), step.foreach, Scope(index), template=False)
        if isinstance(step.batch, str):
            self.expression((*at, "batch"), step.batch, Scope(index), template=False)
            self.batch_literal((*at, "batch"), step.batch)
        for g, guard in enumerate(step.guards):
            scope = Scope(index, item=each, plan=True)
            self.expression((*at, "guards", g, "expr"), guard.expr, scope, template=False)
            self.expression((*at, "guards", g, "message"), guard.message, scope, template=True)
            if guard.checks is not None:
                self.expression((*at, "guards", g, "checks"), guard.checks, scope, template=True)
        if step.approval is not None and step.approval.description:
            self.expression((*at, "approval", "description"), step.approval.description, base,
                            template=True)
        if step.wait_until is not None:
            scope = Scope(index, item=each, result=True)
            self.expression((*at, "wait_until", "expr"), step.wait_until.expr, scope,
                            template=False)
            if step.wait_until.waiting_for is not None:
                self.expression((*at, "wait_until", "waiting_for"), step.wait_until.waiting_for,
                                scope, template=True)
        for name, source in step.outputs.items():
            self.expression((*at, "outputs", name), source, Scope(index, item=each, result=True),
                            template=False)
        for key, value in step.with_.items():
            for path, text in _strings(value, (*at, "with", key)):
                self.expression(path, text, base, template=True)
        if not isinstance(step.on_failure, str) and step.on_failure.goto not in self.order:
            target = step.on_failure.goto
            self.add((*at, "on_failure", "goto"),
                     f"goto target {target!r} is not a step{_suggest(target, list(self.order))}; "
                     f"steps: {_listing(list(self.order))}")
        if step.approval is not None:
            self.narrower(at, step, step.approval)
        if step.action is not None:
            self.action(at, step)

    def batch_literal(self, at: Loc, source: str) -> None:
        """A literal batch size must be a whole number from 1 to 1000."""
        text = source.strip()
        if text.lstrip("-").isdigit() and not 1 <= int(text) <= MAX_BATCH:
            self.add(at, f"batch {text} is not a batch size: expected a whole number from 1 to "
                         f"{MAX_BATCH}, or an expression giving one (params.batch_size)")

    def narrower(self, at: Loc, step: Step, mine: Approval) -> None:
        """A step's approver groups may narrow the runbook's, never widen them (any step)."""
        floor = self.runbook.spec.approvals
        if mine.groups is None or floor.groups is None:
            return
        wider = [g for g in mine.groups if g not in floor.groups]
        if wider:
            destructive = (self.catalog is not None and step.action is not None
                           and step.action in self.catalog
                           and self.catalog.get(step.action).destructive)
            why = (f"step {step.id!r} runs destructive action {step.action!r}" if destructive
                   else f"step {step.id!r}")
            self.add((*at, "approval", "groups"),
                     f"{why}: groups {', '.join(wider)} are not in the runbook's "
                     f"spec.approvals.groups ({_listing(list(floor.groups))}); a step may "
                     f"narrow who approves, never widen it")

    def action(self, at: Loc, step: Step) -> None:
        assert step.action is not None
        if self.catalog is None:
            return
        if step.action not in self.catalog:
            self.add((*at, "action"), f"unknown action {step.action!r}"
                     f"{_suggest(step.action, self.catalog.names())}; "
                     f"see docs/action-results.md for the actions")
            return
        spec = self.catalog.get(step.action)
        self.with_params(at, step, spec.params_model)
        if spec.destructive:
            self.destructive(at, step)

    def with_params(self, at: Loc, step: Step, model: type[BaseModel]) -> None:
        fields = model.model_fields
        names = [info.alias or name for name, info in fields.items()]
        literal: dict[str, Any] = {}
        for key, value in step.with_.items():
            if key not in names:
                self.add((*at, "with", key),
                         f"action {step.action!r} has no param {key!r}{_suggest(key, names)}; "
                         f"its params: {_listing(names)}", key=True)
            elif not _templated(value):
                literal[key] = value
        for name, info in fields.items():
            key = info.alias or name
            if info.is_required() and key not in step.with_:
                self.add((*at, "with") if step.with_ else (*at, "action"),
                         f"action {step.action!r} needs param {key!r} in 'with'"
                         + (f" ({info.description})" if info.description else ""))
        try:
            model.model_validate(literal)
        except ValidationError as e:
            for err in e.errors(include_url=False):
                loc = err["loc"]
                if not loc or loc[0] not in literal:
                    continue  # missing or templated: reported above or checked at run time
                msg = str(err["msg"]).removeprefix("Value error, ")
                path = ".".join(str(p) for p in loc)
                about = fields[str(loc[0])].description if str(loc[0]) in fields else None
                hint = f"; expected {about[0].lower()}{about[1:]}" if about else ""
                self.add((*at, "with", *loc), f"with.{path}: {msg} (got {err['input']!r}){hint}")

    def destructive(self, at: Loc, step: Step) -> None:
        floor = self.runbook.spec.approvals
        mine = step.approval or Approval()
        why = f"step {step.id!r} runs destructive action {step.action!r}"
        if mine.required is False:
            self.add((*at, "approval", "required"),
                     f"{why}: its approval cannot be switched off; destructive steps always need "
                     f"approval (remove 'required: false')")
        if (mine.min_approvers is not None and floor.min_approvers is not None
                and mine.min_approvers < floor.min_approvers):
            self.add((*at, "approval", "min_approvers"),
                     f"{why}: min_approvers {mine.min_approvers} is below the runbook's "
                     f"spec.approvals.min_approvers {floor.min_approvers}; a step may ask for more "
                     f"approvers, never fewer")
        if mine.allow_self and not floor.allow_self:
            self.add((*at, "approval", "allow_self"),
                     f"{why}: allow_self would let the requester approve their own destructive "
                     f"step, which spec.approvals does not allow")
        if (mine.expires_after is not None and floor.expires_after is not None
                and mine.expires_after > floor.expires_after):
            self.add((*at, "approval", "expires_after"),
                     f"{why}: an approval may not last longer than spec.approvals.expires_after")
        if step.wait_until is not None:
            self.add((*at, "wait_until"),
                     f"{why}: wait_until re-runs the action on every poll, so it is only for "
                     f"read-only actions; add a read-only step after this one to wait on")


    # -- the run's outcome ------------------------------------------------------------------------

    def outcome(self) -> None:
        """Outcome rules run once every step is done, so they may read every step (and only
        steps, params and run: no item, result or plan)."""
        after_last = Scope(len(self.runbook.spec.steps))
        for r, rule in enumerate(self.runbook.spec.outcome):
            at: Loc = ("spec", "outcome", r)
            self.expression((*at, "when"), rule.when, after_last, template=False)
            self.expression((*at, "reason"), rule.reason, after_last, template=True)

    # -- triggers and auto_run ------------------------------------------------------------------

    def triggers(self) -> None:
        """Each trigger fills declared params from ``labels``/``annotations`` only; ``auto_run``
        only on a runbook whose every step only reads (``bot.runbook.autorun``), whose triggers
        fill every required param."""
        spec = self.runbook.spec
        declared = list(spec.params)
        for t, trigger in enumerate(spec.triggers):
            at: Loc = ("spec", "triggers", t)
            for name, source in trigger.params.items():
                if name not in declared:
                    self.add((*at, "params", name),
                             f"trigger {trigger.alertname!r} fills param {name!r}, which the runbook "
                             f"does not declare{_suggest(name, declared)}; declared params: "
                             f"{_listing(declared)}", key=True)
                self.alert_template((*at, "params", name), source)
            if spec.auto_run:
                missing = [n for n, p in spec.params.items()
                           if p.required and n not in trigger.params]
                if missing:
                    self.add((*at, "params"),
                             f"auto_run needs every required param filled from the alert; trigger "
                             f"{trigger.alertname!r} does not fill {', '.join(missing)}")
        if not spec.auto_run:
            return
        if not spec.triggers:
            self.add(("spec", "auto_run"), "auto_run: true needs at least one trigger in "
                     "spec.triggers (the alerts that start it)")
        catalog = self.catalog

        def destructive(action: str) -> bool:
            return catalog is not None and action in catalog and catalog.get(action).destructive

        for index, step, does in writing_steps(self.runbook, destructive):
            self.add(("spec", "auto_run"),
                     f"auto_run: true is only for runbooks whose every step only reads (reads, "
                     f"reports, notify): any write needs a person to start the run, and step "
                     f"{step.id!r} (line {self.locate(('spec', 'steps', index), '').line}) "
                     f"{does}; remove auto_run, or the step")

    def alert_template(self, loc: Loc, source: str) -> None:
        try:
            tree = parse_template(source)
        except ExpressionError as e:
            self.add(loc, str(e))
            return
        local = {n.name for n in tree.find_all(nodes.Name) if n.ctx in ("store", "param")}
        for n in tree.find_all(nodes.Name):
            if n.ctx == "load" and n.name not in local and n.name not in ALERT_ROOTS:
                self.add(loc, f"unknown name {n.name!r}{_suggest(n.name, list(ALERT_ROOTS))}; a "
                              f"trigger's params can use: {', '.join(ALERT_ROOTS)} "
                              f"[in {source!r}]")


ALERT_ROOTS = ("labels", "annotations")


def _templated(value: Any) -> bool:
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, Mapping):
        return any(_templated(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_templated(v) for v in value)
    return False


def _strings(value: Any, loc: Loc) -> Iterator[tuple[Loc, str]]:
    if isinstance(value, str):
        if "{" in value:
            yield loc, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _strings(v, (*loc, k))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _strings(v, (*loc, i))


def validate(runbook: Runbook, *, catalog: Catalog | None, locate: Locator = _nowhere) -> list[Problem]:
    """Every cross-reference and policy problem of a runbook that the model alone cannot see."""
    checker = _Checker(runbook, catalog, locate)
    for name, param in runbook.spec.params.items():
        if param.default is not None:
            try:
                coerce_param(name, param, param.default)
            except ParamError as e:
                checker.add(("spec", "params", name, "default"), f"{e} (its default)")
    for index, step in enumerate(runbook.spec.steps):
        checker.step(index, step)
    checker.outcome()
    checker.triggers()
    return sorted(checker.problems, key=lambda p: (p.file, p.line, p.col))


def approval_reason(runbook: Runbook, step: Step, *, destructive: bool) -> str | None:
    """Why a step needs approval, in words; None when it does not."""
    own = step.approval.required if step.approval else None
    if destructive:
        return "destructive action: approval is always required"
    if own:
        return "the step asks for approval"
    if own is None and runbook.spec.approvals.required:
        return "the runbook asks for approval of every step"
    return None
