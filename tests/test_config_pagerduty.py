"""The ``pagerduty:`` section: from the file, from the environment (secrets from files too), and
never shown in a repr or an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import settings_from_mapping
from bot.errors import ConfigError

SECRET = "pd-webhook-secret-0123456789abcdef"


def test_the_section_from_the_file_and_the_environment(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("pd-token-from-a-file-0123\n")
    s = settings_from_mapping({"pagerduty": {"from_email": "bot@example.com",
                                             "webhook_secrets": ["old-secret-0123456789abcdef"]}},
                              {"RUNBOOK_BOT_PAGERDUTY_WEBHOOK_SECRET": f"{SECRET}, second-secret-0123456789",
                               "RUNBOOK_BOT_PAGERDUTY_TOKEN_FILE": str(token_file)})
    pd = s.pagerduty
    assert pd.webhook_secrets == (SECRET, "second-secret-0123456789")  # the environment wins
    assert pd.api_token == "pd-token-from-a-file-0123" and pd.posts_notes and pd.enabled
    assert pd.api_url == "https://api.pagerduty.com"
    assert SECRET not in repr(s) and "pd-token-from-a-file" not in repr(s)
    assert not settings_from_mapping({}, {}).pagerduty.enabled


@pytest.mark.parametrize(("section", "says"), [
    ({"webhook_secrets": ["short-secret"]}, "pagerduty.webhook_secrets[0]: string should have at least 16"),
    ({"api_token": "tiny"}, "pagerduty.api_token: string should have at least 8"),
    ({"from_email": "not an email"}, "pagerduty.from_email"),
    ({"api_url": "ftp://x"}, "pagerduty.api_url"),
    ({"token": "x"}, "pagerduty.token: unknown key"),
])
def test_a_bad_value_names_its_key_and_never_the_secret(section: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError) as e:
        settings_from_mapping({"pagerduty": section}, {})
    assert says in str(e.value), str(e.value)
    assert "short-secret" not in str(e.value) and "tiny" not in str(e.value)
