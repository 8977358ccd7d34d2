"""The API's caller address behind proxies: ``X-Forwarded-For`` counts only from a trusted proxy,
read from the right, so a client cannot pick the address its requests are limited by."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import settings_from_mapping
from bot.errors import ConfigError
from bot.frontends.api.clientaddr import client_address, networks
from tests.frontends.api.test_api_app import Harness

LB = networks(["10.0.0.0/16"])


@pytest.mark.parametrize("remote, header, seen", [
    ("203.0.113.9", "198.51.100.1", "203.0.113.9"),            # not from a proxy: header ignored
    ("10.0.3.4", "198.51.100.1", "198.51.100.1"),              # from the load balancer
    ("10.0.3.4", "6.6.6.6, 198.51.100.1", "198.51.100.1"),     # a client-written hop is skipped
    ("10.0.3.4", "198.51.100.1, 10.0.9.9", "198.51.100.1"),    # two trusted hops
    ("10.0.3.4", "10.0.1.1, 10.0.9.9", "10.0.1.1"),            # every hop trusted: the first
    ("10.0.3.4", "not-an-address", "10.0.3.4"),                # unreadable: the proxy itself
    ("10.0.3.4", None, "10.0.3.4"),
])
def test_the_address_is_the_last_one_a_trusted_proxy_saw(remote: str, header: str | None,
                                                         seen: str) -> None:
    assert client_address(remote, header, LB) == seen
    assert client_address(remote, header, ()) == remote  # no proxy trusted: never the header


def test_behind_a_trusted_proxy_each_client_has_its_own_bucket_and_a_forged_header_none(
        tmp_path: Path) -> None:
    h = Harness(tmp_path / "a")
    h.app.api.trusted = networks(["10.0.0.0/16"])
    h.app.api.limiter.burst = h.app.api.limiter.rate = 1  # one bad credential each, then quiet

    def refused_from(client: str) -> int:  # the harness's requests come from 10.0.0.9
        before = len(h.refusals)
        status, _, _ = h.call("GET", "/api/v1/runs", who="nobody-at-all",
                              headers={"HTTP_X_FORWARDED_FOR": client})
        assert status == 401
        return len(h.refusals) - before

    assert refused_from("198.51.100.1") == 1
    assert refused_from("198.51.100.2") == 1  # another client behind the same proxy: recorded
    assert refused_from("198.51.100.1") == 0  # the first one's bucket is empty: not recorded again
    # a client writing another address in front of the proxy's hop does not get a fresh bucket
    assert refused_from("192.0.2.77, 198.51.100.1") == 0
    h.app.close()
    h.db.close()


def test_a_trusted_proxy_that_is_not_a_network_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"trusted_proxies.*10\.0\.0\.0/99.*not an address"):
        settings_from_mapping({"api": {"tokens": {}, "trusted_proxies": ["10.0.0.0/99"]}}, {},
                              source="bot.yaml")
