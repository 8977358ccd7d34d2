"""The requests a step's recorded calls stand for, for tests that count them.

A read served again from the pass's shared reads is recorded with the outcome ``cached``: it is
in the audit, but no request was made, so counts of requests leave it out.
"""

from __future__ import annotations

from collections.abc import Iterable

from bot.engine.plan import ApiCall


def sent(calls: Iterable[ApiCall]) -> list[str]:
    """The operations of the calls that went out, in order."""
    return [c.operation for c in calls if c.outcome != "cached"]
