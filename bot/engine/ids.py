"""Run ids short enough to read aloud on a bridge call and type on a phone: ``rb-7k3qa``.

The alphabet drops characters that sound or look alike (0/o, 1/l/i, 5/s, 2/z, u/v), so "rb seven k
three q" is unambiguous over a bad line. 5 characters of 25 give ~9.8 million ids; the store rejects
a collision and the caller draws again.
"""

from __future__ import annotations

import re
import secrets
from typing import NewType

RunId = NewType("RunId", str)
StepId = NewType("StepId", str)
Identity = NewType("Identity", str)

ALPHABET = "346789abcdefghjkmnpqrtwxy"
LENGTH = 5
PREFIX = "rb-"
_PATTERN = re.compile(rf"^{PREFIX}[{ALPHABET}]{{{LENGTH}}}$")


def new_run_id() -> RunId:
    return RunId(PREFIX + "".join(secrets.choice(ALPHABET) for _ in range(LENGTH)))


def parse_run_id(text: str) -> RunId:
    """Normalise what a person typed (case, spaces, missing prefix); ValueError if not an id."""
    cleaned = text.strip().lower().replace(" ", "")
    if not cleaned.startswith(PREFIX):
        cleaned = PREFIX + cleaned
    if not _PATTERN.match(cleaned):
        raise ValueError(f"{text!r} is not a run id (like rb-7k3qa)")
    return RunId(cleaned)
