"""Who may start which runbook, and from where (``policy.start``, a runbook's ``starters``),
decided once in ``Runtime.start``; every refusal is in the refusals chain, which verifies.

On fake actions and a real store (tests/fakes/engine_harness.py): no sandbox, no Slack.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from bot.config import PolicyConfig, StartRule
from bot.engine.approvals import config_membership
from bot.engine.commands import StartRun
from bot.engine.starting import start_refusal
from bot.runbook.loader import load_text
from bot.runtime.facade import Origin, Refused, Runtime
from tests.fakes.engine_harness import make_engine, runbook
from tests.fakes.engine_world import POLICY

__all__ = ["make_engine"]

CHANGE = runbook("change-it", """
- id: change
  title: Set it
  action: fake.set
  with: {name: "web-1", value: "on"}
""")
# a runbook that asks for its own starters: dba (erin) within the config's groups, ops outside
NARROW = CHANGE.replace("change-it", "narrow-it").replace("spec:\n", "  starters: [dba]\nspec:\n", 1)
WIDEN = CHANGE.replace("change-it", "widen-it").replace("spec:\n", "  starters: [ops]\nspec:\n", 1)
PLAIN = CHANGE.replace("change-it", "plain-it")
TEXTS = {"change-it": CHANGE, "narrow-it": NARROW, "widen-it": WIDEN, "plain-it": PLAIN}
INCIDENT, OTHER = "C0INCIDENT", "C0OTHER"
SLACK = Origin("slack", INCIDENT)


def runtime_with(make_engine: Any, start: dict[str, StartRule] | None) -> tuple[Any, Runtime]:
    policy = replace(POLICY, groups={**POLICY.groups, "ops": ("frank",)}, start=start)
    e = make_engine(TEXTS, policy=policy)
    return e, Runtime(e.runner, refusals=e.db.refusals)


def start(runtime: Runtime, name: str, by: str, origin: Origin | None = SLACK,
          dry_run: bool = False) -> str:
    return runtime.start(StartRun(runbook=name, params={}, requester=by, dry_run=dry_run,
                                  origin={"frontend": origin.frontend if origin else "terminal"}),
                         origin=origin).run_id


def refused(runtime: Runtime, name: str, by: str, origin: Origin | None = SLACK,
            dry_run: bool = False) -> str:
    with pytest.raises(Refused) as e:
        start(runtime, name, by, origin, dry_run)
    return e.value.reason


def test_with_no_start_policy_anyone_may_start_any_runbook_as_before(make_engine: Any) -> None:
    e, runtime = runtime_with(make_engine, None)
    for who, origin in (("mallory", SLACK), ("mallory", None), ("slack:U0NOBODY", SLACK)):
        assert start(runtime, "change-it", who, origin)
    assert e.db.refusals.rows() == []


def test_someone_outside_the_groups_cannot_start_and_is_told_what_is_needed(
        make_engine: Any) -> None:
    e, runtime = runtime_with(make_engine, {"*": StartRule(groups=("sre",))})
    assert refused(runtime, "change-it", "mallory") == (
        f"starting change-it needs a member of sre (you are mallory, in channel {INCIDENT})")
    assert "needs a member of sre" in refused(runtime, "change-it", "mallory", dry_run=True)
    assert start(runtime, "change-it", "slack:UALICE")  # alice through her alias
    assert start(runtime, "change-it", "bob", None)  # a member from the terminal
    [plain, dry] = e.db.refusals.rows()
    assert (plain.actor, plain.what) == ("mallory", "start change-it")
    assert dry.what == "start change-it (dry run)"
    assert plain.via == {"frontend": "slack", "channel": INCIDENT}
    assert len(e.db.runs(limit=10)) == 2  # the refused ones started nothing


def test_a_channel_rule_refuses_other_channels_and_requests_from_nowhere(make_engine: Any) -> None:
    e, runtime = runtime_with(make_engine, {
        "change-it": StartRule(groups=("sre",), channels=(INCIDENT,)),
        "*": StartRule(channels=(INCIDENT,))})
    assert start(runtime, "change-it", "bob")
    assert refused(runtime, "change-it", "bob", Origin("slack", OTHER)) == (
        f"starting change-it needs a member of sre, from channel {INCIDENT} "
        f"(you are bob, in channel {OTHER})")
    assert start(runtime, "change-it", "bob", None)  # groups and channels: a member outside Slack
    # channels alone: anyone in the channel, nobody outside Slack (the terminal, the API)
    assert start(runtime, "plain-it", "mallory")
    assert refused(runtime, "plain-it", "alice", Origin("api")) == (
        f"starting plain-it needs from channel {INCIDENT} in Slack (you are alice, outside Slack)")
    assert "from channel" in refused(runtime, "plain-it", "alice", None)
    assert "from channel" in refused(runtime, "plain-it", "mallory", Origin("slack", OTHER))
    assert [r.via.get("frontend") for r in e.db.refusals.rows()] == [
        "slack", "api", "terminal", "slack"]


def test_a_runbooks_starters_narrow_who_may_start_it_but_never_widen_it(make_engine: Any) -> None:
    _, runtime = runtime_with(make_engine, {"*": StartRule(groups=("sre", "dba"))})
    assert start(runtime, "narrow-it", "erin")  # dba: within the config's groups
    assert refused(runtime, "narrow-it", "bob").startswith("starting narrow-it needs a member "
                                                           "of dba")  # sre, narrowed out
    # ops is outside the config's groups: the runbook cannot let frank in
    assert "a member of sre or dba" in refused(runtime, "widen-it", "frank")
    assert start(runtime, "widen-it", "bob")
    # with no start: at all, a runbook's starters still narrow "anyone"
    _, open_runtime = runtime_with(make_engine, None)
    assert "needs a member of dba" in refused(open_runtime, "narrow-it", "bob")


def test_no_rule_for_a_runbook_and_no_star_means_nobody(make_engine: Any) -> None:
    _, runtime = runtime_with(make_engine, {"narrow-it": StartRule()})
    assert "policy.start names neither it nor '*'" in refused(runtime, "change-it", "alice")


AUTO = """apiVersion: runbook-bot/v1
kind: Runbook
metadata: {name: look, title: Look}
spec:
  auto_run: true
  triggers:
    - alertname: NodeDown
  steps:
    - {id: say, title: Say, action: notify, with: {message: hi}}
