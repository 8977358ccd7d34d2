"""What the Slack front-end does once a request is acknowledged: the work behind each gesture.

Listeners (``listeners.py``) ack within Slack's 3 s and hand a job to the worker pool; the jobs are
here. A gesture becomes an engine command (``StartRun``, ``Approve``, ``Reject``...), submitted to
the runtime facade (``bot.runtime.facade.Runtime``, the only way in), and the outcome is
answered to the person who acted, privately: through the request's ``response_url``, which works
even in a channel the bot has not been invited to, or else ``chat.postEphemeral``. Everyone else
sees the run card and its thread change. The engine decides who may do what and audits refusals;
this module only names people (``slack:U…``) and, for a click, reads afresh the Slack user
groups among the groups the engine names as the step's approvers, so membership is current at
click time. What runbooks and runs look like (titles, destructive steps, param problems) is the
engine's answer too (``engine.facts``, ``runbook.params``, through the facade). A run started
in Slack is read and decided in its own channel only: the runtime's channel rule, over the
request's ``Origin``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import ConnectionErrorRetryHandler
from slack_sdk.webhook import WebhookClient

from bot.diagnose import Scope
from bot.engine import commands as c
from bot.engine.approvals import check_reason
from bot.engine.ports import Clock
from bot.engine.provenance import Provenance, check_incident, check_suggested_by
from bot.errors import ExternalError, ParamError, PolicyError, RunbookBotError
from bot.frontends.alerts import Diagnoser
from bot.frontends.slack.alert_cards import diagnosis_blocks
from bot.frontends.slack.drawing import Drawing, who
from bot.frontends.slack.identity import UserGroups, identity_for
from bot.frontends.slack.persistence import SlackStore
from bot.frontends.slack.slash import USAGE, Slash
from bot.present import blockkit as bk
from bot.present.views import run_view
from bot.runtime.facade import Elsewhere, Origin, Refused, Runtime

log = logging.getLogger(__name__)
GROUP_PREFIX = "slack-group:"

# (run_id, fmt) -> (file name, content) of the run's transcript
Exporter = Callable[[str, str], tuple[str, bytes]]


@dataclass(frozen=True)
class Person:
    """The person who acted, and where."""

    user: str  # Slack user id
    channel: str | None
    team: str | None = None
    response_url: str | None = None  # answers this person where they acted (5 uses, 30 min)

    @property
    def identity(self) -> str:
        return identity_for(self.user)


class SlackService:
    def __init__(self, *, runtime: Runtime, client: Any, slack_store: SlackStore,
                 usergroups: UserGroups, clock: Clock, exporter: Exporter | None = None,
                 drive: Callable[[str], Any] | None = None,
                 show: Callable[[str], Drawing | None] | None = None,
                 diagnoser: Diagnoser | None = None,
                 driving: Callable[..., Any] | None = None) -> None:
        self.runtime = runtime
        self.facts = runtime.facts
        self.client = client
        self.slack_store = slack_store
        self.usergroups = usergroups
        self.clock = clock
        self.exporter = exporter
        self.drive = drive or runtime.drive  # carry a started run on
        # run a job that drives a run on (a typed decision) where runs are driven (default: now)
        self.driving: Callable[..., Any] = driving or (lambda fn, *args: fn(*args))
        self.show = show or (lambda run_id: None)  # draw a run in Slack now
        self.diagnoser = diagnoser  # one read-only scan of a cluster

    # -- answering ------------------------------------------------------------------------------

    def tell(self, person: Person, text: str, blocks: list[bk.Block] | None = None) -> None:
        """A private answer to one person; failing to deliver it never raises."""
        text = bk.truncate(text, 3000)
        if person.response_url and self._respond(person.response_url, text, blocks):
            return
        if person.channel is None:
            log.info("no channel to answer %s in: %s", person.user, text)
            return
        try:
            self.client.chat_postEphemeral(channel=person.channel, user=person.user,
                                           text=text, blocks=blocks)
        except SlackApiError as e:
            log.warning("could not answer %s: %s", person.user, e.response.get("error"))

    def _respond(self, url: str, text: str, blocks: list[bk.Block] | None) -> bool:
        """Answer through a response_url; False when Slack did not take it (used up, expired)."""
        hook = WebhookClient(url, timeout=10,
                             retry_handlers=[ConnectionErrorRetryHandler(max_retry_count=1)])
        try:
            r = hook.send(text=text, blocks=blocks, response_type="ephemeral",
                          replace_original=False)
        except Exception as e:  # a broken connection: fall back to chat.postEphemeral
            log.warning("could not answer through the response_url: %s", e)
            return False
        if r.status_code != 200:
            log.info("the response_url refused an answer (%s %s)", r.status_code, r.body)
        return r.status_code == 200

    # -- slash commands -------------------------------------------------------------------------

    def slash(self, cmd: Slash, person: Person, trigger_id: str | None) -> None:
        try:
            self._slash(cmd, person, trigger_id)
        except Elsewhere as e:
            self.tell(person, f":warning: {elsewhere_text(e)}")
        except RunbookBotError as e:  # its text may quote what was typed: drawn inert
            self.tell(person, f":warning: {bk.esc(e)}")

    def _slash(self, cmd: Slash, person: Person, trigger_id: str | None) -> None:
        v = cmd.verb
        if v == "help":
            self.tell(person, USAGE, [bk.section(USAGE)])
        elif v == "list":
            self._list(person)
        elif v == "show":
            runbook = self.runtime.runbook(cmd.name)
            self.tell(person, bk.esc(runbook.metadata.title),
                      bk.runbook_blocks(runbook, destructive=self.facts.action_destructive))
        elif v == "run":
            self.run(cmd.name, cmd.params, person, trigger_id=trigger_id, dry_run=cmd.dry_run,
                     incident=cmd.incident)
        elif v == "status":
            self._status(cmd.run_id, person)
        elif v == "runs":
            headers = self.runtime.runs(active=True, channel=person.channel, limit=20)
            views = [run_view(self.runtime.show(h.run_id).state) for h in headers]
            self.tell(person, f"{len(views)} active run(s)",
                      bk.runs_list(views, who=who, now=self.clock.now()))
        elif v == "export":
            self._export(cmd, person)
        elif v == "diagnose":
            self._diagnose(cmd, person)
        else:
            assert cmd.run_id is not None
            self.driving(self.decide, self._command(cmd, person), person)

    def _command(self, cmd: Slash, person: Person) -> c.Command:
        """The engine command a decision verb builds (the verb table's, as the terminal's)."""
        assert cmd.parsed is not None, "a decision verb comes from parse()"
        return cmd.parsed.decision(person.identity)

    def _list(self, person: Person) -> None:
        rows = []
        for name in self.runtime.runbook_names():  # NotFound: this bot cannot list them
            runbook = self.runtime.runbook(name)
            steps = runbook.spec.steps
            rows.append((name, runbook.metadata.title, len(steps),
                         sum(self.facts.action_destructive(s.action) for s in steps)))
        self.tell(person, f"{len(rows)} runbook(s)", bk.runbook_list(rows))

    def _status(self, run_id: str | None, person: Person) -> None:
        if run_id is None:
            latest = self.runtime.runs(channel=person.channel, limit=1)
            if not latest:
                self.tell(person, "No runs in this channel yet. `/runbook run NAME` starts one.")
                return
            run_id = latest[0].run_id
        shown = self.runtime.show(run_id, origin=origin_of(person), children=True)
        view = run_view(shown.state, self.facts.runbook(shown.state), children=shown.children)
        self.tell(person, bk.card_text(view), bk.run_card(view, who=who, now=self.clock.now()))

    def _diagnose(self, cmd: Slash, person: Person) -> None:
        """The findings of one scan, privately, each with Dry run / Run buttons."""
        if self.diagnoser is None:
            self.tell(person, "Diagnosis is not available in this installation; "
                              "`runbook-bot diagnose` on the bot's host scans a cluster.")
            return
        p = cmd.params
        report = self.diagnoser(Scope(cluster=p.get("cluster", ""), node=p.get("node"),
                                      pod=p.get("pod"), namespace=p.get("namespace")))
        text, blocks = diagnosis_blocks(report)
        self.tell(person, text, blocks)

    def _export(self, cmd: Slash, person: Person) -> None:
        if self.exporter is None:
            self.tell(person, "Export is not available in this installation yet; "
                              "`runbook-bot export RUN_ID` on the bot's host writes transcripts.")
            return
        run_id = str(cmd.run_id)
        self.runtime.show(run_id, origin=origin_of(person))  # NotFound names the run
        filename, content = self.exporter(run_id, cmd.fmt)
        card = self.slack_store.get(run_id, "card")
        channel = card.channel if card else person.channel
        try:
            self.client.files_upload_v2(channel=channel, thread_ts=card.ts if card else None,
                                        filename=filename, content=content,
                                        title=f"Transcript of {run_id}",
                                        initial_comment=f"Transcript of {run_id} ({cmd.fmt}), "
                                                        f"requested by <@{person.user}>")
        except SlackApiError as e:
            self.tell(person, f":warning: could not upload the transcript: {e.response.get('error')}")

    # -- starting runs --------------------------------------------------------------------------

    def run(self, name: str, raw: Mapping[str, Any], person: Person, *, trigger_id: str | None,
            dry_run: bool = False, incident: str | None = None,
            suggested_by: str | None = None) -> None:
        """Start a run, or open the params form when a param is missing or invalid.

        ``incident`` and ``suggested_by`` (``alert:<ref>``, ``diagnosis:<ref>``: what a button
        that suggests a run carries) are checked before anything starts, and kept in the form."""
        raw = self.runtime.redact(raw)  # what was typed is answered back redacted, too
        try:  # a bad reference is answered as itself, not as a params form
            check_incident(incident)
            check_suggested_by(suggested_by)
        except ParamError as e:
            self.tell(person, f":warning: {bk.esc(e)}")
            return
        try:
            self.start(name, raw, person, dry_run=dry_run, incident=incident,
                       suggested_by=suggested_by)
            return
        except ParamError:
            pass  # the engine checked the params and started nothing; say which, field by field
        errors = self.runtime.params_problems(name, raw)
        if errors.get("") or not errors:
            self.tell(person, f":warning: {bk.esc(errors.get('') or 'the params are not valid')}")
            return
        self.form(name, raw, person, trigger_id=trigger_id, dry_run=dry_run, errors=errors,
                  incident=incident, suggested_by=suggested_by)

    def form(self, name: str, raw: Mapping[str, Any], person: Person, *, trigger_id: str | None,
             dry_run: bool = False, errors: Mapping[str, str] | None = None,
             incident: str | None = None, suggested_by: str | None = None) -> None:
        """The params form, prefilled with ``raw``: the run starts when a person submits it (and
        the runtime allows it); no form for someone ``policy.start`` would refuse anyway."""
        refusal = self.runtime.may_start(name, person.identity, origin=origin_of(person))
        if refusal is not None:
            self.tell(person, f":no_entry: {bk.esc(refusal)}")
            return
        runbook = self.runtime.runbook(name)
        errors = dict(errors or {})
        links = {k: v for k, v in (("incident", incident), ("suggested_by", suggested_by)) if v}
        meta = json.dumps({"runbook": name, "channel": person.channel, "dry_run": dry_run, **links})
        view = bk.params_modal(runbook, values=raw, errors=errors, metadata=meta)
        try:
            if trigger_id is None:
                raise PolicyError("no trigger to open a form with")
            self.client.views_open(trigger_id=trigger_id, view=view)
        except (SlackApiError, PolicyError):
            if not errors:
                self.tell(person, f":warning: could not open the form; type `/runbook run "
                                  f"{bk.esc(name)} key=value ...` instead")
                return
            problems = bk.esc("; ".join(f"{k}: {v}" for k, v in errors.items()))
            self.tell(person, f":warning: {problems}. Add them as `key=value` after the "
                              f"runbook name: `/runbook run {bk.esc(name)} key=value ...`")

    def start(self, name: str, raw: Mapping[str, Any], person: Person, *, dry_run: bool,
              incident: str | None = None, suggested_by: str | None = None) -> None:
        origin = {"frontend": "slack", "channel": person.channel, "team": person.team,
                  "user": person.user}
        try:  # who may start it, from which channel: the runtime's rule (policy.start)
            state = self.runtime.start(c.StartRun(
                runbook=name, params=dict(raw), requester=person.identity, dry_run=dry_run,
                origin=origin, provenance=Provenance(incident=incident, suggested_by=suggested_by)),
                origin=origin_of(person))
        except Refused as e:  # recorded in the refusals chain; nothing started
            self.tell(person, f":no_entry: {bk.esc(e.reason)}")
            return
        drawing = self.show(state.run_id)  # the card at once: its requester hears if it cannot be
        if drawing is not None and drawing.card_missing:  # posted (a slow Slack is retried instead)
            self.tell(person, f":warning: Run `{state.run_id}` started, but its card could not be "
                              "posted here; is the bot in this channel (`/invite @runbook-bot`)? "
                              f"`/runbook status {state.run_id}` shows the run meanwhile.")
        self.drive(state.run_id)

    # -- decisions ------------------------------------------------------------------------------

    def refresh_groups(self, members: Sequence[str]) -> None:
        """Read the Slack user groups among the approvers' ``members`` from Slack now (not the
        cache), so membership is current when the engine decides."""
        for member in members:
            if member.startswith(GROUP_PREFIX):
                self.usergroups.members(member[len(GROUP_PREFIX):], fresh=True)

    def decide(self, cmd: c.Command, person: Person, *, clicked: bool = False) -> c.Outcome | None:
        """Submit a decision; the engine's answer goes to the person, the change to the thread.

        A refusal is always told; a success only to someone who typed the command (a click's
        success shows as its message changing). None: not submitted, the person was told why.
        The run is loaded once, under one lease, and driven on from there (``Runtime.decide``).
        """
        def answer(out: c.Outcome) -> None:
            if not out.ok:
                self.tell(person, f":no_entry: {bk.esc(out.message)}")
            elif not clicked:
                self.tell(person, bk.esc(out.message))

        try:
            return self.runtime.decide(cmd, origin=origin_of(person), fresh=self.refresh_groups,
                                       answer=answer)
        except Elsewhere as e:  # nothing was recorded
            self.tell(person, f":no_entry: {elsewhere_text(e)}")
        except ExternalError as e:  # the approver groups could not be read: nothing recorded
            self.tell(person, f":warning: Your click was not counted: {bk.esc(e)}. Please "
                              "try again in a moment.")
        except RunbookBotError as e:  # no such run, or it is busy: nothing was recorded
            self.tell(person, f":warning: {bk.esc(e)}")
        return None

    def reject_reason_problem(self, reason: str) -> str | None:
        try:
            check_reason(reason, what="a rejection")
        except PolicyError as e:
            return str(e)
        return None


def origin_of(person: Person) -> Origin:
    """Where a Slack request was made: the runtime's channel rule reads it."""
    return Origin(frontend="slack", channel=person.channel)


def elsewhere_text(e: Elsewhere) -> str:
    """The channel rule's refusal, in mrkdwn: a run started in Slack is read and decided in its
    own channel, where the incident is; everyone there sees what was done, and a private
    channel's run stays private."""
    return (f"run `{bk.esc(e.run_id)}` belongs to <#{bk.esc(e.channel)}>; read and decide it "
            "there, where everyone following it sees what is done")
