"""Redaction of credentials from anything the clients record or raise.

API error texts can carry secrets: EC2's ``SignatureDoesNotMatch`` message quotes the canonical
request, session token included; an API server behind a misconfigured proxy may echo the
``Authorization`` header; a kubeconfig exec plugin's failure can print the token it fetched. Those
texts end up in exceptions, audit events and chat messages, so both clients pass every error
message and every recorded field through ``redact()`` first.
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # key=value / key: value pairs whose value is a credential (headers, query strings, INI, JSON)
    (re.compile(
        r"(?i)\b((?:x-amz-security-token|x-amz-signature|x-amz-credential|aws_secret_access_key|"
        r"aws_session_token|secretaccesskey|sessiontoken|secret[_-]?key|client[_-]?secret|"
        r"password|passwd|signature|token|authorization)\"?'?\s*[:=]\s*\"?'?)"
        r"((?:bearer|basic)\s+)?[^\s\"'&,;<>]+"),
     rf"\1\2{REDACTED}"),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"), rf"\1 {REDACTED}"),
    # AWS access key ids (long-term AKIA, temporary ASIA) and JSON web tokens (service accounts)
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), REDACTED),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]+"), REDACTED),
)


def redact(text: str) -> str:
    """``text`` with credentials replaced by ``<redacted>``; everything else is kept."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text
