"""Redaction of secrets from what people type: params, reasons and notes, where they enter.

A token pasted as a param or into a rejection reason would otherwise be stored in the run, its
steps and its audit chain, exported into transcripts, uploaded into Slack and drawn on the run
card. So the runner passes every value a person gives through one ``Redactor`` before anything
else sees it (what is stored is what runs: a redacted param stays redacted), and the audit chain
redacts its payloads again before hashing, for text that comes from elsewhere. The built-in
patterns cover Slack, AWS and bearer tokens; ``redact_patterns`` in the config adds more.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "[REDACTED]"

# Slack bot/app/user tokens, AWS access key ids, bearer tokens, AWS secret keys after a label.
BUILTIN_PATTERNS = (
    r"xox[abposr]-[A-Za-z0-9-]{6,}",
    r"xapp-[A-Za-z0-9-]{6,}",
    r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b",
    r"[Bb]earer\s+[A-Za-z0-9._~+/=-]{8,}",
    r"(?<=aws_secret_access_key=)[A-Za-z0-9/+=]{40}",
)


class Redactor:
    """Replaces tokens and configured patterns in every string of a payload."""

    def __init__(self, extra_patterns: Iterable[str] = ()) -> None:
        self._regex = re.compile("|".join(f"(?:{p})" for p in (*BUILTIN_PATTERNS, *extra_patterns)))

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._regex.sub(REDACTED, value)
        if isinstance(value, Mapping):
            return {str(k): self(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self(v) for v in value]
        return value
