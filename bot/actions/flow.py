"""Flow actions: a person's confirmation, a message, a wait. No API calls.

- ``manual.confirm``: the engine shows the item and calls ``apply()`` only once a person confirmed
  it; the identity comes from ``StepContext.confirmed_by`` when the engine provides it, else the
  run's requester. The engine audits the command itself (who, when).
- ``notify``: ``apply()`` returns the message as ``Result.message``; the runner hands it to the
  notifier of the run's channel or terminal. The action itself talks to no front-end.
- ``wait``: the start time is in the plan (the engine keeps one plan per step and passes it to
  every poll); ``apply()`` returns ``done=False`` with ``retry_after`` = the time left on
  ``ctx.clock`` until the duration has passed. Nothing sleeps.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from bot.actions.authoring import ActionSpec, Env, Plan, Result, action
from bot.actions.declarations import ConfirmParams, NotifyParams, WaitParams


def plan_confirm(p: ConfirmParams, env: Env) -> Plan:
    return Plan(action="manual.confirm", params={}, data={"item": p.item})


def apply_confirm(plan: Plan, p: ConfirmParams, env: Env) -> Result:
    by = env.ctx.confirmed_by or env.ctx.requester
    return Result(data={"confirmed": True, "by": by}, message=f"{by} confirmed: {p.item}")


CONFIRM = action("manual.confirm", ConfirmParams, destructive=False,
                 summary="Confirm: {{ item }}", description="A person confirms a checklist item.",
                 plan=plan_confirm, apply=apply_confirm)


def plan_notify(p: NotifyParams, env: Env) -> Plan:
    return Plan(action="notify", params={})


def apply_notify(plan: Plan, p: NotifyParams, env: Env) -> Result:
    return Result(data={"message": p.message}, message=p.message)


NOTIFY = action("notify", NotifyParams, destructive=False,
                summary="Notify: {{ message }}", description="A message to the run's channel or terminal.",
                plan=plan_notify, apply=apply_notify)


def plan_wait(p: WaitParams, env: Env) -> Plan:
    return Plan(action="wait", params={}, data={"started_at": env.now_iso()})


def apply_wait(plan: Plan, p: WaitParams, env: Env) -> Result:
    started = datetime.fromisoformat(str(plan.data.get("started_at") or env.now_iso()))
    waited = (env.ctx.clock.now() - started).total_seconds()
    left = p.duration - waited
    if left > 0:
        env.ctx.progress = f"{left:.0f}s of {p.duration:.0f}s left"
        return Result(data={"waited": waited}, done=False, retry_after=left,
                      progress=env.ctx.progress)
    return Result(data={"waited": waited}, message=f"waited {waited:.0f}s")


WAIT = action("wait", WaitParams, destructive=False, summary="Wait",
              description="Wait for a duration.", plan=plan_wait, apply=apply_wait)

ACTIONS: tuple[ActionSpec[Any], ...] = (CONFIRM, NOTIFY, WAIT)
