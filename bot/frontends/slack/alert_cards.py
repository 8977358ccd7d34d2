"""The suggestion card of an alert group in Slack: what fired, what to run, and two buttons.

One message per Alertmanager group, in the configured channel, posted when the group first has
an alert a runbook answers and edited in place (``chat.update``) as alerts join it or resolve.
Which replica posts is decided in the store (``AlertLog.claim_card``), so one group has one card.
Each firing alert lists the runbooks that answer it with the params its labels filled, what the
diagnosis found where there is one, and **Dry run** / **Run** buttons. Dry run starts a plan-only
run as the person who clicked; Run opens the params form prefilled, so the run starts only once
a person submits it, under the normal policy. Button values carry the alert's provenance
(``alert:<cluster>/<fingerprint>``), which the started run records in its origin.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Final

from slack_sdk.errors import SlackApiError

from bot.diagnose import Report
from bot.frontends.alerts import MAX_TAKEN, AlertGroup, provenance
from bot.present import blockkit as bk
from bot.store.alerts import AlertLog, StoredAlert

log = logging.getLogger(__name__)

ACTION_ALERT_DRY_RUN: Final = "rb_alert_dry_run"
ACTION_ALERT_RUN: Final = "rb_alert_run"
SUBJECTS = ("node", "namespace", "pod", "persistentvolume", "persistentvolumeclaim",
            "statefulset", "zone")
MAX_ALERTS = 10  # alerts drawn on a card; the rest are counted (Block Kit: 50 blocks a message)


def suggestion_value(runbook: str, params: Mapping[str, str], ref: str,
                     incident: str | None = None) -> str | None:
    """A button's value: the runbook, its params, the provenance and the incident the run is to
    be linked to (a PagerDuty incident's reference); None if over Slack's limit."""
    data: dict[str, Any] = {"rb": runbook, "p": dict(params), "a": ref}
    if incident:
        data["i"] = incident
    value = json.dumps(data, separators=(",", ":"))
    return value if len(value) <= bk.LIMITS["button_value"] else None


def suggestion_buttons(runbook: str, params: Mapping[str, str], ref: str, *,
                       block_id: str, incident: str | None = None) -> bk.Block | None:
    """Dry run / Run for one suggestion, or None when its value would not fit a button."""
    value = suggestion_value(runbook, params, ref, incident)
    if value is None:
        return None
    return bk.actions([
        bk.button(text="Dry run", action_id=ACTION_ALERT_DRY_RUN, value=value),
        bk.button(text="Run", action_id=ACTION_ALERT_RUN, value=value, style="primary"),
    ], block_id=block_id)


def diagnosis_ref(report: Report) -> str:
    """The provenance of a run started from a diagnosis: ``diagnosis:<cluster>@<scanned_at>``."""
    return f"diagnosis:{report.cluster}@{report.scanned_at.isoformat(timespec='seconds')}"


MAX_FINDINGS = 12  # each finding takes up to four blocks; Block Kit allows 50 a message


def diagnosis_blocks(report: Report) -> tuple[str, list[bk.Block]]:
    """A scan's findings, worst first, each with its evidence and Dry run / Run buttons."""
    n = len(report.findings)
    title = (f"{n} finding{'s' if n != 1 else ''} in cluster {report.cluster}" if n
             else f"Nothing wrong found in cluster {report.cluster}")
    blocks: list[bk.Block] = [bk.section(f"*{bk.esc(title)}* ({report.calls} API calls, "
                                         f"{bk.hhmm(report.scanned_at.isoformat())})")]
    ref = diagnosis_ref(report)
    for i, f in enumerate(report.findings[:MAX_FINDINGS]):
        blocks.append(bk.section(f"*{bk.esc(f.severity.value)}* {bk.esc(f.summary)}"))
        seen = "; ".join(f"{e.what} ({e.source})" for e in f.evidence[:3])
        if seen:
            blocks.append(bk.context(bk.esc(seen)))
        if f.runbook:
            params = " ".join(f"{k}=`{bk.esc(v)}`" for k, v in f.params.items())
            blocks.append(bk.context(f"Runbook *{bk.esc(f.runbook)}* {params}"))
            buttons = suggestion_buttons(f.runbook, f.params, ref, block_id=f"finding:{i}")
            if buttons is not None:
                blocks.append(buttons)
        elif f.command:
            blocks.append(bk.context(f"`{bk.esc(f.command)}`"))
    if n > MAX_FINDINGS:
        blocks.append(bk.context(f"{n - MAX_FINDINGS} more: `runbook-bot diagnose` lists them all"))
    return bk.esc(title), bk.limit_blocks(blocks)  # the text fallback is drawn too


def _subject(labels: Mapping[str, str]) -> str:
    parts = [f"{k}=`{bk.esc(labels[k])}`" for k in SUBJECTS if labels.get(k)]
    return " ".join(parts)


def _alert_blocks(a: StoredAlert, index: int) -> list[bk.Block]:
    labels = a.data.get("labels", {})
    notes = a.data.get("annotations", {})
    firing = a.status == "firing"
    mark = ":rotating_light:" if firing else ":white_check_mark:"
    what = notes.get("summary") or notes.get("description") or notes.get("message") or ""
    line = (f"{mark} *{bk.esc(labels.get('alertname', '?'))}* {'firing' if firing else 'resolved'}"
            f" on `{bk.esc(a.data.get('cluster', ''))}` {_subject(labels)}")
    if what:
        line += f"\n{bk.esc(what)}"
    blocks: list[bk.Block] = [bk.section(line)]
    incident = a.data.get("incident") or {}
    if incident.get("id"):
        where = f"<{incident['url']}|{bk.esc(incident['id'])}>" if incident.get("url") else \
            f"`{bk.esc(incident['id'])}`"
        blocks.append(bk.context(f":pager: PagerDuty incident {where}"))
    for s in a.data.get("findings", []):
        blocks.append(bk.context(f":mag: {bk.esc(s)}"))
    for j, s in enumerate(a.data.get("suggestions", [])):
        params = " ".join(f"{k}=`{bk.esc(v)}`" for k, v in s["params"].items())
        text = f"Runbook *{bk.esc(s['runbook'])}*" + (f" with {params}" if params else "")
        held = a.data.get("auto_run_held", {}).get(s["runbook"])
        if s.get("auto_run") and held:
            text += f" (not started by the bot: over its limit of auto-runs, {bk.esc(held)})"
        elif s.get("auto_run"):
            text += " (started by the bot: it only reads)"
        if s.get("problem"):
            text += f"\n:warning: {bk.esc(s['problem'])}: fill the params in the form"
        blocks.append(bk.context(text))
        buttons = suggestion_buttons(s["runbook"], s["params"], provenance(a.key),
                                     block_id=f"alert:{index}:{j}", incident=incident.get("ref"))
        if firing and buttons is not None:
            blocks.append(buttons)
    return blocks


def _not_done(group: AlertGroup) -> list[str]:
    """What a flood left undone, said on the card: alerts of the last delivery not looked at,
    and auto-runs held by their runbook's limit."""
    lines = []
    truncated, over = group.dropped.get("truncated", 0), group.dropped.get("over_limit", 0)
    if truncated or over:
        why = [f"{truncated} left out by Alertmanager (its max_alerts)"] if truncated else []
        if over:
            why.append(f"{over} over the {MAX_TAKEN} the bot takes from a delivery (the oldest)")
        lines.append(f":warning: {truncated + over} alerts of this group were not looked at: "
                     + ", ".join(why))
    held: dict[str, str] = {}
    count = 0
    for a in group.alerts:
        count += len(a.data.get("auto_run_held", {}))
        held.update(a.data.get("auto_run_held", {}))
    if count:
        limits = ", ".join(f"{bk.esc(rb)} {bk.esc(limit)}" for rb, limit in sorted(held.items()))
        lines.append(f":warning: {count} auto-run{'s' if count != 1 else ''} not started: over "
                     f"the limit of auto-runs per runbook ({limits}); Dry run or Run starts one")
    return lines


def card_blocks(group: AlertGroup) -> tuple[str, list[bk.Block]]:
    """The card's fallback text and blocks."""
    firing, total = group.firing, len(group.alerts)
    title = (f"{firing} alert{'s' if firing != 1 else ''} firing" if firing
             else "All alerts resolved")
    # the notification text is drawn (and notifies) like the blocks: alert names are inert too
    text = f"{title}: " + ", ".join(sorted({bk.esc(a.data.get("labels", {}).get("alertname", "?"))
                                            for a in group.alerts}))
    blocks: list[bk.Block] = [bk.section(f"*{bk.esc(title)}* ({total - firing} resolved)")]
    blocks.extend(bk.context(line) for line in _not_done(group))
    shown = sorted(group.alerts, key=lambda a: (a.status != "firing", a.starts_at, a.key))
    for i, a in enumerate(shown[:MAX_ALERTS]):
        blocks.extend(_alert_blocks(a, i))
    if len(shown) > MAX_ALERTS:
        blocks.append(bk.context(f"{len(shown) - MAX_ALERTS} more alerts in this group not shown"))
    return bk.truncate(text, 3000), bk.limit_blocks(blocks)


class SlackCards:
    """Posts a group's card once (the replica that claims it) and updates it after."""

    def __init__(self, *, client: Any, alert_log: AlertLog, channel: str | None,
                 clock_now: Any) -> None:
        self.client = client
        self.log = alert_log
        self.channel = channel
        self.now = clock_now

    def show(self, group: AlertGroup) -> None:
        if not self.channel:
            log.warning("alert group has no channel to go to: set alerts.channel "
                        "(RUNBOOK_BOT_ALERTS_CHANNEL)")
            return
        text, blocks = card_blocks(group)
        where = self.log.card(group.key)
        try:
            if where is not None:
                self.client.chat_update(channel=where[0], ts=where[1], text=text, blocks=blocks)
                return
            if not self.log.claim_card(group.key, group.label, now=self.now()):
                return  # another replica is posting it; it draws what the store holds then
            try:
                r = self.client.chat_postMessage(channel=self.channel, text=text, blocks=blocks)
            except SlackApiError:
                self.log.release_card(group.key)
                raise
            self.log.set_card(group.key, channel=str(r["channel"]), ts=str(r["ts"]))
            latest = self.log.group(group.key)
            if [(a.key, a.status) for a in latest] != [(a.key, a.status) for a in group.alerts]:
                # alerts recorded by another replica while this card was being posted
                text, blocks = card_blocks(AlertGroup(group.key, group.label, latest,
                                                      dropped=group.dropped))
                self.client.chat_update(channel=r["channel"], ts=r["ts"], text=text, blocks=blocks)
        except SlackApiError as e:
            log.warning("could not show the alert card: %s", e.response.get("error"))
