"""Durations as people write them in runbooks (``30s``, ``6m``, ``1h30m``), parsed to seconds."""

from __future__ import annotations

import re

DURATION_PATTERN = r"^(?=\d)(\d+d)?(\d+h)?(\d+m)?(\d+s)?$"
_RE = re.compile(DURATION_PATTERN)
_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text: object) -> float:
    """Return seconds for ``30s`` / ``6m`` / ``1h`` / ``1h30m``; raise ValueError naming the format.

    A number is taken as seconds: a duration param reaches a ``with`` value already parsed.
    """
    if isinstance(text, int | float) and not isinstance(text, bool):
        if text < 0 or text != text or text == float("inf"):
            raise ValueError(f"a duration must be a finite number of seconds >= 0, got {text!r}")
        return float(text)
    if not isinstance(text, str):
        raise ValueError(
            f"expected a duration such as 30s, 6m or 1h (a quoted string), got {text!r}"
        )
    s = text.strip()
    match = _RE.match(s)
    if not match or not s:
        raise ValueError(f"expected a duration such as 30s, 6m or 1h, got {text!r}")
    total = 0
    for part in match.groups():
        if part:
            total += int(part[:-1]) * _UNITS[part[-1]]
    return float(total)


def format_duration(seconds: float) -> str:
    """Inverse of parse_duration for whole seconds: 390 -> ``6m30s``."""
    rest = round(seconds)
    if rest == 0:
        return "0s"
    out = []
    for unit, size in _UNITS.items():
        if rest >= size:
            out.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(out)
