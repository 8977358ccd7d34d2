"""``/runbook break-glass`` names the number of nodes an override of the out-of-service cap allows."""

from __future__ import annotations

import pytest

from bot.frontends.slack.slash import UsageError, parse


def test_break_glass_takes_the_number_of_nodes_before_the_reason():
    cmd = parse("break-glass rb-7k3qa --nodes 12 zone outage INC-4411 declared")
    assert (cmd.verb, cmd.nodes, cmd.reason) == ("break-glass", 12, "zone outage INC-4411 declared")
    plain = parse("break-glass rb-7k3qa the lock is stale")
    assert plain.nodes is None and plain.reason == "the lock is stale"


@pytest.mark.parametrize("text", ["break-glass rb-7k3qa --nodes twelve outage",
                                  "break-glass rb-7k3qa --nodes 0 outage",
                                  "break-glass rb-7k3qa --nodes"])
def test_a_number_of_nodes_that_is_not_one_is_a_usage_error(text):
    with pytest.raises(UsageError, match="number of nodes"):
        parse(text)
