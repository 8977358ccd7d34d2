"""The API calls of every plan and apply, counted at the action catalog.

``ObservedCatalog`` wraps the action catalog: the clients already record every API call of a plan
or an apply into the step's ``StepContext.calls`` for the audit, and after each plan and apply the
wrapper hands the new records to ``Metrics.calls_made``, so the runner and the actions know
nothing of metrics.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.engine.plan import Plan, Result
from bot.engine.ports import ActionCatalog, ActionSpecLike, StepContext
from bot.frontends.metrics import Metrics


class ObservedCatalog:
    """An ``ActionCatalog`` that counts the API calls each plan and apply made."""

    def __init__(self, catalog: ActionCatalog, metrics: Metrics) -> None:
        self.inner = catalog
        self.metrics = metrics

    def __getattr__(self, name: str) -> Any:  # the catalog's other parts (its action registry)
        return getattr(self.inner, name)

    def spec(self, name: str) -> ActionSpecLike:
        return self.inner.spec(name)

    def plan(self, name: str, params: Any, ctx: StepContext) -> Plan:
        before = len(ctx.calls)
        try:
            return self.inner.plan(name, params, ctx)
        finally:
            self.metrics.calls_made(ctx.calls[before:])

    # what a run acts on and as whom, as the wrapped catalog says it
    def cluster_of(self, name: str, params: Mapping[str, Any], ctx: StepContext) -> str | None:
        return self.inner.cluster_of(name, params, ctx)

    def resolve_context(self, cluster: str, ctx: StepContext) -> dict[str, Any]:
        before = len(ctx.calls)
        try:
            return self.inner.resolve_context(cluster, ctx)
        finally:
            self.metrics.calls_made(ctx.calls[before:])

    def apply(self, name: str, plan: Plan, ctx: StepContext) -> Result:
        before = len(ctx.calls)
        try:
            return self.inner.apply(name, plan, ctx)
        finally:
            self.metrics.calls_made(ctx.calls[before:])
