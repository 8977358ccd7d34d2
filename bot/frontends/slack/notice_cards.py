"""The card of a node the watcher noticed: what it found, since when, and what to run.

A notice (``bot.frontends.notices``) becomes a suggestion card like an alert's, drawn with the
same pieces (``alert_cards.suggestion_buttons``: **Dry run** and **Run**, whose clicks the alert
cards' listeners take, the run recording ``suggested_by: watcher:<cluster>/<node>``). One card
per node (per zone for a zone notice), in the configured channel, claimed and stored in the alert
cards' table (``AlertLog.claim_card``), so two replicas post one card, and a later notice about
the same node edits it (``chat.update``) rather than posting again: a node that comes back does
not flap. A sick node (its kubelet alive) is offered its triage with its cause, never a fence. A
recovered node's card says when it came back and loses its buttons; a run started from the card
that still waits for approval is named, with what happens to it: its plan is computed again just
before apply, and a changed plan voids the approvals (docs/engine.md). The watcher never changes
a person's run itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from slack_sdk.errors import SlackApiError

from bot.engine.runstate import RunState
from bot.frontends.notices import (
    PROVENANCE,
    LogNotices,
    Notice,
    NoticeAutoRuns,
    card_key,
    instant,
    offered,
    provenance,
    subject,
    suggested,
)
from bot.frontends.slack.alert_cards import suggestion_buttons
from bot.present import blockkit as bk
from bot.store.alerts import AlertLog

log = logging.getLogger(__name__)

SECONDS: str = "{date_short_pretty} {time_secs}"  # Slack's date tokens, with seconds
_TITLES = {
    "dead": ":skull: Node `{node}` on `{cluster}` is dead",
    "hung": ":hourglass: Node `{node}` on `{cluster}` is hung",
    "sick": ":thermometer: Node `{node}` on `{cluster}` is sick (its kubelet is alive)",
    "zone": ":rotating_light: Zone `{zone}` on `{cluster}`: {count} nodes down",
    "recovered": ":white_check_mark: Node `{node}` on `{cluster}` recovered at {at}",
}


def _when(value: object) -> str:
    when = instant(value)
    return bk.slack_date(when, tokens=SECONDS) if when is not None else "an unknown time"


def _title(n: Notice) -> str:
    if n.verdict == "recovered" and not n.node:
        return (f":white_check_mark: Zone `{bk.esc(n.zone or '?')}` on `{bk.esc(n.cluster)}` "
                f"recovered at {_when(n.noticed_at)}")
    template = _TITLES.get(n.verdict, ":grey_question: Node `{node}` on `{cluster}`: {verdict}")
    return template.format(node=bk.esc(n.node), cluster=bk.esc(n.cluster),
                           zone=bk.esc(n.zone or "?"), count=len(n.nodes),
                           verdict=bk.esc(n.verdict), at=_when(n.noticed_at))


def _fallback(n: Notice) -> str:
    """The notification text: plain words, no markup (the blocks carry the dates)."""
    what = f"node {n.node} on {n.cluster}" if n.node else f"zone {n.zone} on {n.cluster}"
    return bk.truncate(bk.esc(f"{what}: {n.verdict}"), 3000)


def _runbook_line(name: str, params: dict[str, str]) -> str:
    shown = " ".join(f"{k}=`{bk.esc(v)}`" for k, v in params.items())
    return f"Runbook *{bk.esc(name)}*" + (f" with {shown}" if shown else "")


def notice_blocks(n: Notice, *, waiting: Sequence[RunState] = (),
                  auto: str | None = None) -> tuple[str, list[bk.Block]]:
    """The card's fallback text and blocks; ``waiting``: runs from the card awaiting approval;
    ``auto``: what became of the suggestion's auto-run (``NoticeAutoRuns``), in words."""
    title = _title(n)
    blocks: list[bk.Block] = [bk.section(f"*{title}*")]
    if n.reason:
        blocks.append(bk.context(f":mag: {bk.esc(n.reason)}"))
    if n.verdict == "zone" and n.nodes:
        shown = ", ".join(f"`{bk.esc(x)}`" for x in list(n.nodes)[:20])
        more = f" and {len(n.nodes) - 20} more" if len(n.nodes) > 20 else ""
        blocks.append(bk.context(f"Nodes: {shown}{more}"))
    if n.verdict == "recovered":
        blocks.append(bk.context("Its Lease is renewed again: nothing to run for it now."))
        for run in waiting:
            blocks.append(bk.context(
                f":information_source: Run `{bk.esc(run.run_id)}` ({bk.esc(run.runbook)}) was "
                "started from this card and waits for approval: the node came back, so its plan "
                "is checked again just before anything is applied: a plan that changed voids "
                "the approvals given, and a fence of a node that is Ready again is refused. The "
                "watcher does not change the run; abort it if it is no longer wanted."))
        return _fallback(n), bk.limit_blocks(blocks)
    blocks.append(bk.context(f"Lease stale since {_when(n.detected_at)}; noticed "
                             f"{_when(n.noticed_at)}"))
    s = offered(n)
    if s is not None:
        blocks.append(bk.context(_runbook_line(*s) + (f" ({bk.esc(auto)})" if auto else "")))
        buttons = suggestion_buttons(s[0], s[1], provenance(n), block_id="notice:0")
        if buttons is not None:
            blocks.append(buttons)
    elif (fence := suggested(n)) is not None:
        blocks.append(bk.context(f"No fence: *{bk.esc(fence[0])}* is for a node whose kubelet "
                                 "is gone, and this one's is alive"))
    return _fallback(n), bk.limit_blocks(blocks)


