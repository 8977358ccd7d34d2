"""Actions as one typed definition each, and the registry the catalog and the validator read.

An action is one ``ActionSpec``, made with ``action(...)`` next to its implementation: its name,
params model, destructive flag, approval summary and description, and its ``plan`` and ``apply``.
``action()`` ties the three together for mypy: ``plan`` must take the declared params model and an
``Env`` and return a ``Plan``; ``apply`` the approved ``Plan``, the params and an ``Env``, and
return a ``Result``. A mismatch is a type error, not a crash in a running incident.

A ``Registry`` is built explicitly from specs (``bot/actions/builtin.py`` lists the shipped ones);
nothing registers itself on import. ``action(...)`` is the only way to make one, for a test's fake
catalog too, so every spec has its ``plan`` and ``apply``. Action modules import ``action`` and
``ActionSpec`` from ``bot.actions.authoring``, the one face for action authors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from bot.actions.env import Env
from bot.engine.plan import Plan, Result

P = TypeVar("P", bound=BaseModel)
Planner = Callable[[P, Env], Plan]
Applier = Callable[[Plan, P, Env], Result]


@dataclass
class ActionSpec(Generic[P]):
    name: str
    params_model: type[P]
    destructive: bool  # destructive actions always need approval and are never polled
    summary: str  # a Jinja2 template over the params, e.g. "Stop {{ instance_id }} (force)"
    description: str
    plan_fn: Planner[P]
    apply_fn: Applier[P]


def action(name: str, params: type[P], *, destructive: bool, summary: str, description: str,
           plan: Planner[P], apply: Applier[P]) -> ActionSpec[P]:
    """One complete action, declaration and implementation together."""
    return ActionSpec(name, params, destructive, summary, description, plan, apply)


class Registry:
    """Actions by name. ``Registry(specs)`` holds the given ones; a name may appear only once."""

    def __init__(self, specs: Iterable[ActionSpec[Any]] = ()) -> None:
        self._specs: dict[str, ActionSpec[Any]] = {}
        for spec in specs:
            self.add(spec)

    def add(self, spec: ActionSpec[Any]) -> ActionSpec[Any]:
        if spec.name in self._specs:
            raise ValueError(f"action {spec.name!r} is declared twice")
        self._specs[spec.name] = spec
        return spec

    def get(self, name: str) -> ActionSpec[Any]:
        try:
            return self._specs[name]
        except KeyError:
            raise KeyError(name) from None

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[ActionSpec[Any]]:
        return iter(sorted(self._specs.values(), key=lambda s: s.name))

    def names(self) -> list[str]:
        return sorted(self._specs)
