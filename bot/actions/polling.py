"""How often a long wait polls: every 15 s for its first two minutes, then every 30 s, never past
its deadline.

A zone outage waits on tens of machines and volumes at once, in several steps and several runs,
while the EBS CSI controller, the attach/detach controller and the node groups recover through the
same APIs. A zone-scale event must not become an API-throttling event: EC2 throttles the Describe
calls per account (``RequestLimitExceeded``, which slows every caller, the CSI driver's detaches
included) and the API server sheds lists under priority and fairness. Most stops and detaches
finish in the first two minutes (a healthy guest stops in about a minute, a forced stop of a hung
one at EC2's OS-shutdown timeout, a detach from a stopped instance in seconds), so a wait polls
quickly while an answer is likely and half as often after that: one still going after two minutes
is a stuck host or a throttled controller, which an answer 15 s later does not make worse.

One place, so every long wait of the bot backs off the same way: the zone's VolumeAttachment
wait, the zone batch's stop wait, the EC2 detach waits.
"""

from __future__ import annotations

from datetime import datetime

FAST_SECONDS = 15.0  # the interval of EC2's own instance-stopped and volume-available waiters
SLOW_SECONDS = 30.0
FAST_FOR_SECONDS = 120.0
MIN_SECONDS = 1.0  # a wait never spins, even a moment before its deadline


def poll_interval(*, started: datetime | None, now: datetime,
                  deadline: datetime | None = None) -> float:
    """Seconds until a wait that began at ``started`` checks again: 15 s in its first two
    minutes, 30 s after; the last check falls on ``deadline``, not after it (or a second from
    now, when the deadline is closer than that or already past: a wait never spins)."""
    elapsed = (now - started).total_seconds() if started is not None else 0.0
    interval = FAST_SECONDS if elapsed < FAST_FOR_SECONDS else SLOW_SECONDS
    if deadline is not None:
        interval = min(interval, max(MIN_SECONDS, (deadline - now).total_seconds()))
    return interval
