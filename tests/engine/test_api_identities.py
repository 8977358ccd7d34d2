"""Identities the API authenticates (``k8s:``, ``oidc:``, ``token:``) meet the engine's rules: one
person under two methods is one person (``policy.aliases``), and the bot's own ServiceAccount is a
system actor. The identities come from the real authenticator, as the API hands them on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from bot.config import PolicyConfig, settings_from_mapping
from bot.frontends.api.auth import build_authenticator
from tests.fakes.engine_harness import runbook

SSO_ALICE = "arn:aws:sts::111122223333:assumed-role/AWSReservedSSO_SRE_0123456789abcdef/alice"
USERS = {"alice-kube": SSO_ALICE, "bob-kube": "bob",
         "bot-sa": "system:serviceaccount:runbook-bot:runbook-bot"}


def _review(token: str, audiences: Sequence[str]) -> Mapping[str, Any]:
    return {"authenticated": True, "audiences": list(audiences),
            "user": {"username": USERS[token], "groups": ["system:authenticated"]}}


def _identity(token: str) -> str:
    settings = settings_from_mapping({"clusters": {"prod": {}}, "api": {"kubernetes": {
        "cluster": "prod", "pinned_session_roles": ["AWSReservedSSO_*"]}}}, {})
    auth = build_authenticator(settings, token_reviewer=_review)
    return auth.authenticate({"authorization": f"Bearer {token}"}).identity


ALICE_K8S = _identity("alice-kube")
BOT_SA = _identity("bot-sa")
POLICY = PolicyConfig(groups={"sre": ("slack:UALICE", "slack:UBOB", "carol", ALICE_K8S, BOT_SA)},
                      aliases={ALICE_K8S: "slack:UALICE", "oidc:alice@example.com": "slack:UALICE"})


def book(n: int = 1) -> dict[str, str]:
    return {"b": runbook("b", f"""
- id: change
  title: Set x
  action: fake.set
  with: {{name: x, value: "on"}}
  approval: {{min_approvers: {n}}}
""", approvals="groups: [sre]\n")}


def test_the_requester_cannot_approve_their_own_run_under_an_alias_through_the_api(make_engine):
    e = make_engine(book(), policy=POLICY)
    run = e.start("b", by="slack:UALICE")  # started in Slack...
    out = e.approve(run, ALICE_K8S)  # ... approved through the API with her kubeconfig
    assert not out.ok and "cannot approve" in out.message
    assert e.world.effects == []
    assert e.event(run, "command.refused")[0]["actor"] == ALICE_K8S


def test_one_person_under_two_methods_counts_once_towards_a_quorum(make_engine):
    e = make_engine(book(n=2), policy=POLICY)
    run = e.start("b", by="carol")
    assert e.approve(run, ALICE_K8S).ok
    again = e.approve(run, "oidc:alice@example.com")
    assert not again.ok and "never counts twice" in again.message
    assert e.world.effects == []
    assert e.approve(run, "slack:UBOB").ok
    assert e.state(run).status == "succeeded"


@pytest.mark.parametrize("how", ["approve", "break_glass"])
def test_the_bots_own_service_account_never_approves_even_when_listed(make_engine, how):
    assert BOT_SA.startswith("system:")
    e = make_engine(book(), policy=POLICY)
    if how == "break_glass":
        e.world.lock("x")
    run = e.start("b", by="carol")
    out = getattr(e, how)(run, BOT_SA)
    assert not out.ok and "never approves a step or breaks glass" in out.message
    assert e.world.effects == []
