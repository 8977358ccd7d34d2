"""Shows runs in Slack as they change: one run card per run, edited in place, and its thread.

It is a Notifier (``bot.engine.ports``): the runner calls it after every durable save, so the card
always shows what the store holds. What is on screen is derived from the run's state, not from
the events alone, so a message that failed to post (Slack down, rate limited past its retries) is
posted at the next change instead of being lost:

- the card (top-level message) is re-rendered and updated with ``chat.update`` when it changed,
  at once when a person is needed or the run ended, otherwise at most once per ``card_interval``
  (``chat.update`` is rate limited; a fast run's intermediate states are skipped, not queued);
- a step waiting for a person has one approval message in the thread per plan it was shown; once
  decided, its buttons are replaced by who decided and when, and a plan that changed marks the
  old message superseded;
- a wait's progress is one thread message edited in place, never a new message per poll;
- step results, errors, ``notify`` messages and retries are thread replies;
- a finished run gets one final summary naming what is still in place (compensations).

Every Slack call is isolated: one that fails is logged and the rest still happen, and nothing
raised here reaches the run (the runner also guards its notifiers).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from slack_sdk.errors import SlackApiError

from bot.engine.ports import Clock
from bot.engine.runstate import AuditDraft, RunState
from bot.engine.state import StepStatus
from bot.frontends.slack.cards import CardStore, Posted
from bot.frontends.slack.identity import user_id_of
from bot.present import blockkit as bk
from bot.present.views import RunView, run_view, step_view

log = logging.getLogger(__name__)
TERMINAL = ("succeeded", "failed", "aborted")
_REPLY_EVENTS = ("step.failed", "step.skipped", "step.retrying", "step.succeeded")


def _digest(blocks: list[bk.Block]) -> str:
    return hashlib.sha1(json.dumps(blocks, sort_keys=True).encode(), usedforsecurity=False).hexdigest()


def who(identity: str) -> str:
    """A Slack identity as a mention; anyone else (a terminal user) by name."""
    user = user_id_of(identity)
    return f"<@{user}>" if user else bk.esc(identity)


class RunFacts:
    """What the notifier needs from a run's runbook: step titles, which steps are destructive."""

    def __init__(self, *, titles: Callable[[RunState], list[tuple[str, str]] | None],
                 destructive: Callable[[RunState, str], bool]) -> None:
        self.titles = titles
        self.destructive = destructive


NO_FACTS = RunFacts(titles=lambda state: None, destructive=lambda state, key: True)


