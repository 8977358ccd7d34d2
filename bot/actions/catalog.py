"""The engine's ActionCatalog over the registry: params in, Plan / Result out, clients per cluster.

``build_catalog(settings)`` is what ``cli.py`` wires into the runner. For every plan or apply it:
- validates params against the action's model *before* any API call (a ``ParamError`` that names the
  field and the expected form);
- picks the cluster (``params.cluster``, else the run's ``cluster`` param) and reuses that cluster's
  clients, bound to the step's ``ctx.calls`` so every request lands in the audit event;
- renders the approval summary with the sandboxed templating;
- refuses ``apply`` in a dry run for a destructive action, or any plan that lists a change (a
  cordon is not destructive but still a change), and hands a dry run read-only clients that refuse
  every write: a dry run can never change anything whatever the caller does. Read-only actions
  still read, so later steps have results to plan on.

Implementations take ``(params, env)`` / ``(plan, params, env)`` where ``env`` (``Env``,
``env.py``) carries the step context, settings and clients. The catalog serves the shipped actions
(``builtin.py``) unless given a registry of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import replace
from typing import Annotated, Any, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from bot.actions.builtin import builtin_actions
from bot.actions.context import CLUSTER_ACTION_PREFIXES, resolved_context
from bot.actions.env import ClientsFactory, ClusterClients, Env
from bot.actions.registry import ActionSpec, Registry
from bot.config import ClusterConfig, Settings
from bot.engine.plan import Plan, Result
from bot.engine.ports import StepContext
from bot.errors import ConfigError, ParamError, PolicyError
from bot.runbook.durations import format_duration, parse_duration
from bot.runbook.templating import render

__all__ = ["ClientsFactory", "ClusterClients", "Env", "RegistryCatalog", "build_catalog", "params_json"]


def _described(tp: Any) -> str | None:
    """The description of the first ``Annotated`` type in ``tp`` (``X | None``, ``tuple[X, ...]``)."""
    if get_origin(tp) is Annotated:
        args = get_args(tp)
        found = next((m.description for m in args[1:]
                      if isinstance(m, FieldInfo) and m.description), None)
        return found or _described(args[0])
    return next((d for a in get_args(tp) if (d := _described(a))), None)


def _expected(model: type[BaseModel], loc: tuple[int | str, ...]) -> str | None:
    info = model.model_fields.get(str(loc[0])) if loc else None
    if info is None:
        return None
    inner = _described(info.annotation)
    # an element of a list names the element's form; a plain field its own description first
    return (inner or info.description) if len(loc) > 1 else (info.description or inner)


def _explain(e: ValidationError, model: type[BaseModel]) -> str:
    parts = []
    for err in e.errors():
        loc = tuple(err["loc"])
        where = ".".join(str(x) for x in loc) or "params"
        msg = str(err["msg"]).removeprefix("Value error, ")
        form = _expected(model, loc)
        parts.append(f"{where}: {msg}" + (f" (expected {form[0].lower()}{form[1:]})" if form else ""))
    return "; ".join(parts)


def params_json(params: BaseModel) -> dict[str, Any]:
    """JSON-able params that validate again into the same model (durations back to ``6m``)."""
    out = params.model_dump(mode="json")
    for name, info in type(params).model_fields.items():
        is_duration = any(getattr(m, "func", None) is parse_duration for m in info.metadata)
        if is_duration and isinstance(out.get(name), int | float):
            out[name] = format_duration(float(out[name]))
    return out


class RegistryCatalog:
    """Implements ``bot.engine.ports.ActionCatalog`` over the action registry."""

    def __init__(self, *, settings: Settings, clients_factory: ClientsFactory | None = None,
                 actions: Registry | None = None) -> None:
        self.settings = settings
        self._factory = clients_factory or ClusterClients.from_config
        self._registry = actions if actions is not None else builtin_actions()
        self._clients: dict[str, ClusterClients] = {}
        self._lock = threading.Lock()

    @property
    def actions(self) -> Registry:
        """The actions this catalog serves: what runbooks are validated against."""
        return self._registry

    def spec(self, name: str) -> ActionSpec[Any]:
        try:
            return self._registry.get(name)
        except KeyError:
            raise ParamError(
                f"unknown action {name!r}; known: {', '.join(self._registry.names())}") from None

    def names(self) -> list[str]:
        return self._registry.names()

    def validate(self, name: str, params: BaseModel | Mapping[str, Any]) -> BaseModel:
        """The action's params model instance, or a ParamError saying what was expected."""
        model: type[BaseModel] = self.spec(name).params_model
        if isinstance(params, model):
            return params
        raw = params.model_dump() if isinstance(params, BaseModel) else dict(params)
        try:
            return model.model_validate(raw)
        except ValidationError as e:
            raise ParamError(f"{name}: {_explain(e, model)}") from None

    def clients_for(self, cluster: ClusterConfig) -> ClusterClients:
        with self._lock:
            if cluster.name not in self._clients:
                self._clients[cluster.name] = self._factory(cluster)
            return self._clients[cluster.name]

    def _env(self, params: BaseModel, ctx: StepContext) -> Env:
        name = getattr(params, "cluster", None) or ctx.params.get("cluster")
        cluster = self.settings.cluster(str(name) if name else None)
        return Env(ctx=ctx, settings=self.settings, cluster=cluster,
                   clients=self.clients_for(cluster))

    # -- what a run acts on and as whom (engine.ports.ActionCatalog) ---------------------------

    def cluster_of(self, name: str, params: Mapping[str, Any], ctx: StepContext) -> str | None:
        """The configured cluster a step's action touches; None for actions that touch none
        (notify, manual.confirm, wait, report.render) or a name the plan will refuse."""
        if not name.startswith(CLUSTER_ACTION_PREFIXES):
            return None
        wanted = params.get("cluster") or ctx.params.get("cluster")
        try:
            return self.settings.cluster(str(wanted) if wanted else None).name
        except ConfigError:
            return None

    def resolve_context(self, cluster: str, ctx: StepContext) -> dict[str, Any]:
        """The cluster (by its configured name), its kube context and API server, the AWS
        account and identity reads are made as, and the role its writes are made with."""
        return resolved_context(self.settings.cluster(cluster), self.clients_for(
            self.settings.cluster(cluster)), ctx)

    def summary(self, name: str, params: BaseModel) -> str:
        return render(self.spec(name).summary, params.model_dump())

    def plan(self, name: str, params: BaseModel | Mapping[str, Any], ctx: StepContext) -> Plan:
        spec = self.spec(name)
        checked = self.validate(name, params)
        plan = spec.plan_fn(checked, self._env(checked, ctx))
        return replace(plan, action=name, params=params_json(checked),
                       summary=self.summary(name, checked))

    def apply(self, name: str, plan: Plan, ctx: StepContext) -> Result:
        spec = self.spec(name)
        if ctx.dry_run and (spec.destructive or not plan.is_noop):
            raise PolicyError(f"{name}: apply refused in a dry run; a dry run shows plans only")
        checked = self.validate(name, plan.params)
        result = spec.apply_fn(plan, checked, self._env(checked, ctx))
        return replace(result, calls=tuple(ctx.calls))


def build_catalog(settings: Settings, *, clients_factory: ClientsFactory | None = None,
                  actions: Registry | None = None) -> RegistryCatalog:
    """The catalog the runner uses; ``clients_factory`` builds one cluster's clients (tests, sim),
    ``actions`` replaces the shipped actions (``builtin_actions()``)."""
    return RegistryCatalog(settings=settings, clients_factory=clients_factory, actions=actions)
