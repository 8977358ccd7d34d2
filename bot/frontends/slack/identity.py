"""Who a Slack user is to the engine, and which Slack user groups they belong to.

The engine decides who may approve; the Slack layer only names people. A Slack user becomes the
identity ``slack:U123`` (the id, never the changeable display name), and a Slack user group
(``S…``) resolves to the identities of its members through ``usergroups.users.list``. That method
is Tier 2 (about 20 calls a minute), so membership is cached with a TTL on the injected clock;
an approval click forces a fresh read, because someone removed from the on-call group an hour
ago must not approve a destructive step on a stale cache. A fresh read that fails raises rather
than fall back to the cache: an approval that cannot be checked is not granted.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from slack_sdk.errors import SlackApiError

from bot.engine.ports import Clock
from bot.errors import ExternalError, PermanentError, RetryableError

PREFIX = "slack:"
_RETRYABLE = frozenset({"ratelimited", "rate_limited", "internal_error", "fatal_error",
                        "service_unavailable", "request_timeout"})


def identity_for(user_id: str) -> str:
    """``U123`` -> ``slack:U123``."""
    if not user_id or user_id.startswith(PREFIX):
        raise ValueError(f"not a Slack user id: {user_id!r}")
    return PREFIX + user_id


def user_id_of(identity: str) -> str | None:
    """``slack:U123`` -> ``U123``; None for identities from other front-ends."""
    return identity[len(PREFIX):] if identity.startswith(PREFIX) else None


class UsergroupsApi(Protocol):
    """The one Web API call this module makes; slack_sdk's WebClient satisfies it."""

    def usergroups_users_list(self, *, usergroup: str) -> Any: ...


@dataclass(frozen=True)
class _Entry:
    members: frozenset[str]
    fetched_at: datetime


def _translate(e: SlackApiError, usergroup: str) -> ExternalError:
    response = e.response
    code = str(response.get("error", "")) if response is not None else ""
    message = f"cannot read members of Slack user group {usergroup}: {code or e}"
    kwargs = {"service": "slack", "operation": "usergroups.users.list", "code": code}
    if code in _RETRYABLE or (response is not None and response.status_code >= 500):
        retry_after = None
        if response is not None and response.headers.get("Retry-After"):
            retry_after = float(response.headers["Retry-After"])
        return RetryableError(message, retry_after=retry_after, **kwargs)
    return PermanentError(message, **kwargs)


class UserGroups:
    """Slack user-group membership as identities, cached for ``ttl`` seconds of ``clock``."""

    def __init__(self, *, api: UsergroupsApi, clock: Clock, ttl: float = 300.0) -> None:
        self._api = api
        self._clock = clock
        self._ttl = ttl
        self._cache: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def members(self, usergroup: str, *, fresh: bool = False) -> frozenset[str]:
        """Identities (``slack:U…``) in the group; ``fresh=True`` skips the cache."""
        now = self._clock.now()
        with self._lock:
            entry = self._cache.get(usergroup)
        if not fresh and entry is not None and (now - entry.fetched_at).total_seconds() < self._ttl:
            return entry.members
        try:
            response = self._api.usergroups_users_list(usergroup=usergroup)
        except SlackApiError as e:
            raise _translate(e, usergroup) from e
        members = frozenset(identity_for(u) for u in response["users"])
        with self._lock:
            self._cache[usergroup] = _Entry(members, now)
        return members

    def is_member(self, identity: str, usergroup: str, *, fresh: bool = False) -> bool:
        return identity in self.members(usergroup, fresh=fresh)

    def forget(self, usergroup: str | None = None) -> None:
        """Drop cached membership (all groups when None), e.g. on a subteam_members_changed event."""
        with self._lock:
            if usergroup is None:
                self._cache.clear()
            else:
                self._cache.pop(usergroup, None)
