"""Slack users map to identities and user groups resolve through the Web API, cached with a TTL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from slack_sdk import WebClient

from bot.engine.ports import ManualClock
from bot.errors import PermanentError, RetryableError
from bot.frontends.slack.identity import UserGroups, identity_for, user_id_of
from tests.fakes.slack_api import BOT_TOKEN, FakeSlack

GROUP = "S0SRE00001"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def fake(clock: ManualClock) -> Iterator[FakeSlack]:
    with FakeSlack(clock=clock) as f:
        f.set_usergroup(GROUP, ["U0ALICE001", "U0BOB00001"])
        yield f


@pytest.fixture
def groups(fake: FakeSlack, clock: ManualClock) -> UserGroups:
    return UserGroups(api=WebClient(token=BOT_TOKEN, base_url=fake.base_url), clock=clock, ttl=300)


def lookups(fake: FakeSlack) -> int:
    return len(fake.calls("usergroups.users.list"))


def test_a_slack_user_id_becomes_a_prefixed_identity_and_back() -> None:
    assert identity_for("U0ALICE001") == "slack:U0ALICE001"
    assert user_id_of("slack:U0ALICE001") == "U0ALICE001"
    assert user_id_of("term:alice") is None
    with pytest.raises(ValueError):
        identity_for("slack:U0ALICE001")


def test_a_group_resolves_to_the_identities_of_its_members(groups: UserGroups) -> None:
    assert groups.members(GROUP) == {"slack:U0ALICE001", "slack:U0BOB00001"}
    assert groups.is_member("slack:U0BOB00001", GROUP)
    assert not groups.is_member("slack:U0MALLORY1", GROUP)


def test_a_second_lookup_within_the_ttl_makes_no_call(groups: UserGroups, fake: FakeSlack,
                                                      clock: ManualClock) -> None:
    groups.members(GROUP)
    clock.advance(299)
    fake.set_usergroup(GROUP, ["U0ALICE001"])
    assert groups.is_member("slack:U0BOB00001", GROUP)  # still the cached membership
    assert lookups(fake) == 1


def test_a_lookup_after_the_ttl_calls_slack_again(groups: UserGroups, fake: FakeSlack,
                                                  clock: ManualClock) -> None:
    groups.members(GROUP)
    fake.set_usergroup(GROUP, ["U0ALICE001"])
    clock.advance(300)
    assert not groups.is_member("slack:U0BOB00001", GROUP)
    assert lookups(fake) == 2


def test_a_fresh_read_at_click_time_calls_slack_even_within_the_ttl(groups: UserGroups, fake: FakeSlack,
                                                                    clock: ManualClock) -> None:
    assert groups.is_member("slack:U0BOB00001", GROUP)
    fake.set_usergroup(GROUP, ["U0ALICE001"])  # Bob left the on-call group a minute ago
    clock.advance(60)
    assert not groups.is_member("slack:U0BOB00001", GROUP, fresh=True)
    assert lookups(fake) == 2
    assert not groups.is_member("slack:U0BOB00001", GROUP)  # the fresh read refreshed the cache
    assert lookups(fake) == 2


def test_an_unknown_group_is_a_permanent_error(groups: UserGroups) -> None:
    with pytest.raises(PermanentError) as caught:
        groups.members("S0NONE0001")
    assert caught.value.code == "no_such_subteam"


def test_a_rate_limited_fresh_read_fails_closed_with_a_retryable_error(groups: UserGroups,
                                                                       fake: FakeSlack) -> None:
    assert groups.is_member("slack:U0BOB00001", GROUP)
    fake.fail_next("usergroups.users.list", status=429, retry_after=20)
    with pytest.raises(RetryableError) as caught:
        groups.is_member("slack:U0BOB00001", GROUP, fresh=True)
    assert (caught.value.code, caught.value.retry_after) == ("ratelimited", 20.0)


def test_forgetting_a_group_makes_the_next_lookup_call_slack(groups: UserGroups, fake: FakeSlack) -> None:
    groups.members(GROUP)
    groups.forget(GROUP)
    groups.members(GROUP)
    assert lookups(fake) == 2
