"""Redaction of credentials from anything the clients record or raise.

API error texts can carry secrets: EC2's ``SignatureDoesNotMatch`` message quotes the canonical
request, session token included; an API server behind a misconfigured proxy may echo the
``Authorization`` header; a kubeconfig exec plugin's failure can print the token it fetched. Those
texts end up in exceptions, audit events and chat messages, so both clients pass every error
message and every recorded field through ``redact()`` first. The patterns and the marker are the
bot's one set (``bot.engine.redaction``), the same that redacts what people type.
"""

from __future__ import annotations

from bot.engine.redaction import REDACTED, Redactor

__all__ = ["REDACTED", "redact"]

_REDACTOR = Redactor()


def redact(text: str) -> str:
    """``text`` with credentials replaced by ``[REDACTED]``; everything else is kept."""
    return _REDACTOR.text(text)
