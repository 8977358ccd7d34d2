"""The EBS CSI attacher under load: at most ``attacher_rate`` attach/detach calls per second.

In a large event thousands of VolumeAttachments change at once, and the external-attacher and the
EBS driver behind it get through them slowly: the attacher's work queue and client rate limits,
the driver's EC2 request throttling (EC2 throttles mutating calls per account). The sandbox
models the sum of that as one token bucket (a failed call's back-off is ``attach_backoff``'s):
with ``attacher_rate=N`` (set by ``az-outage`` when its zone fails, so building the cluster is
not slowed) the attacher makes at most N AttachVolume/DetachVolume calls per simulated second,
with at most ten seconds' worth saved up; the bucket starts empty when the zone fails. A
VolumeAttachment the attacher has not got to yet simply waits, without an error: "still
detaching" is what a runbook sees for a while.
"""

from __future__ import annotations

from datetime import datetime

from bot.sim.controllers.context import Context

KEY = "attacher_rate"  # ctx.state: calls per simulated second, set when the throttle applies
BUCKET = "attacher_bucket"  # ctx.state: [tokens, when they were counted]


def throttle(ctx: Context, rate: float) -> None:
    """From now on, the attacher makes at most ``rate`` calls per second (bucket empty)."""
    if rate <= 0:
        raise ValueError(f"option attacher_rate={rate!r}: expected calls per second > 0")
    ctx.state[KEY] = rate
    ctx.state[BUCKET] = [0.0, ctx.now]


def take(ctx: Context) -> bool:
    """Spend one call if the bucket has it; False: the attacher does not get to it this pass."""
    rate = ctx.state.get(KEY)
    if not rate:
        return True
    tokens, since = ctx.state.setdefault(BUCKET, [0.0, ctx.now])
    now: datetime = ctx.now
    elapsed = max(0.0, (now - since).total_seconds())
    tokens = min(max(1.0, rate * 10), tokens + rate * elapsed)
    if tokens < 1:
        ctx.state[BUCKET] = [tokens, now]
        return False
    ctx.state[BUCKET] = [tokens - 1, now]
    return True
