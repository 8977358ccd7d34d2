"""How every view writes a time and a length of time: one formatter, so they all read alike.

Stored times are ISO-8601 with microseconds; nobody reads those at 3 a.m. Here they become
``2026-12-04 16:45:02 UTC`` (a transcript or a terminal, in the zone it is shown in), ``16:45 UTC``
when the day is obvious, or Slack's ``<!date^…>`` token so that each reader sees their own zone.
Lengths of time read ``1m 20s``, never ``80.0s``.
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo

DATE_TOKENS = "{date_short_pretty} {time}"  # Slack: "today 12:03 PM", "Jan 4, 2027 09:15"


def instant(value: str | datetime | None) -> datetime | None:
    """A stored time as an aware datetime (UTC when it names no zone); None if it is not one."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        when = value
    else:
        try:
            when = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def clock(value: str | datetime | None, tz: tzinfo = UTC, *, date: bool = True) -> str:
    """``2026-12-04 16:45:02 UTC`` in ``tz``; without ``date``, ``16:45 UTC``; ``-`` for none."""
    if value is None or value == "":
        return "-"
    when = instant(value)
    if when is None:
        return str(value)
    when = when.astimezone(tz)
    zone_name = when.tzname() or ""
    if not date:
        return f"{when:%H:%M} {zone_name}".strip()
    return f"{when:%Y-%m-%d %H:%M:%S} {zone_name}".strip()


def local_zone() -> tzinfo:
    """The zone of the machine this process runs on (``TZ``, else the system's): the terminal's
    own, as ``date`` shows it there."""
    return datetime.now().astimezone().tzinfo or UTC


def slack(value: str | datetime | None, *, tokens: str = DATE_TOKENS) -> str:
    """A time as Slack's date formatting, ``<!date^UNIX^{tokens}|fallback>``: each reader sees
    it in their own zone; the fallback (UTC) is for clients that cannot. ``""`` for none."""
    if value is None or value == "":
        return ""
    when = instant(value)
    if when is None:
        return str(value)
    short = tokens == "{time}"
    fallback = when.astimezone(UTC).strftime("%H:%M UTC" if short else "%b %d %Y %H:%M UTC")
    return f"<!date^{int(when.timestamp())}^{tokens}|{fallback}>"


def duration(seconds: float | None) -> str:
    """``80`` -> ``1m 20s``; ``3900`` -> ``1h 5m``; ``45`` -> ``45s``; ``-`` for none."""
    if seconds is None:
        return "-"
    total = round(abs(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        parts = [(days, "d"), (hours, "h")]
    elif hours:
        parts = [(hours, "h"), (minutes, "m")]
    else:
        parts = [(minutes, "m"), (secs, "s")]
    text = " ".join(f"{n}{unit}" for n, unit in parts if n)
    return text or "0s"


def until(value: str | None, now: datetime | None) -> str:
    """How long from ``now`` until a stored time, as ``in 15s``; ``now`` when it is past."""
    when = instant(value)
    if when is None or now is None:
        return ""
    left = (when - now).total_seconds()
    return f"in {duration(left)}" if left >= 1 else "now"
