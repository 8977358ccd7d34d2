"""Redaction of secrets: the bot's one set of secret patterns and its one marker, ``[REDACTED]``.

A token pasted as a param or into a rejection reason would otherwise be stored in the run, its
steps and its audit chain, exported into transcripts, uploaded into Slack and drawn on the run
card. So the runner passes every value a person gives through one ``Redactor`` before anything
else sees it (what is stored is what runs: a redacted param stays redacted), and the audit chain
redacts its payloads again before hashing, for text that comes from elsewhere. The transcript
redacts the Slack thread it merges in, and the cluster and EC2 clients redact API error texts and
their records (``bot.clients.redact``) with the same patterns and marker.

The built-in patterns (``redact_patterns`` in the config adds more, each match replaced whole):

- Slack tokens (``xoxb-``, ``xoxp-``, ``xapp-``...), GitHub tokens (``ghp_``, ``gho_``, ``ghu_``,
  ``ghs_``, ``ghr_``, ``github_pat_``), AWS access key ids (``AKIA``/``ASIA``), JSON web tokens;
- PEM private key blocks, from ``-----BEGIN ... PRIVATE KEY-----`` to their END line (or to the
  end of the text when it was cut off);
- the password of a URL, ``scheme://user:[REDACTED]@host`` (user and host are kept);
- ``Bearer`` and ``Basic`` credentials, and the value of a credential named by its key or header
  (``password=``, ``token:``, ``Authorization:``, ``aws_secret_access_key=``,
  ``X-Amz-Security-Token:``...): the name is kept, the value replaced;
- any of these percent-encoded, as copied from a URL (``Authorization%3A%20Bearer%20...``): a run of
  URL text holding one is decoded and redacted.

Values the product needs are left alone: node names (``ip-10-0-1-2.ec2.internal``), instance and
volume ids, ARNs, Kubernetes names, durations, zones, URLs without a password.

Pure: no I/O; ``redact(redact(x)) == redact(x)``.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

REDACTED = "[REDACTED]"

# names of credentials written as key=value or key: value (query strings, headers, INI, JSON)
_CREDENTIAL_KEYS = (
    r"x-amz-security-token|x-amz-signature|x-amz-credential|aws_secret_access_key|aws_session_token"
    r"|secretaccesskey|sessiontoken|secret[_-]?key|client[_-]?secret|password|passwd|signature"
    r"|(?:access|refresh|id|auth|api|private)[_-]?token|api[_-]?key|token|authorization"
)
_TOKEN_CHARS = r"[A-Za-z0-9._~+/=-]"


def _basic(m: re.Match[str]) -> str:
    """``Basic`` and its credential redacted, unless what follows is a word of prose."""
    value = m.group(2)
    if value.isalpha():  # "basic troubleshooting"; but dXNlcjpwYXNz is base64 of user:pass
        try:
            decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True).decode()
        except (binascii.Error, ValueError):  # not base64, or not text
            return m.group(0)
        if ":" not in decoded or not decoded.isprintable():
            return m.group(0)
    return f"{m.group(1)} {REDACTED}"


Replacement = str | Callable[[re.Match[str]], str]

# (pattern, replacement), applied in this order: what names the secret (the header, the key, the
# user and host of a URL) is kept where a replacement keeps its groups
BUILTIN_PATTERNS: tuple[tuple[str, Replacement], ...] = (
    # PEM private key blocks, whole; a block cut before its END line, to the end of the text
    (r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
     r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)", REDACTED),
    # the password of a URL: scheme://user:password@host (up to the authority's last @)
    (r"(\b[A-Za-z][A-Za-z0-9+.-]{0,30}://[^\s/?#@:]*:)[^\s/?#]+(?=@)", rf"\g<1>{REDACTED}"),
    # credentials named by their key or header; an Authorization header keeps its scheme
    (rf"(?i:\b((?:{_CREDENTIAL_KEYS})[\"']?\s*[:=]\s*[\"']?)((?:bearer|basic|token)\s+)?"
     r"[^\s\"'&,;<>]+)", rf"\g<1>\g<2>{REDACTED}"),
    # Bearer and Basic credentials on their own (a header pasted without its name)
    (rf"(?i:\b(bearer)[\s+]+{_TOKEN_CHARS}{{8,}})", rf"\g<1> {REDACTED}"),
    (r"(?i:\b(basic)[\s+]+([A-Za-z0-9+/]{8,}={0,2}))(?![A-Za-z0-9+/=])", _basic),
    # Slack, GitHub and AWS tokens, JSON web tokens
    (r"\bxox[abposre]-[A-Za-z0-9-]{6,}", REDACTED),
    (r"\bxapp-[A-Za-z0-9-]{6,}", REDACTED),
    (r"\bgh[pousr]_[A-Za-z0-9]{20,}", REDACTED),
    (r"\bgithub_pat_[A-Za-z0-9_]{20,}", REDACTED),
    (r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b", REDACTED),
    (r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*", REDACTED),
)

# what every match of a built-in pattern contains, in lower case, and a percent-escape: text
# without any of these is left alone at the cost of one search (most text holds no secret)
_TRIGGERS = re.compile("|".join([re.escape(a) for a in (
    "-----begin ", "://", "token", "password", "passwd", "signature", "secret", "authorization",
    "credential", "api_key", "api-key", "apikey", "bearer", "basic", "xox", "xapp-", "ghp_", "gho_",
    "ghu_", "ghs_", "ghr_", "github_pat_", "akia", "asia", "eyj")] + ["%[0-9a-f]{2}"]))
# a run of URL text (percent-escapes are looked for in each), and a sequence of escapes
_RUN = re.compile(r"[^\s\"'<>]+")
_ESCAPES = re.compile(r"(?:%[0-9A-Fa-f]{2})+")


def _unquote(text: str) -> str:
    """``text`` with its percent-escapes decoded (as UTF-8)."""
    return _ESCAPES.sub(lambda m: bytes.fromhex(m.group(0).replace("%", "")).decode(
        "utf-8", "replace"), text)


class Redactor:
    """Replaces secrets (the built-in patterns and ``extra_patterns``) in every string of a value:
    strings, the keys and values of mappings, the items of lists and tuples."""

    def __init__(self, extra_patterns: Iterable[str] = ()) -> None:
        self._builtin = tuple((re.compile(p), r) for p, r in BUILTIN_PATTERNS)
        self._extra = tuple(re.compile(p) for p in extra_patterns)
        self._keys: dict[str, str] = {}  # mapping keys repeat: each is redacted once

    def text(self, text: str) -> str:
        """``text`` with every secret in it replaced by ``[REDACTED]``."""
        if not _TRIGGERS.search(text.lower()):
            for extra in self._extra:
                text = extra.sub(REDACTED, text)
            return text
        text = self._plain(text)
        if _ESCAPES.search(text):
            text = _RUN.sub(self._encoded, text)
        return text

    def _plain(self, text: str) -> str:
        for rule, replacement in self._builtin:
            text = rule.sub(replacement, text)
        for extra in self._extra:
            text = extra.sub(REDACTED, text)
        return text

    def _key(self, key: object) -> str:
        text = str(key)
        clean = self._keys.get(text)
        if clean is None:
            if len(self._keys) > 4096:
                self._keys.clear()
            clean = self._keys[text] = self.text(text)
        return clean

    def _encoded(self, m: re.Match[str]) -> str:
        """A run of URL text, decoded and redacted if a secret was percent-encoded in it."""
        raw = decoded = m.group(0)
        for _ in range(2):  # encoded once, or twice (a URL inside a query string)
            if not _ESCAPES.search(decoded):
                break
            decoded = _unquote(decoded)
            clean = self._plain(decoded)
            if clean != decoded:
                return clean
        return raw

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self._key(k): self(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self(v) for v in value]
        return value
