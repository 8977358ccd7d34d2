"""The fake Slack Web API answers the real slack_sdk WebClient the way Slack does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler
from slack_sdk.webhook import WebhookClient

from bot.engine.ports import ManualClock
from tests.fakes.slack_api import BOT_TOKEN, BOT_USER_ID, CHANNEL, PRIVATE_CHANNEL, FakeSlack


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def fake(clock: ManualClock) -> Iterator[FakeSlack]:
    with FakeSlack(clock=clock) as f:
        yield f


@pytest.fixture
def client(fake: FakeSlack) -> WebClient:
    return WebClient(token=BOT_TOKEN, base_url=fake.base_url)


def error_of(call: Any) -> str:
    with pytest.raises(SlackApiError) as caught:
        call()
    return str(caught.value.response["error"])


def section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def button(**overrides: Any) -> dict[str, Any]:
    return {"type": "button", "text": {"type": "plain_text", "text": "Approve"},
            "action_id": "approve", "value": "run-1", **overrides}


def test_auth_test_names_the_team_the_bot_user_and_the_bot(client: WebClient) -> None:
    r = client.auth_test()
    assert (r["team_id"], r["user_id"], r["bot_id"]) == ("T0FAKE0001", BOT_USER_ID, "B0BOT00001")
    assert r["url"].endswith(".slack.com/")


def test_a_posted_message_is_stored_and_echoed_in_slacks_response_shape(
    client: WebClient, fake: FakeSlack
) -> None:
    r = client.chat_postMessage(channel=CHANNEL, text="run started", blocks=[section("*card*")])
    assert r["channel"] == CHANNEL and r["message"]["ts"] == r["ts"]
    assert r["message"]["bot_id"] == "B0BOT00001" and r["message"]["blocks"] == [section("*card*")]
    [stored] = fake.messages(CHANNEL)
    assert stored["ts"] == r["ts"] and stored["text"] == "run started"
    assert fake.calls("chat.postMessage")[0].token == BOT_TOKEN


def test_thread_replies_are_read_back_with_conversations_replies_page_by_page(
    client: WebClient, fake: FakeSlack
) -> None:
    parent = client.chat_postMessage(channel=CHANNEL, text="card")["ts"]
    for i in range(4):
        client.chat_postMessage(channel=CHANNEL, text=f"step {i}", thread_ts=parent)
    fake.post_as_user(CHANNEL, "U0HUMAN001", "looks good", thread_ts=parent)
    # The SDK's iterator follows next_cursor and reuses one response object, so read as it goes.
    pages = [[m["text"] for m in page["messages"]]
             for page in client.conversations_replies(channel=CHANNEL, ts=parent, limit=2)]
    assert pages == [["card", "step 0"], ["step 1", "step 2"], ["step 3", "looks good"]]
    texts = [t for page in pages for t in page]
    assert [m["text"] for m in fake.thread(CHANNEL, parent)] == texts
    assert [m["text"] for m in fake.messages(CHANNEL)] == ["card"]
    assert fake.message(CHANNEL, parent)["reply_count"] == 5


def test_replies_of_an_unknown_thread_and_a_bad_cursor_are_refused(client: WebClient) -> None:
    assert error_of(lambda: client.conversations_replies(channel=CHANNEL, ts="1.2")) == "thread_not_found"
    ts = client.chat_postMessage(channel=CHANNEL, text="card")["ts"]
    assert error_of(lambda: client.conversations_replies(
        channel=CHANNEL, ts=ts, cursor="bm9wZQ==")) == "invalid_cursor"


def test_a_private_channel_history_needs_groups_history(fake: FakeSlack) -> None:
    fake.add_token("xoxb-public-only", scopes=("chat:write", "channels:history"))
    c = WebClient(token="xoxb-public-only", base_url=fake.base_url)
    ts = c.chat_postMessage(channel=PRIVATE_CHANNEL, text="card")["ts"]
    with pytest.raises(SlackApiError) as caught:
        c.conversations_replies(channel=PRIVATE_CHANNEL, ts=ts)
    assert caught.value.response["error"] == "missing_scope"
    assert caught.value.response["needed"] == "groups:history"


def test_update_edits_in_place_and_keeps_every_revision(client: WebClient, fake: FakeSlack) -> None:
    ts = client.chat_postMessage(channel=CHANNEL, text="waiting 0/3")["ts"]
    r = client.chat_update(channel=CHANNEL, ts=ts, text="waiting 1/3")
    assert r["ts"] == ts and r["message"]["text"] == "waiting 1/3"
    assert [m["text"] for m in fake.revisions(CHANNEL, ts)] == ["waiting 0/3", "waiting 1/3"]
    assert len(fake.messages(CHANNEL)) == 1 and "edited" in fake.message(CHANNEL, ts)


def test_update_of_another_tokens_message_or_an_ephemeral_is_refused(
    client: WebClient, fake: FakeSlack
) -> None:
    fake.add_token("xoxb-other-app", scopes=("chat:write",), user_id="U0OTHER001", bot_id="B0OTHER01")
    other = WebClient(token="xoxb-other-app", base_url=fake.base_url)
    ts = other.chat_postMessage(channel=CHANNEL, text="not yours")["ts"]
    assert error_of(lambda: client.chat_update(channel=CHANNEL, ts=ts, text="x")) == "cant_update_message"
    eph = client.chat_postEphemeral(channel=CHANNEL, user="U0HUMAN001", text="only you")["message_ts"]
    assert error_of(lambda: client.chat_update(channel=CHANNEL, ts=eph, text="x")) == "message_not_found"


def test_ephemerals_are_stored_per_user_and_not_in_the_channel(client: WebClient, fake: FakeSlack) -> None:
    r = client.chat_postEphemeral(channel=CHANNEL, user="U0HUMAN001", text="you may not approve")
    [eph] = fake.ephemerals("U0HUMAN001")
    assert eph["ts"] == r["message_ts"] and eph["text"] == "you may not approve"
    assert fake.messages(CHANNEL) == [] and fake.ephemerals("U0SOMEONE1") == []


def test_a_message_needs_a_known_channel_and_some_content(client: WebClient) -> None:
    assert error_of(lambda: client.chat_postMessage(channel="C0NOWHERE1", text="x")) == "channel_not_found"
    with pytest.warns(UserWarning, match="text"):  # the SDK warns too; Slack refuses
        assert error_of(lambda: client.chat_postMessage(channel=CHANNEL)) == "no_text"


MODAL = {"type": "modal", "title": {"type": "plain_text", "text": "Run node-dead-ngns"},
         "submit": {"type": "plain_text", "text": "Run"}, "callback_id": "run-params",
         "blocks": [{"type": "input", "block_id": "node", "label": {"type": "plain_text", "text": "Node"},
                     "element": {"type": "plain_text_input", "action_id": "value"}}]}


def test_views_open_uses_a_trigger_once(client: WebClient, fake: FakeSlack) -> None:
    trigger = fake.new_trigger_id(user="U0HUMAN001")
    view = client.views_open(trigger_id=trigger, view=MODAL)["view"]
    assert view["id"].startswith("V") and view["callback_id"] == "run-params"
    assert view["state"] == {"values": {}} and view["hash"]
    assert fake.views()[0]["user"] == "U0HUMAN001"
    assert error_of(lambda: client.views_open(trigger_id=trigger, view=MODAL)) == "exchanged_trigger_id"
    assert error_of(lambda: client.views_open(trigger_id="1.2.nope", view=MODAL)) == "invalid_trigger_id"


def test_a_trigger_expires_after_three_seconds_of_the_fakes_clock(
    client: WebClient, fake: FakeSlack, clock: ManualClock
) -> None:
    fresh, stale = fake.new_trigger_id(), fake.new_trigger_id()
    clock.advance(2.9)
    assert client.views_open(trigger_id=fresh, view=MODAL)["ok"] is True
    clock.advance(0.2)
    assert error_of(lambda: client.views_open(trigger_id=stale, view=MODAL)) == "expired_trigger_id"


def test_views_update_replaces_a_view_and_checks_its_hash(client: WebClient, fake: FakeSlack) -> None:
    view = client.views_open(trigger_id=fake.new_trigger_id(), view=MODAL)["view"]
    errors = {**MODAL, "title": {"type": "plain_text", "text": "Fix the params"}}
    updated = client.views_update(view_id=view["id"], hash=view["hash"], view=errors)["view"]
    assert updated["id"] == view["id"] and updated["title"]["text"] == "Fix the params"
    stale = lambda: client.views_update(view_id=view["id"], hash="old", view=MODAL)  # noqa: E731
    assert error_of(stale) == "hash_conflict"
    assert error_of(lambda: client.views_update(view_id="V0MISSING", view=MODAL)) == "not_found"


def test_usergroups_users_list_answers_configured_groups_only(client: WebClient, fake: FakeSlack) -> None:
    fake.set_usergroup("S0SRE00001", ["U0ALICE001", "U0BOB00001"])
    assert client.usergroups_users_list(usergroup="S0SRE00001")["users"] == ["U0ALICE001", "U0BOB00001"]
    assert error_of(lambda: client.usergroups_users_list(usergroup="S0NONE0001")) == "no_such_subteam"


def test_users_info_answers_configured_users(client: WebClient, fake: FakeSlack) -> None:
    fake.add_user("U0ALICE001", name="alice", real_name="Alice Chen", display_name="alice.c")
    user = client.users_info(user="U0ALICE001")["user"]
    assert (user["id"], user["name"], user["real_name"]) == ("U0ALICE001", "alice", "Alice Chen")
    assert user["profile"]["display_name"] == "alice.c"
    assert error_of(lambda: client.users_info(user="U0NOBODY01")) == "user_not_found"


def test_files_upload_v2_uploads_the_bytes_and_shares_them_into_the_thread(
    client: WebClient, fake: FakeSlack
) -> None:
    parent = client.chat_postMessage(channel=CHANNEL, text="card")["ts"]
    r = client.files_upload_v2(channel=CHANNEL, thread_ts=parent, content="# Transcript\n",
                               filename="run-1.md", title="Transcript of run-1",
                               initial_comment="Transcript attached")
    assert r["file"]["title"] == "Transcript of run-1"
    [upload] = fake.uploads
    assert upload.content == b"# Transcript\n" and upload.filename == "run-1.md"
    assert (upload.channel, upload.thread_ts) == (CHANNEL, parent)
    reply = fake.thread(CHANNEL, parent)[-1]
    assert reply["files"][0]["id"] == upload.file_id and reply["text"] == "Transcript attached"
    assert [c.method for c in fake.calls() if c.method.startswith("files.")] == [
        "files.getUploadURLExternal", "files.completeUploadExternal"]


def test_completing_an_upload_that_never_happened_is_refused(client: WebClient) -> None:
    assert error_of(lambda: client.files_completeUploadExternal(
        files=[{"id": "F0NEVER001", "title": "x"}], channel_id=CHANNEL)) == "file_not_found"


def test_a_429_without_a_retry_handler_surfaces_with_retry_after(client: WebClient, fake: FakeSlack) -> None:
    fake.fail_next("chat.postMessage", status=429, retry_after=30)
    with pytest.raises(SlackApiError) as caught:
        client.chat_postMessage(channel=CHANNEL, text="x")
    assert caught.value.response.status_code == 429
    assert caught.value.response["error"] == "ratelimited"
    assert caught.value.response.headers["Retry-After"] == "30"


def test_calls_inside_the_retry_after_window_are_refused_until_the_clock_passes_it(
    client: WebClient, fake: FakeSlack, clock: ManualClock
) -> None:
    fake.fail_next("chat.postMessage", status=429, retry_after=30)
    for _ in range(2):
        assert error_of(lambda: client.chat_postMessage(channel=CHANNEL, text="x")) == "ratelimited"
    clock.advance(30)
    assert client.chat_postMessage(channel=CHANNEL, text="x")["ok"] is True
    assert len(fake.messages(CHANNEL)) == 1


def test_the_sdk_rate_limit_retry_handler_retries_a_429_and_the_message_posts_once(
    fake: FakeSlack,
) -> None:
    client = WebClient(token=BOT_TOKEN, base_url=fake.base_url,
                       retry_handlers=[RateLimitErrorRetryHandler(max_retry_count=2)])
    fake.fail_next("chat.postMessage", status=429, retry_after=0)
    assert client.chat_postMessage(channel=CHANNEL, text="survived")["ok"] is True
    assert [c.status for c in fake.calls("chat.postMessage")] == [429, 200]
    assert [m["text"] for m in fake.messages(CHANNEL)] == ["survived"]


def test_an_injected_server_error_is_answered_as_given(client: WebClient, fake: FakeSlack) -> None:
    fake.fail_next("users.info", status=200, error="fatal_error", retry_after=None)
    assert error_of(lambda: client.users_info(user="U0ANY00001")) == "fatal_error"


def test_a_bad_token_gets_invalid_auth_and_no_token_gets_not_authed(fake: FakeSlack) -> None:
    bad = WebClient(token="xoxb-forged", base_url=fake.base_url)
    assert error_of(bad.auth_test) == "invalid_auth"
    assert error_of(lambda: bad.chat_postMessage(channel=CHANNEL, text="x")) == "invalid_auth"
    assert error_of(WebClient(base_url=fake.base_url).auth_test) == "not_authed"
    assert fake.messages(CHANNEL) == []


def test_a_token_without_the_scope_gets_missing_scope_with_needed_and_provided(fake: FakeSlack) -> None:
    fake.add_token("xoxb-no-groups", scopes=("chat:write",))
    c = WebClient(token="xoxb-no-groups", base_url=fake.base_url)
    with pytest.raises(SlackApiError) as caught:
        c.usergroups_users_list(usergroup="S0SRE00001")
    body = caught.value.response
    assert (body["error"], body["needed"], body["provided"]) == ("missing_scope", "usergroups:read",
                                                                 "chat:write")


LONG_ID = "x" * 256
OVER_LIMIT_BLOCKS = {
    "51 blocks": [section(str(i)) for i in range(51)],
    "section text 3001": [section("x" * 3001)],
    "button text 76": [{"type": "actions",
                        "elements": [button(text={"type": "plain_text", "text": "x" * 76})]}],
    "button value 2001": [{"type": "actions", "elements": [button(value="x" * 2001)]}],
    "action_id 256": [{"type": "actions", "elements": [button(action_id=LONG_ID)]}],
    "block_id 256": [{**section("x"), "block_id": LONG_ID}],
    "button style": [{"type": "actions", "elements": [button(style="secondary")]}],
    "confirm title 101": [{"type": "actions", "elements": [button(confirm={
        "title": {"type": "plain_text", "text": "x" * 101}, "text": {"type": "plain_text", "text": "ok"},
        "confirm": {"type": "plain_text", "text": "Yes"}, "deny": {"type": "plain_text", "text": "No"}})]}],
    "confirm text 301": [{"type": "actions", "elements": [button(confirm={
        "title": {"type": "plain_text", "text": "Sure?"}, "text": {"type": "plain_text", "text": "x" * 301},
        "confirm": {"type": "plain_text", "text": "Yes"}, "deny": {"type": "plain_text", "text": "No"}})]}],
    "confirm button 31": [{"type": "actions", "elements": [button(confirm={
        "title": {"type": "plain_text", "text": "Sure?"}, "text": {"type": "plain_text", "text": "ok"},
        "confirm": {"type": "plain_text", "text": "x" * 31},
        "deny": {"type": "plain_text", "text": "No"}})]}],
}


@pytest.mark.parametrize("blocks", OVER_LIMIT_BLOCKS.values(), ids=OVER_LIMIT_BLOCKS.keys())
def test_a_message_over_a_block_kit_limit_is_refused_with_invalid_blocks(
    client: WebClient, fake: FakeSlack, blocks: list[dict[str, Any]]
) -> None:
    with pytest.raises(SlackApiError) as caught:
        client.chat_postMessage(channel=CHANNEL, text="x", blocks=blocks)
    assert caught.value.response["error"] == "invalid_blocks"
    assert "json-pointer:/blocks" in caught.value.response["response_metadata"]["messages"][0]
    assert fake.messages(CHANNEL) == []


def test_an_update_over_a_limit_is_refused_and_the_message_is_unchanged(
    client: WebClient, fake: FakeSlack
) -> None:
    ts = client.chat_postMessage(channel=CHANNEL, text="card", blocks=[section("ok")])["ts"]
    assert error_of(lambda: client.chat_update(channel=CHANNEL, ts=ts, text="card",
                                               blocks=[section("x" * 3001)])) == "invalid_blocks"
    assert fake.message(CHANNEL, ts)["blocks"] == [section("ok")]


@pytest.mark.parametrize("view", [
    {**MODAL, "title": {"type": "plain_text", "text": "x" * 25}},
    {**MODAL, "blocks": [section(str(i)) for i in range(101)]},
], ids=["modal title 25", "101 modal blocks"])
def test_a_modal_over_a_limit_is_refused_like_slack_refuses_views(
    client: WebClient, fake: FakeSlack, view: dict[str, Any]
) -> None:
    trigger = fake.new_trigger_id()
    assert error_of(lambda: client.views_open(trigger_id=trigger, view=view)) == "invalid_arguments"
    assert client.views_open(trigger_id=trigger, view=MODAL)["ok"] is True  # a refused open keeps it


def test_a_modal_may_hold_a_hundred_blocks(client: WebClient, fake: FakeSlack) -> None:
    view = {**MODAL, "blocks": [section(str(i)) for i in range(100)]}
    assert client.views_open(trigger_id=fake.new_trigger_id(), view=view)["ok"] is True


@pytest.mark.parametrize("manifest", ["slack-app-manifest.yaml", "slack-app-manifest-socket.yaml"])
def test_the_fakes_bot_token_has_exactly_the_scopes_the_app_manifests_request(manifest: str) -> None:
    from pathlib import Path

    from ruamel.yaml import YAML

    from tests.fakes.slack_api import BOT_SCOPES

    path = Path(__file__).parents[2] / "deploy" / manifest
    data = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    assert tuple(data["oauth_config"]["scopes"]["bot"]) == BOT_SCOPES
    assert data["settings"]["socket_mode_enabled"] is (manifest == "slack-app-manifest-socket.yaml")


def test_a_reply_to_a_message_that_does_not_exist_is_refused(client: WebClient, fake: FakeSlack) -> None:
    assert error_of(lambda: client.chat_postMessage(channel=CHANNEL, text="x", thread_ts="1.000009")
                    ) == "thread_not_found"
    assert fake.messages(CHANNEL) == []


def test_a_bot_outside_a_channel_cannot_post_or_read_there(client: WebClient, fake: FakeSlack) -> None:
    fake.add_channel("C0PUB00002", name="inc-1", bot_member=False)
    fake.add_channel("C0PRV00002", name="inc-2", private=True, bot_member=False)
    for channel, error in (("C0PUB00002", "not_in_channel"), ("C0PRV00002", "channel_not_found")):
        with pytest.raises(SlackApiError) as e:
            client.chat_postMessage(channel=channel, text="hello")
        assert e.value.response["error"] == error
        with pytest.raises(SlackApiError) as e:
            client.chat_postEphemeral(channel=channel, user="U0HUMAN001", text="psst")
        assert e.value.response["error"] == error
    assert fake.messages("C0PUB00002") == []


def test_a_response_url_answers_one_person_five_times_in_thirty_minutes(
    fake: FakeSlack, clock: ManualClock,
) -> None:
    fake.add_channel("C0PUB00003", name="inc-3", bot_member=False)
    url = fake.new_response_url("U0HUMAN001", "C0PUB00003")
    hook = WebhookClient(url)
    for i in range(5):
        assert hook.send(text=f"answer {i}", response_type="ephemeral").status_code == 200
    assert hook.send(text="one too many").status_code == 404
    answers = fake.ephemerals("U0HUMAN001")
    assert [a["text"] for a in answers] == [f"answer {i}" for i in range(5)]
    assert {a["channel"] for a in answers} == {"C0PUB00003"} and fake.messages("C0PUB00003") == []
    late = WebhookClient(fake.new_response_url("U0HUMAN001", "C0PUB00003"))
    clock.advance(1801)
    assert late.send(text="too late").status_code == 404