class SlackNoticeCards:
    """Posts a node's (a zone's) card once, on the replica that claims it, and edits it after."""

    def __init__(self, *, client: Any, alert_log: AlertLog, channel: str | None,
                 clock_now: Callable[[], float],
                 runs: Callable[[], Sequence[RunState]] = lambda: (),
                 auto_runs: NoticeAutoRuns | None = None) -> None:
        self.client = client
        self.log = alert_log
        self.channel = channel
        self.now = clock_now
        self.runs = runs  # the active runs, newest first
        self.auto_runs = auto_runs  # read-only runbooks that opt into auto_run

    def waiting(self, n: Notice) -> list[RunState]:
        """The runs started from this node's card (whenever it was detected) that wait."""
        base = PROVENANCE + subject(n)
        return [r for r in self.runs()
                if r.suggested_by is not None and r.status == "awaiting_approval"
                and (r.suggested_by == base or r.suggested_by.startswith(base + "@"))]

    def show(self, n: Notice) -> None:
        if not self.channel:
            log.warning("the watcher's notice about %s has no channel to go to: set "
                        "alerts.channel", subject(n))
            LogNotices().on_notice(n)  # the command that answers it, in the log at least
            return
        key = card_key(n)
        where = self.log.card(key)
        if n.verdict == "recovered" and where is None:
            log.info("watcher: %s recovered; it had no card to update", subject(n))
            return
        auto = self.auto_runs(n, now=self.now()) if self.auto_runs is not None else None
        text, blocks = notice_blocks(n, waiting=self.waiting(n) if n.verdict == "recovered" else (),
                                     auto=auto)
        try:
            if where is not None:
                self.client.chat_update(channel=where[0], ts=where[1], text=text, blocks=blocks)
                return
            if not self.log.claim_card(key, provenance(n), now=self.now()):
                return  # another replica posts it
            try:
                r = self.client.chat_postMessage(channel=self.channel, text=text, blocks=blocks)
            except SlackApiError:
                self.log.release_card(key)
                raise
            self.log.set_card(key, channel=str(r["channel"]), ts=str(r["ts"]))
        except SlackApiError as e:
            log.warning("could not show the watcher's card about %s: %s", subject(n),
                        e.response.get("error"))
