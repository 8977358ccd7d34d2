"""The bot's one pattern set: each secret shape is caught on its own, typed or percent-encoded, by
the redactor of what people type and by the clients' alike; values the product needs are kept."""

from __future__ import annotations

import pytest

from bot.clients.redact import REDACTED as CLIENTS_MARKER
from bot.clients.redact import redact
from bot.engine.redaction import REDACTED, Redactor
from tests.frontends.slack.test_secret_shapes import KEPT, PEM, PEM_BODY, SECRETS


@pytest.mark.parametrize("name", SECRETS)
def test_each_secret_shape_is_redacted_alone_by_both_callers(name: str) -> None:
    typed, needles = SECRETS[name]
    text = f"before {typed} after"
    out = Redactor()(text)
    assert REDACTED in out and out.startswith("before ") and out.endswith(" after")
    assert not [n for n in needles if n in out]
    assert redact(text) == out and CLIENTS_MARKER == REDACTED
    assert Redactor()(out) == out  # redacting again changes nothing


def test_what_names_a_secret_is_kept_and_the_secret_replaced() -> None:
    r = Redactor()
    assert r("https://deploy:pw@git.example.com/x") == f"https://deploy:{REDACTED}@git.example.com/x"
    assert r("https://u:p@ss@h.example/x") == f"https://u:{REDACTED}@h.example/x"
    assert r("Authorization: Basic dXNlcjpwYXNz") == f"Authorization: Basic {REDACTED}"
    assert r("curl -H 'Authorization: Bearer abc.def-123'") == f"curl -H 'Authorization: Bearer {REDACTED}'"
    assert r("aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY") == (
        f"aws_secret_access_key={REDACTED}")
    assert r('{"password": "hunter2"}') == f'{{"password": "{REDACTED}"}}'
    assert r("Basic dXNlcjpwYXNz") == f"Basic {REDACTED}"  # base64 of user:pass, all letters
    assert r(f"key: {PEM[:80]}") == f"key: {REDACTED}"  # a block cut before its END line
    assert r("https%3A%2F%2Fu%3Apw%40h.example") == f"https://u:{REDACTED}@h.example"


def test_values_the_product_needs_are_kept() -> None:
    r = Redactor()
    for value in KEPT:
        assert r(value) == value
        assert redact(value) == value
    assert r("node ip-10-0-1-2.ec2.internal is 50%25 done%2C token-less") == (
        "node ip-10-0-1-2.ec2.internal is 50%25 done%2C token-less")


def test_mappings_lists_and_configured_patterns() -> None:
    r = Redactor([r"ticket-\d+", r"(?i)inc-\d+"])  # a global flag cannot join the others: still used
    got = r({"see ticket-42": ["INC-7", PEM, 3, None], "n": ("i-0abc",)})
    assert got == {f"see {REDACTED}": [REDACTED, REDACTED, 3, None], "n": ["i-0abc"]}
    assert not [line for line in PEM_BODY if line in str(got)]
