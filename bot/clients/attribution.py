"""Who a run's AWS calls are made for, as CloudTrail records it: the run's STS session.

With a cluster ``role_arn``, every EC2 write of a run is made with credentials of its own
``sts:AssumeRole`` session: ``SourceIdentity`` is the run id (CloudTrail keeps it on every call of
the session and it cannot be changed inside it), ``RoleSessionName`` names the run, and session
tags name the requester and the people whose approval let the write go ahead. A new session is
assumed only when that set of approvers changes, so a run approved by the same people throughout
has one session. The cluster's shared session (reads, ``DryRun`` checks, ``config check``) is
attributed too (``SharedSession``): its ``SourceIdentity`` and requester tag name the bot, or the
person running ``config check``. The role's trust policy (deploy/role-trust-policy.json) refuses
any AssumeRole without a ``SourceIdentity`` and the requester tag, or with a tag key that is not
the bot's (``runbook-bot-*``), so no session of the role is ever unattributed.

This module turns a run's people into what STS accepts, within its documented limits: at most 50
session tags, keys of 1-128 and values of 0-256 characters of letters, digits, spaces and
``_ . : / = + - @``; ``SourceIdentity`` and ``RoleSessionName`` of 2-64 characters of
``[A-Za-z0-9_+=,.@-]``, and a ``SourceIdentity`` may not start with ``aws:``. Characters outside
those sets become ``_``; nothing here imports an SDK.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

MAX_TAGS = 50
MAX_KEY = 128
MAX_VALUE = 256
MAX_IDENTITY = 64
SESSION_PREFIX = "runbook-bot-"
TAG_RUN = "runbook-bot-run"
TAG_REQUESTER = "runbook-bot-requester"
TAG_APPROVER = "runbook-bot-approver-"  # + 1, 2, ...
TAG_MORE = "runbook-bot-approvers-not-tagged"  # how many approvers did not fit
# the run and requester tags, and one for the count of approvers that did not fit
MAX_APPROVER_TAGS = MAX_TAGS - 3
TAG_PREFIX = "runbook-bot-"  # every session tag key the bot sets starts with it
REQUIRED_TAGS = (TAG_REQUESTER,)  # on every session, as the shipped trust policy requires
BOT_IDENTITY = "runbook-bot"  # whom the shared session acts for: the bot itself

_IDENTITY_CHAR = re.compile(r"[^A-Za-z0-9_+=,.@-]")


def _tag_char(ch: str) -> str:
    """``ch`` if STS allows it in a tag (``[\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]``), else ``_``."""
    cat = unicodedata.category(ch)
    return ch if cat[0] in "LZN" or ch in "_.:/=+-@" else "_"


def tag_value(text: str) -> str:
    return "".join(_tag_char(c) for c in text)[:MAX_VALUE]


def identity_text(text: str) -> str:
    """``text`` as a ``SourceIdentity`` / ``RoleSessionName`` may carry it (2-64 allowed chars)."""
    # ":" is not among them, so the reserved "aws:" prefix cannot appear
    return _IDENTITY_CHAR.sub("_", text)[:MAX_IDENTITY].ljust(2, "_")


@dataclass(frozen=True)
class Attribution:
    """A run and the people its next AWS write is made for."""

    run_id: str
    requester: str
    approvers: tuple[str, ...] = ()  # sorted, each once

    @classmethod
    def of(cls, *, run_id: str, requester: str, approvers: tuple[str, ...] | list[str]) -> Attribution:
        return cls(run_id=run_id, requester=requester, approvers=tuple(sorted(set(approvers))))

    @property
    def source_identity(self) -> str:
        return identity_text(self.run_id)

    @property
    def session_name(self) -> str:
        return identity_text(SESSION_PREFIX + self.run_id)

    def tags(self) -> list[dict[str, str]]:
        """The session tags, in STS's ``[{"Key", "Value"}]`` form, never more than 50."""
        tags = [{"Key": TAG_RUN, "Value": tag_value(self.run_id)},
                {"Key": TAG_REQUESTER, "Value": tag_value(self.requester)}]
        shown = self.approvers[:MAX_APPROVER_TAGS]
        tags += [{"Key": f"{TAG_APPROVER}{n}", "Value": tag_value(who)}
                 for n, who in enumerate(shown, start=1)]
        if len(self.approvers) > len(shown):
            tags.append({"Key": TAG_MORE, "Value": str(len(self.approvers) - len(shown))})
        return tags


@dataclass(frozen=True)
class SharedSession:
    """The cluster's shared session of its ``role_arn``: reads and ``DryRun`` checks, made for no
    run in particular; ``requester`` is the bot, or the person running ``config check``."""

    cluster: str
    requester: str = BOT_IDENTITY

    @property
    def source_identity(self) -> str:
        return identity_text(self.requester)

    @property
    def session_name(self) -> str:
        return identity_text(SESSION_PREFIX + self.cluster)

    def tags(self) -> list[dict[str, str]]:
        return [{"Key": TAG_REQUESTER, "Value": tag_value(self.requester)}]
