"""``/runbook export``: the run's transcript, with the people's side of its Slack thread merged in.

The transcript itself (audit events, plans, approvals, the verify verdict) is rendered by
``bot.present.transcript``; what only Slack knows is the conversation in the run card's thread.
It is read with ``conversations.replies`` (page by page), the bot's own messages left out (they
repeat the audit), and each person named once through ``users.info``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from slack_sdk.errors import SlackApiError

from bot.frontends.slack.persistence import SlackStore

log = logging.getLogger(__name__)


def thread_messages(client: Any, slack_store: SlackStore, run_id: str) -> list[dict[str, Any]]:
    """The human messages of a run's thread, oldest first, each with the author's name."""
    card = slack_store.get(run_id, "card")
    if card is None:
        return []
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    try:
        for page in client.conversations_replies(channel=card.channel, ts=card.ts, limit=200):
            for m in page["messages"]:
                if m.get("bot_id") or m.get("ts") == card.ts or not m.get("user"):
                    continue
                user = str(m["user"])
                if user not in names:
                    names[user] = _name(client, user)
                out.append({"ts": m["ts"], "user": user, "name": names[user],
                            "text": m.get("text", "")})
    except SlackApiError as e:
        log.warning("could not read the thread of %s: %s", run_id, e.response.get("error"))
    return out


def _name(client: Any, user: str) -> str:
    try:
        profile = client.users_info(user=user)["user"]
    except SlackApiError:
        return user
    p = profile.get("profile") or {}
    return str(p.get("display_name") or p.get("real_name") or profile.get("name") or user)


def slack_exporter(client: Any, slack_store: SlackStore, store: Any
                   ) -> Callable[[str, str], tuple[str, bytes]] | None:
    """An exporter for ``SlackService``; None when this installation has no transcripts."""
    try:
        from bot.present import transcript
    except ImportError:
        return None

    def export(run_id: str, fmt: str) -> tuple[str, bytes]:
        text = transcript.export(store, run_id, fmt=fmt,
                                 thread=thread_messages(client, slack_store, run_id))
        return f"{run_id}.{fmt}", text.encode("utf-8")

    return export
