"""Fake actions over a small fake world, for testing the engine without Kubernetes or EC2.

The world is a JSON file when ``path`` is given, so a subprocess (the crash-resume test) and the
test itself see the same state, and every destructive effect is appended to ``effects``: a test
can assert that each one took effect exactly once.
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from bot.actions import flow
from bot.actions.authoring import action
from bot.actions.declarations import ConfirmParams, NotifyParams, WaitParams
from bot.actions.registry import Registry
from bot.config import PolicyConfig
from bot.engine.approvals import RAISE_KEY
from bot.engine.plan import ApiCall, Change, Fact, Plan, Result
from bot.engine.ports import StepContext
from bot.errors import InterlockBlocked, PermanentError, PolicyError, RetryableError
from bot.runbook.templating import render


class World:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._data: dict[str, Any] = {"values": {}, "locks": {}, "effects": [], "reads": 0,
                                      "flaky": {}, "polls": {}}
        if path is not None and path.exists():
            self._data = json.loads(path.read_text())

    def _load(self) -> dict[str, Any]:
        if self.path is not None and self.path.exists():
            self._data = json.loads(self.path.read_text())
        return self._data

    def _store(self) -> None:
        if self.path is not None:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self._data))
            os.replace(tmp, self.path)

    def get(self, name: str) -> Any:
        return self._load()["values"].get(name)

    def set(self, name: str, value: Any, *, effect: dict[str, Any] | None = None) -> None:
        d = self._load()
        d["values"][name] = value
        if effect is not None:
            d["effects"].append(effect)
        self._store()

    def lock(self, name: str, locked: bool = True) -> None:
        d = self._load()
        d["locks"][name] = locked
        self._store()

    def locked(self, name: str) -> bool:
        return bool(self._load()["locks"].get(name))

    @property
    def effects(self) -> list[dict[str, Any]]:
        return list(self._load()["effects"])

    def bump(self, bucket: str, name: str) -> int:
        d = self._load()
        d[bucket][name] = d[bucket].get(name, 0) + 1
        self._store()
        return int(d[bucket][name])


class _P(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReadParams(_P):
    name: str


class SetParams(_P):
    name: str
    value: str


class NoopParams(_P):
    pass


class SlowParams(_P):
    name: str
    polls: int = 2


class FlakyParams(_P):
    name: str
    failures: int = 1
    permanent: bool = False


def make_registry(world: World) -> Registry:
    def plan_read(p: ReadParams, env: Any) -> Plan:
        return Plan(action="fake.read", params={})

    def apply_read(plan: Plan, p: ReadParams, env: Any) -> Result:
        return Result(data={"name": p.name, "value": world.get(p.name),
                            "locked": world.locked(p.name)})

    def _lock_check(p: SetParams, env: Any) -> None:
        env.ctx.interlock(rule="fake-lock", ok=not world.locked(p.name),
                          message=f"{p.name} is locked: unlock it first")

    def plan_set(p: SetParams, env: Any) -> Plan:
        current = world.get(p.name)
        changes = () if current == p.value else (
            Change(target_kind="Thing", target=p.name, operation="set",
                   before=str(current), after=p.value),)
        # a thing marked precious asks for one more approver, as a fence of local data does
        precious = world.get(f"{p.name}/precious")
        noted = world.get(f"{p.name}/noted")  # a fact that changes nothing the plan does
        plan = Plan(action="fake.set", params={}, changes=changes,
                    facts=(Fact(subject=f"thing {p.name}", name="value", value=current,
                                read_at=env.now_iso()),)
                    + ((Fact(subject=f"thing {p.name}", name="note", value=noted),) if noted else ()),
                    data={RAISE_KEY: {"by": precious, "why": f"{p.name} is precious"}}
                    if precious else {})
        throttled = int(world.get(f"{p.name}/plan_throttled") or 0)
        if throttled:  # the API answers this many plans with a transient error
            world.set(f"{p.name}/plan_throttled", throttled - 1)
            raise RetryableError(f"{p.name}: throttled", service="fake", operation="read",
                                 code="Throttling")
        try:
            if world.get(f"{p.name}/held"):  # a timed hold: it may clear by itself
                raise InterlockBlocked("fake-hold", f"{p.name} is held ({world.get(f'{p.name}/held')})",
                                       recheck_after=1.0,  # the conductor: never sooner than the policy's
                                       until=f"{p.name} is released")
            _lock_check(p, env)
        except InterlockBlocked as e:
            e.plan = plan.to_dict()  # shown with the refusal, as a fence shows what it destroys
            raise
        return plan

    def apply_set(plan: Plan, p: SetParams, env: Any) -> Result:
        if world.get(f"{p.name}/locked_at_apply"):  # someone locks it between the plan and apply
            world.set(f"{p.name}/locked_at_apply", None)
            world.lock(p.name)
        _lock_check(p, env)
        if world.get(p.name) == p.value:
            return Result(data={"name": p.name, "value": p.value}, already_done=True,
                          message=f"{p.name} is already {p.value}")
        world.set(p.name, p.value, effect={"run": env.ctx.run_id, "step": env.ctx.step_id,
                                           "name": p.name, "value": p.value})
        if os.environ.get("FAKE_CRASH_AFTER_EFFECT") == env.ctx.step_id:
            os.kill(os.getpid(), signal.SIGKILL)  # killed mid-apply: the effect is made, not recorded
        return Result(data={"name": p.name, "value": p.value}, message=f"set {p.name}")

    def plan_noop(p: NoopParams, env: Any) -> Plan:
        return Plan(action="fake.noop", params={})

    def apply_noop(plan: Plan, p: NoopParams, env: Any) -> Result:
        return Result(data={})

    def plan_slow(p: SlowParams, env: Any) -> Plan:
        return Plan(action="fake.slow", params={})

    def apply_slow(plan: Plan, p: SlowParams, env: Any) -> Result:
        n = world.bump("polls", p.name)
        if n < p.polls:
            return Result(data={"polls": n}, done=False, retry_after=30,
                          progress=f"{n} of {p.polls}")
        return Result(data={"polls": n}, progress=f"{n} of {p.polls}")

    def plan_flaky(p: FlakyParams, env: Any) -> Plan:
        return Plan(action="fake.flaky", params={})

    def apply_flaky(plan: Plan, p: FlakyParams, env: Any) -> Result:
        n = world.bump("flaky", p.name)
        env.ctx.calls.append(ApiCall(service="fake", operation="Flaky", targets=(p.name,),
                                     outcome="Boom" if n <= p.failures else "ok", request_id=f"req-{n}"))
        if n <= p.failures:
            cls = PermanentError if p.permanent else RetryableError
            raise cls(f"{p.name} failed (try {n})", service="fake", operation="flaky", code="Boom")
        return Result(data={"tries": n})

    return Registry((
        action("fake.read", ReadParams, destructive=False, summary="Read {{ name }}",
               description="Read a value.", plan=plan_read, apply=apply_read),
        action("fake.set", SetParams, destructive=True, summary="Set {{ name }} to {{ value }}",
               description="Change a value.", plan=plan_set, apply=apply_set),
        action("fake.noop", NoopParams, destructive=False, summary="Nothing",
               description="Does nothing.", plan=plan_noop, apply=apply_noop),
        action("fake.slow", SlowParams, destructive=False, summary="Wait for {{ name }}",
               description="Not done until polled a few times.", plan=plan_slow, apply=apply_slow),
        action("fake.flaky", FlakyParams, destructive=False, summary="Flaky {{ name }}",
               description="Fails a few times first.", plan=plan_flaky, apply=apply_flaky),
        action("manual.confirm", ConfirmParams, destructive=False, summary="{{ item }}",
               description="A person confirms.", plan=flow.plan_confirm, apply=flow.apply_confirm),
        action("notify", NotifyParams, destructive=False, summary="Post a message",
               description="A message.", plan=flow.plan_notify, apply=flow.apply_notify),
        action("wait", WaitParams, destructive=False, summary="Wait", description="Wait.",
               plan=flow.plan_wait, apply=flow.apply_wait),
    ))


POLICY = PolicyConfig(groups={"sre": ("alice", "bob", "carol", "dave"), "dba": ("erin",)},
                      aliases={"slack:UALICE": "alice"})


class _Env:
    def __init__(self, ctx: StepContext) -> None:
        self.ctx = ctx

    def now_iso(self) -> str:
        return self.ctx.clock.now().isoformat()


class FakeCatalog:
    """The engine's ActionCatalog over a fake registry: no clusters, no SDKs."""

    def __init__(self, reg: Registry) -> None:
        self.reg = reg

    def spec(self, name: str) -> Any:
        return self.reg.get(name)

    def plan(self, name: str, params: Any, ctx: StepContext) -> Plan:
        spec = self.reg.get(name)
        checked = spec.params_model.model_validate(dict(params))
        plan = spec.plan_fn(checked, _Env(ctx))
        return replace(plan, action=name, params=checked.model_dump(mode="json"),
                       summary=render(spec.summary, checked.model_dump()))

    def apply(self, name: str, plan: Plan, ctx: StepContext) -> Result:
        spec = self.reg.get(name)
        if ctx.dry_run and spec.destructive:
            raise PolicyError(f"{name}: apply refused in a dry run")
        checked = spec.params_model.model_validate(dict(plan.params))
        result = spec.apply_fn(plan, checked, _Env(ctx))
        return replace(result, calls=tuple(ctx.calls))

    def cluster_of(self, name: str, params: Any, ctx: StepContext) -> str | None:
        return None  # its actions touch no configured cluster: no run.context

    def resolve_context(self, cluster: str, ctx: StepContext) -> dict[str, Any]:
        raise AssertionError("asked only for a cluster cluster_of named")


class ResolvingCatalog(FakeCatalog):
    """A fake catalog that also says what a run acts on: one fixed cluster."""

    def cluster_of(self, name: str, params: Any, ctx: StepContext) -> str | None:
        return "world" if name.startswith("fake.") else None

    def resolve_context(self, cluster: str, ctx: StepContext) -> dict[str, Any]:
        ctx.calls.append(ApiCall(service="sts", operation="GetCallerIdentity", targets=(),
                                 outcome="ok", request_id="req-identity"))
        return {"cluster": cluster, "region": "eu-west-1", "kube_context": "world-admin",
                "api_server": "https://world.example:6443", "account": "123456789012",
                "caller_arn": "arn:aws:sts::123456789012:assumed-role/runbook-bot/world",
                "writes_as": {}, "bot_version": "0.0.0-test", "problems": []}


def make_catalog(world: World, policy: PolicyConfig = POLICY) -> FakeCatalog:
    return ResolvingCatalog(make_registry(world))
