"""The action registry: every action's name, typed params, destructive flag and summary.

Declarations (``catalog.py``) are pure data and import no SDK, so ``runbook-bot validate`` and
``--help`` stay fast. Implementations (``kube.py``, ``ec2.py``, ``flow.py``) attach ``plan`` and
``apply`` to a declared name with ``@registry.planner(name)`` / ``@registry.applier(name)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel

from bot.engine.plan import Plan, Result
from bot.engine.ports import StepContext

PlanFn = Callable[[Any, StepContext], Plan]
ApplyFn = Callable[[Plan, StepContext], Result]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class ActionSpec:
    name: str
    params_model: type[BaseModel]
    destructive: bool
    summary: str  # a Jinja2 template over the params, e.g. "Stop {{ instance_id }} (force)"
    description: str
    # read-only actions may be polled by a step's wait_until; destructive ones never are
    plan_fn: PlanFn | None = None
    apply_fn: ApplyFn | None = None


class Registry:
    def __init__(self) -> None:
        self._specs: dict[str, ActionSpec] = {}

    def declare(
        self,
        name: str,
        *,
        params: type[BaseModel],
        destructive: bool,
        summary: str,
        description: str,
    ) -> ActionSpec:
        if name in self._specs:
            raise ValueError(f"action {name!r} is declared twice")
        spec = ActionSpec(name, params, destructive, summary, description)
        self._specs[name] = spec
        return spec

    def planner(self, name: str) -> Callable[[F], F]:
        def attach(fn: F) -> F:
            self.get(name).plan_fn = fn
            return fn

        return attach

    def applier(self, name: str) -> Callable[[F], F]:
        def attach(fn: F) -> F:
            self.get(name).apply_fn = fn
            return fn

        return attach

    def get(self, name: str) -> ActionSpec:
        try:
            return self._specs[name]
        except KeyError:
            raise KeyError(name) from None

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[ActionSpec]:
        return iter(sorted(self._specs.values(), key=lambda s: s.name))

    def names(self) -> list[str]:
        return sorted(self._specs)


registry = Registry()
