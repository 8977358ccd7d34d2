"""Who is at the terminal: the account of the process's real uid, never an environment variable.

``getpass.getuser()`` reads ``LOGNAME``, ``USER``, ``LNAME`` and ``USERNAME`` before it asks the
system, so ``LOGNAME=bob runbook-bot approve RUN`` would approve as bob. Here the name comes from
the password database entry of ``os.getuid()`` (an account with no entry, as in a container run
with an arbitrary uid, is ``uid:N``). ``--as USER`` is honoured only where the config sets
``policy.allow_impersonation`` (demos and tests), and never for a Slack identity: the terminal
cannot speak for someone Slack vouched for.

Every terminal command also records where it was typed (``whereabouts``): the front-end, the uid,
the host and the tty, in its audit event. That tells a reviewer which account and machine acted;
it does not prove which person sat there, which is what docs/security.md ("What terminal approval
is worth") spells out.
"""

from __future__ import annotations

import os
import pwd
import socket
from typing import Any

from bot.config import PolicyConfig
from bot.errors import PolicyError

SLACK_PREFIXES = ("slack:", "slack-group:")


def os_user() -> str:
    """The login name of the real uid, from the password database; ``uid:N`` if it has none."""
    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid:{uid}"


def _tty() -> str | None:
    for fd in (0, 1, 2):
        try:
            return os.ttyname(fd).removeprefix("/dev/")  # pts/3: the terminal, not a host path
        except OSError:
            continue
    return None


def whereabouts(*, as_user: str | None = None) -> dict[str, Any]:
    """Where a terminal command came from, for its audit event."""
    where: dict[str, Any] = {"frontend": "terminal", "uid": os.getuid(), "os_user": os_user(),
                             "host": socket.gethostname(), "tty": _tty()}
    if as_user:
        where["as"] = as_user
    return where


def terminal_identity(policy: PolicyConfig, as_user: str | None) -> str:
    """The person at the keyboard: the OS account, or ``--as`` where the config allows it."""
    if not as_user:
        return os_user()
    if not policy.allow_impersonation:
        raise PolicyError("--as USER is refused: it needs policy.allow_impersonation: true in "
                          "the config (meant for demos and tests, never production)")
    if as_user.startswith(SLACK_PREFIXES):
        raise PolicyError(f"--as {as_user} is refused: the terminal cannot act as a Slack "
                          "identity; Slack users act from Slack")
    return as_user
