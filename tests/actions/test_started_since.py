"""A fence's LaunchTime rule at EC2's precision: LaunchTime is given to the second, so a launch
in the second the fence began may have come after it, and counts as a start since."""

from __future__ import annotations

from datetime import UTC, datetime

from bot.actions.ec2_views import started_since

BEGAN = datetime(2026, 1, 1, 0, 12, 0, 200000, tzinfo=UTC)  # the fence began applying


def _inst(launch: str, state: str = "running") -> dict[str, object]:
    return {"InstanceId": "i-1", "State": {"Name": state}, "LaunchTime": launch}


def test_a_launch_in_the_second_the_fence_began_counts_as_started_since() -> None:
    assert started_since(_inst("2026-01-01T00:12:00.000Z"), BEGAN) == "2026-01-01T00:12:00.000Z"
    assert started_since(_inst("2026-01-01T00:12:01.000Z"), BEGAN) is not None
    assert started_since(_inst("2026-01-01T00:11:59.000Z"), BEGAN) is None  # the boot before
    assert started_since(_inst("2026-01-01T00:12:00.000Z", "stopping"), BEGAN) is None
