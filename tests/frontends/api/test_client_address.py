"""The API's caller address behind proxies: ``X-Forwarded-For`` counts only from a trusted proxy,
read from the right, so a client cannot pick the address its requests are limited by."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
    ("10.0.3.4", "10.0.1.1, 10.0.9.9", "10.0.3.4"),            # every hop trusted: the proxy
    ("::ffff:10.0.3.4", "198.51.100.1", "198.51.100.1"),       # a dual-stack socket's IPv4 peer
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
    h.app.api.failures.burst = h.app.api.failures.rate = 1  # one bad credential each, then 429

    def refused_from(client: str) -> int:  # the harness's requests come from 10.0.0.9
        before = len(h.refusals)
        status, _, _ = h.call("GET", "/api/v1/runs", who="nobody-at-all",
                              headers={"HTTP_X_FORWARDED_FOR": client})
        assert status in (401, 429)
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


def test_a_flood_of_bad_tokens_is_429_before_any_is_checked_and_records_a_bounded_number(
        tmp_path: Path) -> None:
    h = Harness(tmp_path / "b")
    checked: list[str] = []
    inner = h.app.api.auth

    class Counting:
        def authenticate(self, headers: Any) -> Any:
            checked.append(headers.get("authorization", ""))
            return inner.authenticate(headers)

    h.app.api.auth = Counting()
    answers = [h.call("GET", "/api/v1/runs", who=f"junk-{i}")[0] for i in range(200)]
    assert answers[:10] == [401] * 10 and set(answers[10:]) == {429}
    assert len(checked) == 10 and len(h.refusals) == 10  # no TokenReview, no row past the burst
    # one IPv6 host is one /64: rotating addresses inside it does not reset the count
    v6 = [h.call("GET", "/api/v1/runs", who="junk", headers={"REMOTE_ADDR": f"2001:db8::{i:x}"})[0]
          for i in range(1, 40)]
    assert v6.count(401) == 10 and v6.count(429) == 29
    # a good token from a flooded address waits too, and is served once the bucket refills
    assert h.call("GET", "/api/v1/runs")[0] == 429
    h.now[0] += 2.0
    assert h.call("GET", "/api/v1/runs")[0] == 200
    h.app.close()
    h.db.close()
