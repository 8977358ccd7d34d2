"""How long Slack waited for its acknowledgement, measured around the whole of bolt's dispatch.

Slack gives up on a request that is not acknowledged within 3 s and shows the person an error,
so the ack histogram (``runbook_bot_slack_ack_seconds``) must time what Slack waits for. A bolt
global middleware cannot: bolt runs its middleware one after another, and a middleware's
``next()`` only marks it as passed, so the listener runs after every middleware has returned
(what a middleware timed was a few microseconds, whatever the listener did). ``TimedApp``
therefore times ``App.dispatch`` itself: signature verification, the global middleware (the
repeated-delivery check reads the database), the matching listener up to its ``ack()`` and the
response built. The app runs with ``process_before_response``, so the listener has finished when
dispatch returns; the work it handed to the pool is not Slack's wait and is not counted. Both
transports go through dispatch: the HTTP adapter and Socket Mode's.

The timer is injected (``time.perf_counter`` by default), so a test moves it instead of sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from slack_bolt import App, BoltRequest, BoltResponse

from bot.frontends.metrics import Metrics

Timer = Callable[[], float]

# the ack histogram's ``kind`` label: a small fixed set
KINDS = frozenset({"block_actions", "view_submission", "view_closed", "shortcut",
                   "message_action", "block_suggestion", "event_callback"})


def request_kind(body: Any) -> str:
    """What a Slack request is: ``slash_command``, one of ``KINDS``, else ``other``."""
    if not isinstance(body, dict):
        return "other"
    if "command" in body:
        return "slash_command"
    kind = body.get("type")
    return kind if kind in KINDS else "other"


class TimedApp(App):
    """A bolt App whose every dispatch is observed in ``metrics``' ack histogram."""

    def __init__(self, *, metrics: Metrics, timer: Timer = time.perf_counter, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._ack_metrics = metrics
        self._ack_timer = timer

    def dispatch(self, req: BoltRequest) -> BoltResponse:
        start = self._ack_timer()
        try:
            return super().dispatch(req)
        finally:
            self._ack_metrics.acked(request_kind(req.body), self._ack_timer() - start)
