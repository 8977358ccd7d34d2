"""Draws one run in Slack: its card, edited in place, and its thread.

What is on screen is derived from the run as the store holds it, plus the audit events not yet
turned into thread replies, so a message that failed to post is drawn again on the next attempt
instead of being lost (the outbox, ``outbox.py``, decides when to draw and keeps the cursor):

- the card (top-level message) is re-rendered and updated with ``chat.update`` when it changed,
  at once when a person is needed or the run ended, otherwise at most once per ``card_interval``
  (``chat.update`` is rate limited; a fast run's intermediate states are skipped, not queued);
- a step waiting for a person has one approval message in the thread per plan it was shown; once
  decided, its buttons are replaced by who decided and when, and a plan that changed marks the
  old message superseded;
- a wait's progress is one thread message edited in place, never a new message per poll;
- step results, errors, retries, ``notify`` messages and approval requests are thread replies, one
  per audit event, in the order they happened (a failed one holds back the ones after it, so the
  thread never reads out of order);
- a finished run gets one final summary naming what is still in place (compensations).

Every Slack call is isolated: one that fails is logged and noted on the ``Drawing`` as transient
(rate limited past its retries, a 5xx, a broken connection: worth trying again) or permanent
(``channel_not_found``, ``invalid_blocks``...: trying again would fail the same way), and the
rest still happen. Nothing raised here reaches a run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.errors import SlackApiError

from bot.engine.events import EventType
from bot.engine.ports import Clock, StoredEvent
from bot.engine.runstate import RunState
from bot.engine.state import RUN_TERMINAL, RunStatus, StepStatus
from bot.frontends.slack.identity import user_id_of
from bot.frontends.slack.persistence import Posted, SlackStore
from bot.present import blockkit as bk
from bot.present.events import chat_text
from bot.present.views import RunView, StepView, run_view, step_view
from bot.present.words import words_for
from bot.runbook.model import Runbook

log = logging.getLogger(__name__)
_REPLY_EVENTS = (EventType.STEP_FAILED, EventType.STEP_SKIPPED, EventType.STEP_RETRYING,
                 EventType.STEP_SUCCEEDED)
_ASKING_EVENTS = (EventType.APPROVAL_REQUESTED, EventType.CONFIRMATION_REQUESTED)
# Slack error codes that mean "not now" rather than "never" (docs.slack.dev, common errors):
# Slack's own trouble, and the workspace-wide ones an admin fixes (a rotated or revoked token, a
# scope missing after a manifest change), after which every run must still be shown in full
TRANSIENT_ERRORS = frozenset({
    "ratelimited", "rate_limited", "internal_error", "fatal_error", "service_unavailable",
    "request_timeout", "invalid_auth", "not_authed", "account_inactive", "token_revoked",
    "token_expired", "missing_scope", "no_permission", "team_access_not_granted"})
# A drawing does this much and then hands over to the next one, so it never outlives its claim
# on the run (``Outbox.claim_ttl``) however far behind Slack is.
DRAWING_BUDGET_SECONDS = 30.0


def _digest(blocks: list[bk.Block]) -> str:
    return hashlib.sha1(json.dumps(blocks, sort_keys=True).encode(), usedforsecurity=False).hexdigest()


def who(identity: str) -> str:
    """A Slack identity as a mention; anyone else (a terminal user) by name."""
    user = user_id_of(identity)
    return f"<@{user}>" if user else bk.esc(identity)


def is_transient(error: Exception) -> bool:
    """Whether a failed Slack call is worth repeating later."""
    if isinstance(error, SlackApiError):
        response = error.response
        status = int(getattr(response, "status_code", 200) or 200)
        return status == 429 or status >= 500 or response.get("error") in TRANSIENT_ERRORS
    return True  # a connection refused or reset, a timeout: Slack or the network, not the request


def retry_after(error: Exception) -> float | None:
    """Slack's Retry-After, in seconds, when the error carries one."""
    headers = getattr(getattr(error, "response", None), "headers", None) or {}
    for key, value in dict(headers).items():
        if str(key).lower() == "retry-after":
            try:
                return float(value[0] if isinstance(value, list) else value)
            except (TypeError, ValueError):
                return None
    return None


