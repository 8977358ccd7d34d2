"""The times of a transcript (bot/present/transcript.py): stored ISO-8601 times shown in the
reader's zone, and the ``ts`` of a Slack thread's messages read as instants.

Its own module so that the transcript builder stays within the module-size budget
(docs/architecture.md); ``slack_time`` is also importable from ``bot.present.transcript``.
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from functools import lru_cache

from bot.errors import ConfigError


class Clock:
    """Converts stored ISO-8601 times to the transcript's zone; runs share few distinct times."""

    def __init__(self, tz: tzinfo) -> None:
        self.tz = tz
        self.convert = lru_cache(maxsize=None)(self._convert)

    def _convert(self, text: str) -> str:
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            return text
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return when.astimezone(self.tz).isoformat()

    def opt(self, text: str | None) -> str | None:
        return self.convert(text) if text else None


def slack_time(ts: str) -> datetime:
    """A Slack message ``ts`` (``"1767225600.000100"``, seconds since the epoch) or ISO-8601."""
    try:
        return datetime.fromtimestamp(float(ts), tz=UTC)
    except (ValueError, OverflowError, OSError):
        pass
    try:
        when = datetime.fromisoformat(ts)
    except ValueError:
        raise ConfigError(f"a thread message has ts {ts!r}: expected a Slack ts or an ISO-8601 "
                          "time") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)
