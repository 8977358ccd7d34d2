"""The sandbox's API server answers TokenReviews as a real one does, so the API's Kubernetes
authentication runs end to end: the bot's ``KubeClient`` (with the bot's own ServiceAccount token,
allowed by deploy/rbac.yaml) asks who a token is, for the audience ``runbook-bot``."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import pytest

from bot.clients.kube import KubeClient
from bot.config import settings_from_mapping
from bot.engine.approvals import is_system
from bot.frontends.api.auth import Caller, Unauthenticated, build_authenticator
from bot.sim.authz import ADMIN_TOKEN, BOT_TOKEN
from bot.sim.sandbox import BOT_CONTEXT


def test_token_reviews_of_sandbox_users_and_service_accounts_honour_audiences(pool: Any) -> None:
    sb = pool.get("stuck-terminating")
    authz = sb.api.authorizer
    for_bot = authz.issue_token("ci", "deployer", audiences=("runbook-bot",))
    for_cluster = authz.issue_token("ci", "deployer")
    kube = KubeClient.from_config(kubeconfig=str(sb.kubeconfig_path), context=BOT_CONTEXT)
    try:
        review = kube.create_token_review
        # a user's (audience-agnostic) token: for the API server's audience, not the bot's
        admin = review(ADMIN_TOKEN, [])
        assert admin["authenticated"] and admin["user"]["username"] == "kubernetes-admin"
        assert "system:masters" in admin["user"]["groups"]
        assert not review(ADMIN_TOKEN, ["runbook-bot"])["authenticated"]
        # a ServiceAccount token issued for runbook-bot: for runbook-bot only
        sa = review(for_bot, ["runbook-bot"])
        assert sa["authenticated"] and sa["audiences"] == ["runbook-bot"]
        assert sa["user"]["username"] == "system:serviceaccount:ci:deployer"
        assert not review(for_bot, [])["authenticated"]
        # ... and it is no credential for the cluster itself
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(urllib.request.Request(
                sb.k8s_url + "/api/v1/nodes", headers={"Authorization": f"Bearer {for_bot}"}),
                context=sb.tls_context(), timeout=10)
        e.value.close()
        assert e.value.code == 401
        # one issued without an audience is for the cluster, not the bot
        assert not review(for_cluster, ["runbook-bot"])["authenticated"]
        assert review(for_cluster, [])["authenticated"]
        assert not review("not-a-token", [])["authenticated"]

        settings = settings_from_mapping({"clusters": {"sandbox": {}}, "api": {"kubernetes": {
            "cluster": "sandbox", "service_accounts": ["ci:deployer"]}}}, {})
        auth = build_authenticator(settings, token_reviewer=review)
        assert auth.authenticate({"authorization": f"Bearer {for_bot}"}) == Caller(
            "k8s:system:serviceaccount:ci:deployer",
            ("k8s:system:serviceaccounts", "k8s:system:serviceaccounts:ci",
             "k8s:system:authenticated"), "kubernetes")
        with pytest.raises(Unauthenticated, match="does not accept this token"):
            auth.authenticate({"authorization": f"Bearer {for_cluster}"})
        bot = build_authenticator(settings_from_mapping({"clusters": {"sandbox": {}}, "api": {
            "kubernetes": {"cluster": "sandbox", "audiences": []}}}, {}), token_reviewer=review)
        assert is_system(bot.authenticate({"authorization": f"Bearer {BOT_TOKEN}"}).identity)
    finally:
        kube.close()
