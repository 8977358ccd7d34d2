"""Bolt listeners: acknowledge within Slack's 3 s, build the gesture, hand the work to the pool.

Nothing here waits on the engine. A listener does only what must be in the acknowledgement
itself (a usage hint, a modal's inline validation errors), hands everything else to ``Work`` (a
non-blocking submit, so the job is queued before Slack hears back) and acks; the request thread
touches neither the engine nor the database. A job first records its delivery durably
(``Deliveries``) and does nothing if another replica had it. A button click is also recorded under
its meaning (who, which button, which run, step and plan), so a double click, which Slack
delivers as two different requests, counts once; a click the engine refused is forgotten again,
so the same person can click once the reason is gone (added to the on-call group, say).

With allowed channels configured, every gesture is checked against them: slash commands, clicks
and form submissions alike. A button click (and the reject form it opens) decides only in the
run's own channel, like ``/runbook approve``: a card's buttons copied or forwarded elsewhere, or
a forged payload naming another channel, is refused before the engine sees it.

A request is signed by Slack, but its shape is still checked (pydantic, ``_Click`` and
``_Submission``) before anything reads it: a signed request with missing fields or wrong types
(a replayed fragment, a proxy's rewrite, Slack changing a payload) is answered 400 with one log
line, never a 500 and a traceback.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from slack_bolt import App, BoltResponse

from bot.config import SlackConfig
from bot.engine import commands as c
from bot.frontends.alerts import PROVENANCE
from bot.frontends.slack.alert_cards import ACTION_ALERT_DRY_RUN, ACTION_ALERT_RUN
from bot.frontends.slack.dedupe import Deliveries
from bot.frontends.slack.service import Person, SlackService
from bot.frontends.slack.slash import USAGE, UsageError, parse
from bot.present import blockkit as bk

log = logging.getLogger(__name__)


class Malformed(ValueError):
    """A signed request whose payload does not have the shape Slack documents."""


class _Shape(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Id(_Shape):
    id: str


class _Action(_Shape):
    value: str = ""


class _Click(_Shape):
    user: _Id
    actions: list[_Action]
    channel: _Id | None = None
    team: _Id | None = None
    response_url: str | None = None
    trigger_id: str | None = None


class _State(_Shape):
    values: dict[str, dict[str, dict[str, Any]]]


class _View(_Shape):
    private_metadata: str = ""
    state: _State


class _Submission(_Shape):
    user: _Id
    view: _View
    team: _Id | None = None


def _checked(shape: type[_Shape], body: Any, what: str) -> None:
    try:
        shape.model_validate(body)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "payload"
        raise Malformed(f"{what}: {where}: {first['msg']}") from None


def _metadata(view: dict[str, Any]) -> dict[str, Any]:
    """The form's private metadata: a JSON object this bot wrote when it opened the form."""
    try:
        meta = json.loads(view.get("private_metadata") or "{}")
    except ValueError:
        raise Malformed("view submission: private_metadata is not JSON") from None
    if not isinstance(meta, dict):
        raise Malformed("view submission: private_metadata is not a JSON object")
    return meta


def _person(body: dict[str, Any]) -> Person:
    user = body.get("user_id") or (body.get("user") or {}).get("id")
    channel = body.get("channel_id") or (body.get("channel") or {}).get("id")
    team = body.get("team_id") or (body.get("team") or {}).get("id")
    url = body.get("response_url")
    return Person(user=str(user), channel=str(channel) if channel else None,
                  team=str(team) if team else None,
                  response_url=str(url) if isinstance(url, str) and url.startswith("http") else None)


def _value(body: dict[str, Any]) -> dict[str, Any]:
    try:
        raw = json.loads(body["actions"][0]["value"])
    except (KeyError, IndexError, TypeError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}


def _suggested(body: dict[str, Any]) -> dict[str, Any]:
    """A suggestion button's value: runbook, params, provenance and the incident (``i``, a
    PagerDuty incident the alert came with), as the card wrote them."""
    v = _value(body)
    rb, params, ref, incident = v.get("rb"), v.get("p"), v.get("a"), v.get("i")
    if not (isinstance(rb, str) and rb and isinstance(params, dict) and isinstance(incident, str | None)
            and all(isinstance(k, str) and isinstance(x, str) for k, x in params.items())
            and isinstance(ref, str) and ref.startswith((PROVENANCE, "diagnosis:", "watcher:"))):
        raise Malformed("button click: the suggestion's value is not one this bot wrote")
    return {"rb": rb, "p": params, "a": ref, "i": incident}


def _field(state: dict[str, Any], block_id: str) -> str:
    entry = (state.get(block_id) or {}).get("value") or {}
    if entry.get("type") == "static_select":
        option = entry.get("selected_option")
        return str(option.get("value") or "") if isinstance(option, dict) else ""
    return str(entry.get("value") or "").strip()


