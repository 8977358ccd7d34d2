"""Block Kit helpers never produce a payload Slack would refuse."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from slack_sdk import WebClient

from bot.present.blockkit import (
    LIMITS,
    THREAD_POINTER,
    approve_button,
    button,
    confirm_dialog,
    limit_blocks,
    section,
    truncate,
)
from tests.fakes.blockkit_limits import validate_blocks, validate_view
from tests.fakes.slack_api import BOT_TOKEN, CHANNEL, FakeSlack


@pytest.fixture
def client() -> Iterator[tuple[WebClient, FakeSlack]]:
    with FakeSlack() as fake:
        yield WebClient(token=BOT_TOKEN, base_url=fake.base_url), fake


def test_short_text_is_left_alone() -> None:
    assert truncate("plan: taint ip-10-0-1-2", 3000) == "plan: taint ip-10-0-1-2"


@pytest.mark.parametrize("limit", [3000, 300, 75, 30])
def test_long_text_is_cut_to_the_limit_and_says_where_the_rest_is(limit: int) -> None:
    cut = truncate("x" * 10_000, limit)
    assert len(cut) <= limit
    assert cut.endswith(THREAD_POINTER) or cut.endswith("…")


def test_a_long_plan_section_ends_with_the_pointer_to_the_thread() -> None:
    block = section("line\n" * 2000)
    assert len(block["text"]["text"]) <= LIMITS["section_text"]
    assert block["text"]["text"].endswith(THREAD_POINTER)
    assert validate_blocks([block]) == []


def test_a_block_list_within_the_limit_is_unchanged() -> None:
    blocks = [section(str(i)) for i in range(50)]
    assert limit_blocks(blocks) == blocks


def test_a_long_block_list_keeps_the_head_and_collapses_the_tail_into_a_context_block() -> None:
    blocks = [section(f"step {i}") for i in range(80)]
    kept = limit_blocks(blocks)
    assert len(kept) == 50 and kept[:49] == blocks[:49]
    assert kept[-1]["type"] == "context"
    assert "31 more blocks" in kept[-1]["elements"][0]["text"]
    assert validate_blocks(kept) == []


def test_an_ordinary_step_is_approved_with_a_primary_button_and_no_dialog() -> None:
    b = approve_button(action_id="approve", value="run-1:2", destructive=False, summary="wait")
    assert b["style"] == "primary" and "confirm" not in b


def test_a_destructive_step_is_approved_with_a_danger_button_behind_a_confirm_dialog() -> None:
    b = approve_button(action_id="approve", value="run-1:3", destructive=True,
                       summary="Force-detach vol-0abc from stopped i-0def. " * 20)
    assert b["style"] == "danger" and b["confirm"]["style"] == "danger"
    assert len(b["confirm"]["text"]["text"]) <= LIMITS["confirm_text"]
    assert validate_blocks([{"type": "actions", "elements": [b]}]) == []


def test_over_long_labels_are_cut_but_over_long_ids_and_values_are_refused() -> None:
    assert len(button(text="x" * 200, action_id="a")["text"]["text"]) == LIMITS["button_text"]
    assert len(confirm_dialog(title="t" * 200, text="x", confirm="c" * 99)["confirm"]["text"]) == 30
    with pytest.raises(ValueError, match="action_id"):
        button(text="Approve", action_id="a" * 256)
    with pytest.raises(ValueError, match="value"):
        button(text="Approve", action_id="a", value="v" * 2001)
    with pytest.raises(ValueError, match="style"):
        button(text="Approve", action_id="a", style="secondary")


def test_the_validator_names_the_failing_field_with_a_json_pointer() -> None:
    errors = validate_blocks([section("ok"), {"type": "section", "text": {"type": "mrkdwn",
                                                                         "text": "x" * 3001}}])
    assert errors == ["must be less than 3001 characters [json-pointer:/blocks/1/text/text]"]


def test_a_modal_title_over_24_characters_is_reported() -> None:
    view: dict[str, Any] = {"type": "modal", "title": {"type": "plain_text", "text": "x" * 25},
                            "blocks": []}
    assert validate_view(view) == ["must be less than 25 characters [json-pointer:/view/title/text]"]


def test_what_the_helpers_build_is_accepted_by_the_fake_slack(client: tuple[WebClient, FakeSlack]) -> None:
    web, fake = client
    blocks = [section("p" * 5000) for _ in range(70)]
    blocks.append({"type": "actions", "elements": [
        approve_button(action_id="approve", value="run-1:3", destructive=True, summary="s" * 900)]})
    assert web.chat_postMessage(channel=CHANNEL, text="card", blocks=limit_blocks(blocks))["ok"]
    assert len(fake.messages(CHANNEL)[0]["blocks"]) == 50
