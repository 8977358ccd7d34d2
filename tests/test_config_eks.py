"""A cluster reached with EKS tokens (``auth: eks``): what the config file must say, and what it
may not say alongside."""

from __future__ import annotations

import os

import pytest

from bot.config import settings_from_mapping
from bot.errors import ConfigError

EKS = {"auth": "eks", "server": "https://ABC.gr7.eu-west-1.eks.amazonaws.com",
       "certificate_authority": "~/ca/prod.crt", "region": "eu-west-1",
       "role_arn": "arn:aws:iam::444455556666:role/runbook-bot", "eks_cluster": "prod-eu-1"}


def test_an_eks_cluster_is_read_with_its_server_ca_and_role() -> None:
    s = settings_from_mapping({"clusters": {"prod": EKS, "home": {}}}, {})
    prod, home = s.cluster("prod"), s.cluster("home")
    assert (prod.auth, prod.server, prod.certificate_authority, prod.eks_name) == (
        "eks", EKS["server"], os.path.expanduser("~/ca/prod.crt"), "prod-eu-1")
    assert home.auth == "kubeconfig" and home.server is None


@pytest.mark.parametrize(("extra", "said"), [
    ({"server": None}, "auth: eks needs server and certificate_authority"),
    ({"certificate_authority": None}, "auth: eks needs server and certificate_authority"),
    ({"kubeconfig": "/etc/kubeconfig"}, "without a kubeconfig or context"),
    ({"auth": "kubeconfig"}, "they go with it"),
    ({"auth": "iam"}, "clusters.prod.auth: must be one of 'kubeconfig' or 'eks'"),
])
def test_an_incomplete_or_mixed_eks_cluster_is_refused(extra: dict[str, object], said: str) -> None:
    cluster = {k: v for k, v in {**EKS, **extra}.items() if v is not None}
    with pytest.raises(ConfigError, match=said):
        settings_from_mapping({"clusters": {"prod": cluster}}, {})
