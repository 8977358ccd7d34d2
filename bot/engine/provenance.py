"""Where a run comes from and who answers for it: one model for every link a run carries.

A run records, when it starts, the run it follows on from (``parent``: a ``node-recovered`` run
names the ``node-dead-ngns`` run whose out-of-service taint it lifts), the incident it belongs to
(``incident``: an id, a Slack channel or a PagerDuty link, as people write it), and what suggested
it (``suggested_by``: ``alert:<ref>`` for an Alertmanager alert, ``diagnosis:<ref>`` for a
diagnosis). These are audited in one ``run.linked`` event, so a transcript's claims about them
verify with the chain. The run's owner (the incident commander) is its requester until someone
hands it over (``run.handed_over``); the requester stays on record as who started it.

What people type here is checked before anything is stored: a clear error names the field and
what would be valid.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from bot.errors import ParamError

INCIDENT_MAX = 200
REF_MAX = 200
SUGGESTERS = ("alert", "diagnosis", "watcher")  # watcher: the node watcher's card (docs/watcher.md)
# an id (INC-123), a channel (#inc-db or C0123), a link (https://acme.pagerduty.com/incidents/Q1)
_INCIDENT = re.compile(r"[A-Za-z0-9#][A-Za-z0-9 ._:/#?=&%+@~-]*")
_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/=@#+-]*")
_IDENTITY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:+-]{0,199}")


@dataclass(frozen=True)
class Provenance:
    """What a run is linked to when it starts; every field optional."""

    parent: str | None = None  # the run this one follows on from
    parent_why: str = ""  # how the parent was found, in words
    incident: str | None = None
    suggested_by: str | None = None  # alert:<ref>, diagnosis:<ref> or watcher:<ref>
    # when what suggested it first saw the trouble (ISO time: the node's Lease went stale, the
    # alert fired): where the run's time to recovery starts; recorded in ``run.linked``
    detected_at: str | None = None
    shown_at: str | None = None  # when the card offering the run was posted (ISO time)

    def __bool__(self) -> bool:
        return bool(self.parent or self.incident or self.suggested_by or self.detected_at
                    or self.shown_at)


def check_incident(text: str | None) -> str | None:
    """The incident reference as given (trimmed), or a ParamError saying what is valid."""
    if text is None:
        return None
    value = " ".join(text.split())
    if not value:
        return None
    if len(value) > INCIDENT_MAX:
        raise ParamError(f"incident: {len(value)} characters, at most {INCIDENT_MAX} are kept "
                         "(an id like INC-123, a Slack channel, or a PagerDuty link)")
    if not _INCIDENT.fullmatch(value):
        raise ParamError(f"incident: {value!r} has characters an incident reference does not "
                         "need; use letters, digits, spaces and . _ : / # ? = & % + @ ~ - "
                         "(an id like INC-123, a Slack channel, or a PagerDuty link)")
    return value


def check_suggested_by(text: str | None) -> str | None:
    """``alert:<ref>`` or ``diagnosis:<ref>`` as given, or a ParamError saying what is valid."""
    if text is None or not text.strip():
        return None
    kind, _, ref = text.strip().partition(":")
    if kind not in SUGGESTERS or not ref:
        raise ParamError(f"suggested_by: {text!r} is not a reference; expected "
                         f"{' or '.join(k + ':<ref>' for k in SUGGESTERS)}")
    if len(ref) > REF_MAX or not _REF.fullmatch(ref):
        raise ParamError(f"suggested_by: the {kind} reference {ref!r} must be 1 to {REF_MAX} "
                         "letters, digits or . _ : / = @ # + -")
    return f"{kind}:{ref}"


def check_detected_at(text: str | None, *, what: str = "detected_at") -> str | None:
    """An ISO-8601 time with its zone, normalised to UTC, or a ParamError saying what is valid."""
    if text is None or not text.strip():
        return None
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise ParamError(f"{what}: {text!r} is not an ISO-8601 time with its zone "
                         "(2026-01-01T00:00:00+00:00)")
    return when.astimezone(UTC).isoformat()


DETECTED_WITHIN = timedelta(hours=24)  # a reference's time further back is not believed


def detected_in(suggested_by: str | None, now: datetime | None = None) -> str | None:
    """When the thing that suggested a run noticed the trouble, where its reference says it: a
    node watcher's card writes ``watcher:<cluster>/<node>@<detected_at>``, so a run started by a
    click on it starts its time to recovery there too. None when the reference says no time, or
    (with ``now``) a time in the future or more than ``DETECTED_WITHIN`` before it: a reference
    can be typed (``--suggested-by``), so it may only shift the figure within what is plausible."""
    if not suggested_by or not suggested_by.startswith("watcher:") or "@" not in suggested_by:
        return None
    try:
        when = check_detected_at(suggested_by.rsplit("@", 1)[1])
    except ParamError:
        return None
    if when is not None and now is not None:
        at = datetime.fromisoformat(when)
        if at > now or now - at > DETECTED_WITHIN:
            return None
    return when


def check_identity(text: str, *, what: str = "the new owner") -> str:
    """A person's identity as the front-ends write it (``alice``, ``slack:U0123ABCD``)."""
    value = text.strip()
    if not _IDENTITY.fullmatch(value):
        raise ParamError(f"{what}: {text!r} is not a user; give a terminal user name or a "
                         "Slack user (slack:U0123ABCD, or @user in Slack)")
    return value


def suggested_words(ref: str | None) -> str:
    """``alert:KubeNodeNotReady/ab12`` as ``alert KubeNodeNotReady/ab12``, for cards and lines."""
    if not ref:
        return ""
    kind, _, rest = ref.partition(":")
    return f"{kind} {rest}"


# -- parents found from what a run left in place ------------------------------------------------

def out_of_service_hold(node: str) -> str:
    """The compensation a run records when it leaves the out-of-service taint on ``node``."""
    return (f"out-of-service taint still on {node}: run node-recovered when it is repaired "
            "and Ready")


# runbook -> the compensation it lifts, from its params: a run of it names the run holding
# that compensation as its parent
LIFTS: Mapping[str, Callable[[Mapping[str, Any]], str | None]] = {
    "node-recovered": lambda p: out_of_service_hold(str(p["node"])) if p.get("node") else None,
}


def lifted_hold(runbook: str, params: Mapping[str, Any]) -> str | None:
    """The compensation a run of ``runbook`` with ``params`` lifts, if any."""
    lifts = LIFTS.get(runbook)
    return lifts(params) if lifts is not None else None