"""


def test_an_alerts_system_actor_starts_only_read_only_auto_runs_whatever_the_policy() -> None:
    policy = PolicyConfig(groups={"sre": ("bob",)}, start={"*": StartRule(groups=("sre",))})
    member = config_membership(policy)
    look = load_text(AUTO, file="look.yaml", catalog=None)
    writes = load_text(AUTO.replace("auto_run: true", "auto_run: false"), file="w.yaml",
                       catalog=None)
    assert start_refusal(runbook=look, requester="system:alert:NodeDown/abc", channel=None,
                         policy=policy, membership=member) is None
    why = start_refusal(runbook=writes, requester="system:alert:NodeDown/abc", channel=None,
                        policy=policy, membership=member)
    assert why is not None and "needs a person" in why
    assert start_refusal(runbook=look, requester="mallory", channel=None, policy=policy,
                         membership=member) is not None  # a person still needs the rule


def test_the_config_names_a_start_rule_that_is_wrong() -> None:
    from bot.config import settings_from_mapping
    from bot.errors import ConfigError

    policy = {"groups": {"sre": ["alice"]}}
    with pytest.raises(ConfigError, match=r"^policy: start.\*: groups nope are not defined in "
                                          r"policy.groups$"):
        settings_from_mapping({"policy": {**policy, "start": {"*": {"groups": ["nope"]}}}}, {})
    with pytest.raises(ConfigError, match=r"^policy.start.x.group: unknown key; valid keys here: "
                                          r"groups, channels$"):
        settings_from_mapping({"policy": {**policy, "start": {"x": {"group": ["sre"]}}}}, {})
    assert settings_from_mapping({}, {}).policy.start is None  # no start: anyone, as before


def test_a_run_started_from_a_watcher_card_starts_its_time_to_recovery_when_the_node_went(
        ) -> None:
    from bot.engine.provenance import detected_in

    ref = "watcher:prod/ip-10-0-1-2.ec2.internal@2026-12-04T21:00:00+00:00"
    assert detected_in(ref) == "2026-12-04T21:00:00+00:00"
    assert detected_in("watcher:prod/ip-10-0-1-2.ec2.internal") is None  # no time: none
    assert detected_in("watcher:prod/x@not-a-time") is None
    assert detected_in("alert:abc@2026-12-04T21:00:00+00:00") is None  # only the watcher's
    # a reference can be typed (--suggested-by): its time is believed only within a day before
    # the run starts, never after it
    now = datetime(2026, 12, 4, 21, 5, tzinfo=UTC)
    assert detected_in(ref, now) == "2026-12-04T21:00:00+00:00"
    assert detected_in("watcher:prod/n1@2020-01-01T00:00:00+00:00", now) is None
    assert detected_in("watcher:prod/n1@2026-12-04T22:00:00+00:00", now) is None