class SlackNotifier:
    def __init__(self, *, client: Any, cards: CardStore, clock: Clock,
                 facts: RunFacts = NO_FACTS, card_interval: float = 1.0) -> None:
        self.client = client
        self.cards = cards
        self.clock = clock
        self.facts = facts
        self._sent: dict[tuple[str, str], str] = {}  # (run, message key) -> digest of last sent
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        # chat.update is rate limited (Tier 3): a fast run's card is edited at most this often
        self.card_interval = card_interval
        self._card_at: dict[str, float] = {}  # run -> when its card was last edited (monotonic)
        self._pending: dict[str, tuple[Posted, list[bk.Block], str]] = {}
        self._timers: dict[str, threading.Timer] = {}

    def _lock(self, run_id: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(run_id, threading.Lock())

    def run_changed(self, state: RunState, *, events: Sequence[AuditDraft],
                    messages: Sequence[str]) -> None:
        channel = state.origin.get("channel")
        if state.origin.get("frontend") != "slack" or not channel:
            return
        with self._lock(state.run_id):
            view = run_view(state, self.facts.titles(state))
            card = self._card(state, view, str(channel))
            if card is None:
                return  # no thread to reply in; the next change posts the card
            self._approvals(state, view, card)
            self._progress(state, view, card)
            for ev in events:
                if ev.type in _REPLY_EVENTS:
                    self._step_reply(state, ev, card, said=messages)
            for m in messages:
                self._reply(card, [bk.section(bk.esc(m))], f"{state.run_id}: {m}")
            if view.status in TERMINAL:
                self._summary(state, view, card)
                self._forget(state.run_id)

    def _forget(self, run_id: str) -> None:
        """A finished run changes no more: drop what was kept to skip unchanged updates."""
        for key in [k for k in list(self._sent) if k[0] == run_id]:
            del self._sent[key]
        self._card_at.pop(run_id, None)

    # -- Slack calls, each one isolated ---------------------------------------------------------

    def _call(self, what: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        try:
            return fn(**kwargs)
        except SlackApiError as e:
            log.warning("Slack %s failed: %s", what, e.response.get("error") if e.response else e)
        except Exception:
            log.exception("Slack %s failed", what)
        return None

    def _post(self, run_id: str, key: str, channel: str, blocks: list[bk.Block], text: str,
              thread_ts: str | None = None) -> Posted | None:
        payload = _digest(blocks)
        r = self._call("chat.postMessage", self.client.chat_postMessage, channel=channel,
                       text=text, blocks=blocks, thread_ts=thread_ts)
        if r is None:
            return None
        posted = Posted(str(r["channel"]), str(r["ts"]))
        if key:
            self.cards.put(run_id, key, posted)
            self._sent[(run_id, key)] = payload
        return posted

    def _update(self, run_id: str, key: str, posted: Posted, blocks: list[bk.Block],
                text: str) -> None:
        payload = _digest(blocks)
        if self._sent.get((run_id, key)) == payload:
            return
        r = self._call("chat.update", self.client.chat_update, channel=posted.channel,
                       ts=posted.ts, text=text, blocks=blocks)
        if r is not None:
            self._sent[(run_id, key)] = payload

    def _reply(self, card: Posted, blocks: list[bk.Block], text: str) -> None:
        self._call("chat.postMessage", self.client.chat_postMessage, channel=card.channel,
                   text=bk.truncate(text, 3000), blocks=blocks, thread_ts=card.ts)

    # -- what is shown --------------------------------------------------------------------------

    def _card(self, state: RunState, view: RunView, channel: str) -> Posted | None:
        blocks = bk.run_card(view, who=who)
        text = bk.card_text(view)
        card = self.cards.get(state.run_id, "card")
        if card is None:
            return self._post(state.run_id, "card", channel, blocks, text)
        run_id = state.run_id
        # a person is waiting on it, or it is over: show it now; otherwise at most every interval
        urgent = view.status in TERMINAL or view.status == "awaiting_approval"
        now = time.monotonic()
        wait = self.card_interval - (now - self._card_at.get(run_id, 0.0))
        if urgent or wait <= 0:
            self._pending.pop(run_id, None)
            timer = self._timers.pop(run_id, None)
            if timer is not None:
                timer.cancel()
            self._card_at[run_id] = now
            self._update(run_id, "card", card, blocks, text)
        else:
            if run_id not in self._pending:
                timer = threading.Timer(wait, self._flush, args=(run_id,))
                timer.daemon = True
                self._timers[run_id] = timer
                timer.start()
            self._pending[run_id] = (card, blocks, text)
        return card

    def _flush(self, run_id: str) -> None:
        with self._lock(run_id):
            pending = self._pending.pop(run_id, None)
            self._timers.pop(run_id, None)
            if pending is not None:
                self._card_at[run_id] = time.monotonic()
                self._update(run_id, "card", *pending)

    def flush(self) -> None:
        """Send every card update held back by the interval (on shutdown)."""
        for run_id in list(self._pending):
            timer = self._timers.get(run_id)
            if timer is not None:
                timer.cancel()
            self._flush(run_id)

    def _approvals(self, state: RunState, view: RunView, card: Posted) -> None:
        posted = self.cards.keys(state.run_id, "approval:")
        now = self.clock.now()
        for s in view.steps:
            key = f"approval:{s.key}:{(s.plan_hash or '')[:16]}"
            destructive = self.facts.destructive(state, s.key)
            if key not in posted and s.status == StepStatus.AWAITING_APPROVAL:
                blocks = bk.approval_message(view, s, destructive=destructive, now=now, who=who)
                verb = "confirm" if s.needs_confirmation and not s.needs_approval else "approve"
                self._post(state.run_id, key, card.channel, blocks,
                           f"{state.run_id}: {s.key} needs a person to {verb}: {s.title}",
                           thread_ts=card.ts)
                if bk.plan_needs_thread(s):
                    self._reply(card, bk.full_plan(s), f"{state.run_id}: full plan of {s.key}")
        for key, where in posted.items():
            _, step_key, hash_part = key.split(":", 2)
            raw = state.steps.get(step_key)
            if raw is None:
                continue
            s = step_view(raw)
            superseded = (s.plan_hash or "")[:16] != hash_part
            if not superseded and s.status == StepStatus.AWAITING_APPROVAL and not raw.approved:
                blocks = bk.approval_message(view, s, destructive=self.facts.destructive(
                    state, step_key), now=now, who=who)
            else:
                line = bk.decision_line(s, who=who, superseded=superseded)
                blocks = bk.approval_message(view, s, destructive=self.facts.destructive(
                    state, step_key), now=None, who=who, decision=line)
            self._update(state.run_id, key, where, blocks, f"{state.run_id}: {s.key} {s.status}")

    def _progress(self, state: RunState, view: RunView, card: Posted) -> None:
        for s in view.steps:
            key = f"progress:{s.key}"
            if not s.progress:
                continue
            text = bk.progress_text(s)
            blocks = [bk.section(text)]
            where = self.cards.get(state.run_id, key)
            if where is None:
                if s.status == StepStatus.WAITING:
                    self._post(state.run_id, key, card.channel, blocks, text, thread_ts=card.ts)
            else:
                self._update(state.run_id, key, where, blocks, text)

    def _step_reply(self, state: RunState, ev: AuditDraft, card: Posted, *,
                    said: Sequence[str] = ()) -> None:
        key = str(ev.payload.get("step", ""))
        raw = state.steps.get(key)
        if raw is None:
            return
        s = step_view(raw)
        if ev.type == "step.retrying":
            delay = ev.payload.get("delay")
            text = (f"↻ *{bk.esc(key)}* failed and is retried"
                    + (f" in {float(delay):.0f} s" if isinstance(delay, int | float) else "")
                    + f": {bk.esc(ev.payload.get('error', ''))}")
            self._reply(card, [bk.section(text)], text)
            return
        if ev.type == "step.succeeded" and not (s.changes or s.message):
            return  # a read-only step with nothing to say: the card line is enough
        if ev.type == "step.succeeded" and not s.changes and any(s.message in m for m in said):
            return  # a notify step: its message is posted as itself
        self._reply(card, bk.step_reply(s, now=self.clock.now()), f"{state.run_id}: {key} {s.status}")

    def _summary(self, state: RunState, view: RunView, card: Posted) -> None:
        if self.cards.get(state.run_id, "summary") is not None:
            return
        blocks = bk.final_summary(view, who=who)
        text = f"{state.run_id} {view.status}: {view.outcome}"
        for c in view.compensations:
            text += f"\nstill in place: {c}"
        self._post(state.run_id, "summary", card.channel, blocks, bk.truncate(text, 3000),
                   thread_ts=card.ts)