def register(app: App, *, service: SlackService, work: Any, deliveries: Deliveries,
             config: SlackConfig) -> None:
    allowed = set(config.allowed_channels)

    def off_limits(channel: str | None) -> str | None:
        """Why the bot does not act in ``channel`` (None: it does)."""
        if not allowed or channel in allowed:
            return None
        return ("runbook-bot is not enabled in this channel; ask in one of: "
                + ", ".join(f"<#{ch}>" for ch in sorted(allowed)))

    def now() -> float:
        return service.clock.now().timestamp()

    def handoff(context: Any, fn: Callable[..., Any], *args: Any, keys: Sequence[str] = (),
                duplicate: Callable[[], Any] | None = None, drives: bool = False,
                **kwargs: Any) -> None:
        """Queue ``fn``; it runs only if no replica recorded this delivery (or ``keys``) before.

        A job that ``drives`` a run on (a decision) goes to the pool that drives runs, so quick
        jobs (forms, answers) never queue behind it."""
        every = [k for k in (context.get("delivery"), *keys) if k]

        def job() -> None:
            if not all([deliveries.first(k, now=now()) for k in every]):
                if duplicate is not None:
                    duplicate()
                return
            fn(*args, **kwargs)

        job.__name__ = getattr(fn, "__name__", "job")
        (work.drive if drives else work.submit)(job)

    @app.command("/runbook")
    def runbook_command(ack: Any, body: dict[str, Any], context: Any) -> None:
        person = _person(body)
        refusal = off_limits(person.channel)
        if refusal:
            ack(text=refusal)
            return
        try:
            cmd = parse(str(body.get("text") or ""))
        except UsageError as e:  # it may quote what was typed: redacted and drawn inert
            hint = f":warning: {bk.esc(service.runtime.redact_text(str(e)))}\n\n{USAGE}"
            ack(text=bk.truncate(hint, 3000), blocks=[bk.section(hint)])
            return
        if cmd.verb == "help":
            ack(text=USAGE, blocks=[bk.section(USAGE)])
            return
        handoff(context, service.slash, cmd, person, body.get("trigger_id"))
        ack()

    def click(ack: Any, body: dict[str, Any], context: Any, kind: str) -> None:
        _checked(_Click, body, "button click")
        person = _person(body)
        v = _value(body)
        run_id, step, plan_hash = v.get("r"), v.get("s"), v.get("h")
        if not run_id:
            ack()
            return
        refusal = off_limits(person.channel)
        if refusal:
            work.submit(service.tell, person, refusal)
            ack()
            return
        key = f"click:{person.user}:{kind}:{run_id}:{step}:{plan_hash}"

        def again() -> None:
            service.tell(person, "Your click on this message was already counted.")

        if not deliveries.fresh(key):
            work.submit(again)
            ack()
            return
        cmd: c.Command
        if kind == "approve":
            cmd = c.Approve(run_id=run_id, actor=person.identity, step=step, plan_hash=plan_hash)
        else:
            cmd = c.Confirm(run_id=run_id, actor=person.identity, step=step)
        handoff(context, _decide_once, service, deliveries, cmd, person, key, clicked=True,
                keys=[key], duplicate=again, drives=True)
        ack()

    @app.action(bk.ACTION_APPROVE)
    def approve_clicked(ack: Any, body: dict[str, Any], context: Any) -> None:
        click(ack, body, context, "approve")

    @app.action(bk.ACTION_CONFIRM)
    def confirm_clicked(ack: Any, body: dict[str, Any], context: Any) -> None:
        click(ack, body, context, "confirm")

    @app.action(bk.ACTION_REJECT)
    def reject_clicked(ack: Any, body: dict[str, Any], context: Any) -> None:
        _checked(_Click, body, "button click")
        person = _person(body)
        v = _value(body)
        refusal = off_limits(person.channel)
        if refusal:
            work.submit(service.tell, person, refusal)
        elif v.get("r"):
            # the click's channel and response_url travel with the form: a submission has neither
            meta = json.dumps({**v, "c": person.channel, "u": person.response_url},
                              separators=(",", ":"))
            handoff(context, _open_reject, service, person, str(body.get("trigger_id")), v, meta)
        ack()

    @app.view(bk.VIEW_REJECT)
    def reject_submitted(ack: Any, body: dict[str, Any], view: dict[str, Any], context: Any) -> None:
        _checked(_Submission, body, "view submission")
        meta = _metadata(view)
        reason = _field(view["state"]["values"], bk.REASON_BLOCK)
        problem = service.reject_reason_problem(reason)
        if problem:
            ack(response_action="errors", errors={bk.REASON_BLOCK: problem})
            return
        refusal = off_limits(meta.get("c"))
        if refusal:
            ack(response_action="errors", errors={bk.REASON_BLOCK: bk.truncate(refusal, 150, pointer="")})
            return
        person = Person(user=str(body["user"]["id"]), channel=meta.get("c"),
                        response_url=meta.get("u"))
        key = f"reject:{person.user}:{meta.get('r')}:{meta.get('s')}:{meta.get('h')}"
        if deliveries.fresh(key):
            handoff(context, _decide_once, service, deliveries,
                    c.Reject(run_id=str(meta.get("r")), actor=person.identity, reason=reason,
                             step=meta.get("s")), person, key, clicked=False, keys=[key],
                    drives=True)
        ack()

    @app.view(bk.VIEW_RUN)
    def run_submitted(ack: Any, body: dict[str, Any], view: dict[str, Any], context: Any) -> None:
        _checked(_Submission, body, "view submission")
        meta = _metadata(view)
        person = Person(user=str(body["user"]["id"]), channel=meta.get("channel"),
                        team=(body.get("team") or {}).get("id"))
        values = view["state"]["values"]
        refusal = off_limits(person.channel)
        if refusal:
            ack(response_action="errors",
                errors={b: bk.truncate(refusal, 150, pointer="") for b in values})
            return
        raw = {block_id.split(":", 1)[1]: _field(values, block_id) for block_id in values
               if block_id.startswith("param:")}
        raw = {k: v for k, v in raw.items() if v != ""}
        try:
            errors = service.runtime.params_problems(str(meta.get("runbook")), raw)
        except Exception as e:  # the runbook vanished between the form and the submission
            ack(response_action="errors", errors={b: str(e)[:150] for b in values})
            return
        errors.pop("", None)
        if errors:
            ack(response_action="errors",
                errors={bk.param_block_id(k): bk.truncate(v, 150, pointer="") for k, v in errors.items()})
            return
        incident, suggested = meta.get("incident"), meta.get("suggested_by")
        handoff(context, service.start, str(meta["runbook"]), raw, person,
                dry_run=bool(meta.get("dry_run")),
                incident=str(incident) if incident else None,
                suggested_by=str(suggested) if suggested else None)
        ack()

    def suggestion(ack: Any, body: dict[str, Any], context: Any, *, dry_run: bool) -> None:
        _checked(_Click, body, "button click")
        person = _person(body)
        v = _suggested(body)
        refusal = off_limits(person.channel)
        if refusal:
            work.submit(service.tell, person, refusal)
        elif dry_run:
            # a double click is two requests: the second one on the same button starts nothing
            message = (body.get("container") or {}).get("message_ts")
            block = str(body["actions"][0].get("block_id") or "")
            key = f"suggest:{person.user}:{message}:{block}:{v['a']}"
            if not deliveries.fresh(key):
                work.submit(service.tell, person, "Your dry run from this suggestion was already "
                            f"started; `/runbook run {v['rb']} ... --dry-run` starts another.")
                ack()
                return
            handoff(context, service.run, v["rb"], v["p"], person,
                    trigger_id=body.get("trigger_id"), dry_run=True, suggested_by=v["a"],
                    incident=v["i"], keys=[key])
        else:  # a run starts only from the form, once a person submits it
            handoff(context, service.form, v["rb"], v["p"], person,
                    trigger_id=body.get("trigger_id"), suggested_by=v["a"], incident=v["i"])
        ack()

    @app.action(ACTION_ALERT_DRY_RUN)
    def alert_dry_run(ack: Any, body: dict[str, Any], context: Any) -> None:
        suggestion(ack, body, context, dry_run=True)

    @app.action(ACTION_ALERT_RUN)
    def alert_run(ack: Any, body: dict[str, Any], context: Any) -> None:
        suggestion(ack, body, context, dry_run=False)

    @app.error
    def on_error(error: Exception, body: dict[str, Any]) -> BoltResponse | None:
        if isinstance(error, Malformed):
            log.warning("refused a malformed Slack request: %s", error)
            return BoltResponse(status=400, body="malformed request")
        log.error("Slack listener failed: %s", error, exc_info=error)
        return None


def _decide_once(service: SlackService, deliveries: Deliveries, cmd: c.Command, person: Person,
                 key: str, *, clicked: bool) -> None:
    """Submit a decision recorded under ``key``; if it did not count, let it be made again.

    The runtime refuses a click outside the run's channel (its channel rule), before the engine
    sees it: a card's buttons copied or forwarded elsewhere decide nothing."""
    out = service.decide(cmd, person, clicked=clicked)
    if out is None or not out.ok:  # not submitted, or refused (and audited): it may be repeated
        deliveries.forget(key)


def _open_reject(service: SlackService, person: Person, trigger_id: str, v: dict[str, Any],
                 meta: str) -> None:
    state = service.runtime.show(str(v["r"])).state
    s = state.steps.get(str(v.get("s")))
    title = s.title if s else str(v.get("s"))
    try:
        service.client.views_open(trigger_id=trigger_id,
                                  view=bk.reject_modal(step_title=title, metadata=meta))
    except Exception as e:
        service.tell(person, f":warning: could not open the reject form ({bk.esc(e)}); use "
                             f"`/runbook reject {bk.esc(v['r'])} reason...` instead")