@dataclass
class Drawing:
    """What one drawing of a run did: what failed, how far the thread got, what was held back."""

    run_id: str
    replied_seq: int
    failed: list[str] = field(default_factory=list)  # Slack calls that failed transiently
    retry_after: float | None = None  # the longest Retry-After Slack asked for
    card_held_until: float | None = None  # a card edit held back by the interval, until then
    card_missing: bool = False  # the card could not be posted (permanently): nothing else shown
    finished: bool = False  # the thread reached the run's end: its summary is posted (or refused)
    more: bool = False  # stopped early with events left: draw again at once
    posted: dict[str, Posted] = field(default_factory=dict)  # the run's messages, by key
    on_failure: Callable[[str, bool], None] | None = None  # told (call, transient) of each failure

    def posted_under(self, prefix: str) -> dict[str, Posted]:
        return {k: v for k, v in self.posted.items() if k.startswith(prefix)}

    @property
    def complete(self) -> bool:
        return not self.failed and self.card_held_until is None

    def call(self, what: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        """Make one Slack call; after a transient failure, make no more (they come later)."""
        if self.failed:
            return None
        try:
            return fn(**kwargs)
        except Exception as e:
            code = e.response.get("error") if isinstance(e, SlackApiError) else repr(e)
            if is_transient(e):
                self.failed.append(what)
                wait = retry_after(e)
                if wait is not None:
                    self.retry_after = max(self.retry_after or 0.0, wait)
                log.warning("Slack %s for run %s failed (%s); it is tried again later",
                            what, self.run_id, code, extra={"run_id": self.run_id})
            else:
                log.warning("Slack %s for run %s failed: %s", what, self.run_id, code,
                            extra={"run_id": self.run_id})
            if self.on_failure is not None:
                self.on_failure(what, is_transient(e))
        return None


class RunFacts:
    """What the drawer needs from a run's runbook: the runbook (for the titles of steps not
    reached and params as written), which steps are destructive (the app hands it the engine's
    answers, ``bot.engine.facts.RunbookFacts``)."""

    def __init__(self, *, runbook: Callable[[RunState], Runbook | None],
                 destructive: Callable[[RunState, str], bool]) -> None:
        self.runbook = runbook
        self.destructive = destructive


NO_FACTS = RunFacts(runbook=lambda state: None, destructive=lambda state, key: True)


class RunDrawer:
    """Renders runs into Slack calls. Callers draw one run at a time (the outbox's lock).

    The card follows the run's state. The thread follows the audit events, in order, from the
    approval requests and step results to the final summary at ``run.finished``, so a reply is
    never posted ahead of what came before it, and the run is shown to its end only when the
    thread got there.
    """

    def __init__(self, *, client: Any, slack_store: SlackStore, clock: Clock,
                 facts: RunFacts = NO_FACTS, card_interval: float = 1.0) -> None:
        self.client = client
        self.slack_store = slack_store
        self.clock = clock
        self.facts = facts
        self.card_interval = card_interval
        self.on_failure: Callable[[str, bool], None] | None = None  # the metrics, when wired
        self._sent: dict[tuple[str, str], str] = {}  # (run, message key) -> digest of last sent
        self._card_at: dict[str, float] = {}  # run -> when its card was last edited (clock time)

    def draw(self, state: RunState, events: Sequence[StoredEvent], *, replied_seq: int,
             more: bool = False) -> Drawing:
        """Bring Slack up to date with ``state``; ``events`` are those after ``replied_seq``
        (``more``: and there are others after them, for the next drawing).

        ``state`` was read after ``events``, so it is at least as new as the last of them.
        Anything that goes wrong on our side (the database, a bug) is caught here and counted
        like a transient Slack failure, keeping how far the thread got.
        """
        d = Drawing(state.run_id, replied_seq, more=more, on_failure=self.on_failure)
        try:
            self._draw(state, events, d)
        except Exception as e:
            log.exception("drawing run %s in Slack failed", state.run_id)
            d.failed.append(f"drawing ({type(e).__name__})")
        if d.finished and d.complete:
            self.forget(state.run_id)
        return d

    def _draw(self, state: RunState, events: Sequence[StoredEvent], d: Drawing) -> None:
        d.posted = self.slack_store.keys(state.run_id)
        channel = str(state.origin.get("channel") or "")
        view = run_view(state, self.facts.runbook(state))
        card = self._card(state, view, channel, d)
        if card is None:  # no thread to reply in
            if not d.failed:  # and no point trying again until the run changes: skip its events
                d.card_missing = True
                d.replied_seq = max([d.replied_seq, *(ev.seq for ev in events)])
                d.finished = any(ev.type == EventType.RUN_FINISHED for ev in events)
            return
        started = time.monotonic()
        for ev in events:  # the thread in the order things happened
            if d.failed:  # the card's edit failed: no more calls now (``Drawing.call``), so
                break  # this reply and the ones after it come later, in order
            if ev.type in _ASKING_EVENTS:
                self._ask(state, view, card, d, str(ev.payload.get("step", "")))
            elif ev.type in _REPLY_EVENTS:
                self._step_reply(state, ev, card, d)
            elif ev.type == EventType.RUN_FINISHED:
                self._summary(state, view, card, d, head=f"{ev.seq}:{ev.hash}")
            elif ev.type == EventType.RUN_HANDED_OVER:  # the new owner is told, by mention
                text = chat_text(ev) or ""
                self._reply(d, card, [bk.section(text)], text)
            if d.failed:
                break  # keep the thread in order: this reply and the ones after it come later
            d.replied_seq = ev.seq
            d.finished = d.finished or ev.type == EventType.RUN_FINISHED
            if time.monotonic() - started > DRAWING_BUDGET_SECONDS:
                d.more = True  # Slack is slow today: hand over, the claim must not run out
                break
        self._approvals(state, view, card, d)
        self._progress(state, view, card, d)

    def forget(self, run_id: str) -> None:
        """A finished run changes no more: drop what was kept to skip unchanged updates."""
        for key in [k for k in list(self._sent) if k[0] == run_id]:
            self._sent.pop(key, None)
        self._card_at.pop(run_id, None)

    # -- Slack calls ----------------------------------------------------------------------------

    def _post(self, d: Drawing, key: str, channel: str, blocks: list[bk.Block], text: str,
              thread_ts: str | None = None) -> Posted | None:
        r = d.call("chat.postMessage", self.client.chat_postMessage, channel=channel,
                   text=text, blocks=blocks, thread_ts=thread_ts)
        if r is None:
            return None
        posted = Posted(str(r["channel"]), str(r["ts"]))
        self.slack_store.put(d.run_id, key, posted)
        d.posted[key] = posted
        self._sent[(d.run_id, key)] = _digest(blocks)
        return posted

    def _update(self, d: Drawing, key: str, posted: Posted, blocks: list[bk.Block],
                text: str) -> bool:
        """Edit a message if what it shows changed; whether an edit was asked of Slack."""
        payload = _digest(blocks)
        if self._sent.get((d.run_id, key)) == payload:
            return False
        r = d.call("chat.update", self.client.chat_update, channel=posted.channel,
                   ts=posted.ts, text=text, blocks=blocks)
        if r is not None:
            self._sent[(d.run_id, key)] = payload
        return True

    def _reply(self, d: Drawing, card: Posted, blocks: list[bk.Block], text: str) -> None:
        d.call("chat.postMessage", self.client.chat_postMessage, channel=card.channel,
               text=bk.truncate(text, 3000), blocks=blocks, thread_ts=card.ts)

    # -- what is shown --------------------------------------------------------------------------

    def _card(self, state: RunState, view: RunView, channel: str, d: Drawing) -> Posted | None:
        blocks = bk.run_card(view, who=who)
        text = bk.card_text(view)
        run_id = state.run_id
        card = d.posted.get("card")
        now = self.clock.now().timestamp()
        if card is None:
            posted = self._post(d, "card", channel, blocks, text)
            if posted is not None:
                self._card_at[run_id] = now
            return posted
        # a person is waiting on it, or it is over: show it now; otherwise at most every interval
        urgent = view.status in RUN_TERMINAL or view.status == RunStatus.AWAITING_APPROVAL
        last = self._card_at.get(run_id)
        if urgent or last is None or now - last >= self.card_interval:
            if self._update(d, "card", card, blocks, text):
                self._card_at[run_id] = now
        else:
            d.card_held_until = last + self.card_interval
        return card

    def _ask(self, state: RunState, view: RunView, card: Posted, d: Drawing, step_key: str) -> None:
        """Post the approval message of a step that asked for a person, if it still waits and
        this plan's message is not posted yet (the plan's hash is in its key), then, for a plan
        too long for it, the whole plan as its own reply."""
        s = next((x for x in view.steps if x.key == step_key), None)
        if s is None or s.status != StepStatus.AWAITING_APPROVAL:
            return  # decided before Slack was drawn: the card says how
        key = f"approval:{s.key}:{(s.plan_hash or '')[:16]}"
        if key not in d.posted:
            blocks = bk.approval_message(view, s, destructive=self.facts.destructive(state, s.key),
                                         now=self.clock.now(), who=who)
            self._post(d, key, card.channel, blocks, self._ask_text(state, s), thread_ts=card.ts)
        plan_key = "plan:" + key.removeprefix("approval:")
        if key in d.posted and plan_key not in d.posted and bk.plan_needs_thread(s):
            self._post(d, plan_key, card.channel, bk.full_plan(s),
                       f"{state.run_id}: full plan of {s.key}", thread_ts=card.ts)

    def _approvals(self, state: RunState, view: RunView, card: Posted, d: Drawing) -> None:
        """Bring the approval messages already posted up to date: buttons while the step waits,
        then who decided and when, or that the plan changed."""
        now = self.clock.now()
        for key, where in d.posted_under("approval:").items():
            _, step_key, hash_part = key.split(":", 2)
            raw = state.steps.get(step_key)
            if raw is None:
                continue
            s = step_view(raw)
            superseded = (s.plan_hash or "")[:16] != hash_part
            destructive = self.facts.destructive(state, step_key)
            if not superseded and s.status == StepStatus.AWAITING_APPROVAL and not raw.approved:
                # its expiry and evidence ages are relative to now: the words of the ask stay
                blocks = bk.approval_message(view, s, destructive=destructive, now=now, who=who)
                text = self._ask_text(state, s)
            else:
                line = bk.decision_line(s, who=who, superseded=superseded)
                blocks = bk.approval_message(view, s, destructive=destructive, now=None, who=who,
                                             decision=line)
                text = f"{state.run_id}: {s.key} {s.status}"
            self._update(d, key, where, blocks, text)

    @staticmethod
    def _ask_text(state: RunState, s: StepView) -> str:
        verb = "confirm" if s.needs_confirmation and not s.needs_approval else "approve"
        return f"{state.run_id}: {s.key} needs a person to {verb}: {bk.esc(s.title)}"

    def _progress(self, state: RunState, view: RunView, card: Posted, d: Drawing) -> None:
        posted = d.posted_under("progress:")
        for s in view.steps:
            key = f"progress:{s.key}"
            if not s.progress:
                continue
            text = bk.progress_text(s)
            blocks = [bk.section(text)]
            where = posted.get(key)
            if where is None:
                if s.status == StepStatus.WAITING:
                    self._post(d, key, card.channel, blocks, text, thread_ts=card.ts)
            else:
                self._update(d, key, where, blocks, text)

    def _step_reply(self, state: RunState, ev: StoredEvent, card: Posted, d: Drawing) -> None:
        """The thread reply for one step event, if it has one (a failure is noted on ``d``)."""
        key = str(ev.payload.get("step", ""))
        raw = state.steps.get(key)
        if raw is None:
            return
        s = step_view(raw, words_for(state, self.facts.runbook(state), key))  # the runbook's words
        text = chat_text(ev)
        if text is not None:
            self._reply(d, card, [bk.section(text)], text)
        elif ev.type == EventType.STEP_SUCCEEDED and raw.action == "notify":
            message = str(ev.payload.get("message") or "")
            if message:
                message = ("[dry run] " if state.dry_run else "") + message
                self._reply(d, card, [bk.section(bk.esc(message))],
                            f"{state.run_id}: {bk.esc(message)}")
        elif ev.type != EventType.STEP_SUCCEEDED or s.changes or s.message:
            # (a read-only step with nothing to say has no reply: the card line is enough)
            self._reply(d, card, bk.step_reply(s, now=self.clock.now()),
                        f"{state.run_id}: {key} {ev.type.removeprefix('step.')}")

    def _summary(self, state: RunState, view: RunView, card: Posted, d: Drawing, *,
                 head: str) -> None:
        if "summary" in d.posted:
            return
        # the audit head published where the database's writers cannot reach: the chain must still
        # hold this event (`runbook-bot audit verify RUN_ID --head SEQ:HASH`)
        blocks = [*bk.final_summary(view, who=who),
                  bk.context(f"Audit head `{head}`: `runbook-bot audit verify {state.run_id} "
                             f"--head {head}` checks the record still holds it")]
        text = f"{state.run_id} {view.status}: {bk.esc(view.outcome)}"
        for c in view.compensations:
            text += f"\nstill in place: {bk.esc(c)}"
        text += f"\naudit head {head}"
        self._post(d, "summary", card.channel, blocks, bk.truncate(text, 3000), thread_ts=card.ts)
