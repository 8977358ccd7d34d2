"""A stateful fake of the Slack Web API, served over real HTTP on 127.0.0.1.

The Slack front-end is tested through the real ``slack_sdk.WebClient`` (and bolt on top of it)
pointed at this server with ``base_url="http://127.0.0.1:PORT/api/"``, so serialisation, retries,
``files_upload_v2`` and error handling run exactly as in production; nothing is mock-patched.
It keeps what a user would see (messages per channel, threads, edits, ephemerals, modals,
uploads) and answers like Slack: HTTP 200 with ``{"ok": false, "error": ...}`` for API errors,
``invalid_auth`` / ``not_authed`` / ``missing_scope`` (with ``needed`` and ``provided``), 429 with
``Retry-After`` when told to, and ``invalid_blocks`` (``invalid_arguments`` for views, as Slack
does) when a payload breaks a Block Kit limit, using the app's own limits table
(``blockkit_limits.py``).

Channel membership is modelled: the bot is in ``ops`` and ``ops-private``; in a channel it was
not invited to, posting, updating and reading history fail as in Slack (``not_in_channel`` in a
public channel, ``channel_not_found`` in a private one), while a slash command's or click's
``response_url`` (``new_response_url``: five uses in 30 minutes) still answers the person there.

Time comes from an injected clock (``bot.engine.ports.Clock``): trigger expiry (3 s, one use) and
Retry-After windows are decided on it, so tests advance a ManualClock instead of sleeping.

Setup: ``add_user``, ``set_usergroup``, ``add_channel`` (with or without the bot), ``add_token``
(scopes), ``new_trigger_id``, ``new_response_url``,
``post_as_user`` (a human in a thread), ``fail_next(method, status=429, retry_after=1)``,
``clear_failures``, ``start_socket_mode`` (``slack_socket.FakeSocketMode``, for the app token).
Inspection: ``messages(channel)``, ``thread(channel, ts)``, ``message``, ``revisions`` (every
edit), ``ephemerals(user)``, ``views()``, ``uploads``, ``calls(method)``.
"""

from __future__ import annotations

import base64
import itertools
import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from bot.engine.ports import Clock, SystemClock
from tests.fakes.blockkit_limits import validate_blocks, validate_view

TEAM_ID = "T0FAKE0001"
TEAM_NAME = "Fake Workspace"
BOT_TOKEN = "xoxb-fake-bot-token"
APP_TOKEN = "xapp-1-A0APP00001-fake"  # the app-level token of Socket Mode (connections:write)
BOT_USER_ID = "U0BOT00001"
BOT_ID = "B0BOT00001"
APP_ID = "A0APP00001"
CHANNEL = "C0OPS00001"  # public, named "ops"
PRIVATE_CHANNEL = "C0PRIV0001"  # private, named "ops-private"
# Exactly the bot scopes in deploy/slack-app-manifest.yaml.
BOT_SCOPES = ("commands", "chat:write", "files:write", "usergroups:read", "users:read",
              "channels:history", "groups:history")
TRIGGER_TTL = 3.0
RESPONSE_URL_TTL = 1800.0  # a response_url works for 30 minutes,
RESPONSE_URL_USES = 5  # five times

# method -> scope a bot token needs (docs.slack.dev method reference); None: no scope required.
_SCOPES: dict[str, str | None] = {
    "auth.test": None, "api.test": None, "chat.postMessage": "chat:write", "chat.update": "chat:write",
    "chat.postEphemeral": "chat:write", "views.open": None, "views.update": None,
    "usergroups.users.list": "usergroups:read", "users.info": "users:read",
    "files.getUploadURLExternal": "files:write", "files.completeUploadExternal": "files:write",
    "conversations.replies": "channels:history",  # groups:history for private channels
    "apps.connections.open": "connections:write",  # an app-level token's scope
}


class SlackError(Exception):
    """Raised inside a method handler; becomes ``{"ok": false, "error": code, **extra}``."""

    def __init__(self, code: str, **extra: Any) -> None:
        super().__init__(code)
        self.code = code
        self.extra = extra


@dataclass(frozen=True)
class Call:
    method: str
    params: Mapping[str, Any]
    headers: Mapping[str, str]
    token: str | None
    status: int
    response: Mapping[str, Any]


@dataclass
class Upload:
    file_id: str
    filename: str
    length: int
    content: bytes | None = None
    title: str | None = None
    channel: str | None = None
    thread_ts: str | None = None


@dataclass
class _Token:
    user_id: str
    bot_id: str | None
    scopes: tuple[str, ...]


@dataclass
class _Failure:
    status: int
    error: str
    retry_after: float | None
    times: int
    after: int = 0  # calls to let through first


@dataclass
class _State:
    messages: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    owners: dict[tuple[str, str], str] = field(default_factory=dict)  # (channel, ts) -> token
    revisions: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    ephemerals: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    views: dict[str, dict[str, Any]] = field(default_factory=dict)
    triggers: dict[str, tuple[float, str, bool]] = field(default_factory=dict)  # id -> (at, user, used)
    hooks: dict[str, list[Any]] = field(default_factory=dict)  # id -> [issued, user, channel, uses]
    uploads: dict[str, Upload] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)


def _loads(value: Any, name: str) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        raise SlackError(f"invalid_{name}_format" if name == "blocks" else "invalid_arguments",
                         response_metadata={"messages": [f"[ERROR] invalid json [json-pointer:/{name}]"]}
                         ) from None


def _invalid(code: str, errors: list[str]) -> SlackError:
    return SlackError(code, errors=errors,
                      response_metadata={"messages": [f"[ERROR] {e}" for e in errors]})


class FakeSlack:
    """The fake workspace and its HTTP server. Use as a context manager or via ``fake_slack``."""

    def __init__(self, *, clock: Clock | None = None) -> None:
        self.clock: Clock = clock or SystemClock()
        self._lock = threading.RLock()
        self._seq = itertools.count(1)
        self._state = _State()
        self._tokens: dict[str, _Token] = {BOT_TOKEN: _Token(BOT_USER_ID, BOT_ID, BOT_SCOPES),
                                           APP_TOKEN: _Token("", None, ("connections:write",))}
        self.socket_mode: Any = None  # a FakeSocketMode once start_socket_mode is called
        self._channels: dict[str, tuple[str, bool]] = {CHANNEL: ("ops", False),
                                                      PRIVATE_CHANNEL: ("ops-private", True)}
        self._member_of: set[str] = {CHANNEL, PRIVATE_CHANNEL}  # channels the bot was invited to
        self._users: dict[str, dict[str, Any]] = {}
        self._groups: dict[str, list[str]] = {}
        self._failures: dict[str, list[_Failure]] = {}
        self._blocked_until: dict[str, float] = {}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> FakeSlack:
        handler = type("_Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True,
                                        name="fake-slack-api")
        self._thread.start()
        return self

    def start_socket_mode(self) -> Any:
        """Serve Socket Mode too: ``apps.connections.open`` then answers with its URL."""
        from tests.fakes.slack_socket import FakeSocketMode

        if self.socket_mode is None:
            self.socket_mode = FakeSocketMode()
        return self.socket_mode

    def stop(self) -> None:
        if self.socket_mode is not None:
            self.socket_mode.close()
            self.socket_mode = None
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeSlack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "the fake is not started"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """What to pass as WebClient(base_url=...): the trailing slash matters."""
        return f"http://127.0.0.1:{self.port}/api/"

    # -- workspace setup ------------------------------------------------------------------------

    def add_token(self, token: str, *, scopes: tuple[str, ...], user_id: str = BOT_USER_ID,
                  bot_id: str | None = BOT_ID) -> None:
        self._tokens[token] = _Token(user_id, bot_id, scopes)

    def add_channel(self, channel: str, *, name: str, private: bool = False,
                    bot_member: bool = True) -> None:
        """A channel; ``bot_member=False`` for one nobody has ``/invite``d the bot to."""
        with self._lock:
            self._channels[channel] = (name, private)
            if bot_member:
                self._member_of.add(channel)
            else:
                self._member_of.discard(channel)

    def add_user(self, user_id: str, *, name: str, real_name: str = "", display_name: str = "",
                 is_bot: bool = False) -> None:
        self._users[user_id] = {
            "id": user_id, "team_id": TEAM_ID, "name": name, "deleted": False,
            "real_name": real_name or name, "is_bot": is_bot, "is_app_user": False,
            "profile": {"real_name": real_name or name, "display_name": display_name,
                        "real_name_normalized": real_name or name,
                        "display_name_normalized": display_name, "team": TEAM_ID},
        }

    def set_usergroup(self, usergroup: str, users: list[str]) -> None:
        with self._lock:
            self._groups[usergroup] = list(users)

    def new_trigger_id(self, user: str = "U0HUMAN001") -> str:
        """A trigger_id as Slack puts in a slash command or click: valid for 3 s, once."""
        trigger = f"{next(self._seq)}.{TEAM_ID[1:]}.{next(self._seq):032x}"
        with self._lock:
            self._state.triggers[trigger] = (self._now(), user, False)
        return trigger

    def new_response_url(self, user: str, channel: str) -> str:
        """A response_url as Slack puts in a slash command or click, for ``user`` in ``channel``."""
        hook = f"{next(self._seq)}/{next(self._seq):024x}"
        with self._lock:
            self._state.hooks[hook] = [self._now(), user, channel, 0]
        return f"http://127.0.0.1:{self.port}/hooks/{TEAM_ID}/{hook}"

    def fail_next(self, method: str, *, status: int = 429, retry_after: float | None = 1,
                  error: str | None = None, times: int = 1, after: int = 0) -> None:
        """Make ``times`` calls of ``method`` fail (429 with Retry-After by default), once
        ``after`` more calls of it have gone through."""
        code = error or ("ratelimited" if status == 429 else "internal_error")
        with self._lock:
            self._failures.setdefault(method, []).append(
                _Failure(status, code, retry_after, times, after))

    def clear_failures(self) -> None:
        """Slack is well again: no more injected failures, no rate-limit window open."""
        with self._lock:
            self._failures.clear()
            self._blocked_until.clear()

    def post_as_user(self, channel: str, user: str, text: str, *, thread_ts: str | None = None) -> str:
        """A human's message in a channel or thread, as the transcript reads it back."""
        with self._lock:
            return str(self._store(channel, {"type": "message", "user": user, "text": text,
                                             "team": TEAM_ID}, thread_ts, token=None)["ts"])

    # -- inspection -----------------------------------------------------------------------------

    def calls(self, method: str | None = None) -> list[Call]:
        with self._lock:
            return [c for c in self._state.calls if method is None or c.method == method]

    def messages(self, channel: str) -> list[dict[str, Any]]:
        """Top-level messages of a channel, oldest first, as they look now."""
        with self._lock:
            return [dict(m) for m in self._state.messages.get(channel, [])
                    if m.get("thread_ts") in (None, m["ts"])]

    def thread(self, channel: str, ts: str) -> list[dict[str, Any]]:
        """A thread's parent then its replies, oldest first."""
        with self._lock:
            return [dict(m) for m in self._state.messages.get(channel, [])
                    if m["ts"] == ts or m.get("thread_ts") == ts]

    def message(self, channel: str, ts: str) -> dict[str, Any]:
        with self._lock:
            return dict(self._find(channel, ts))

    def revisions(self, channel: str, ts: str) -> list[dict[str, Any]]:
        """Every version of a message, first post first: edits in place show up here."""
        with self._lock:
            return [dict(m) for m in self._state.revisions.get((channel, ts), [])]

    def ephemerals(self, user: str) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(m) for m in self._state.ephemerals.get(user, [])]

    def views(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(v) for v in self._state.views.values()]

    @property
    def uploads(self) -> list[Upload]:
        with self._lock:
            return list(self._state.uploads.values())

    # -- internals ------------------------------------------------------------------------------

    def _now(self) -> float:
        return self.clock.now().timestamp()

    def _next_ts(self) -> str:
        return f"{int(self._now())}.{next(self._seq):06d}"

    def _channel(self, params: Mapping[str, Any], key: str = "channel") -> str:
        """The channel named in ``params``, which the bot must be a member of."""
        channel = params.get(key)
        if not channel or channel not in self._channels:
            raise SlackError("channel_not_found")
        if channel not in self._member_of:  # a private channel is invisible to a non-member
            raise SlackError("channel_not_found" if self._channels[channel][1] else "not_in_channel")
        return str(channel)

    def respond(self, hook: str, body: bytes) -> tuple[int, str]:
        """A POST to a response_url: an answer to one person, where they acted."""
        with self._lock:
            entry = self._state.hooks.get(hook)
            if entry is None:
                return 404, "no_service"
            issued, user, channel, uses = entry
            try:
                payload = json.loads(body or b"{}")
            except ValueError:
                return 400, "invalid_payload"
            if self._now() - issued > RESPONSE_URL_TTL:
                status, answer = 404, "expired_url"
            elif uses >= RESPONSE_URL_USES:
                status, answer = 404, "used_url"
            elif not payload.get("text") and not payload.get("blocks"):
                status, answer = 400, "no_text"
            elif payload.get("blocks") is not None and validate_blocks(payload["blocks"]):
                status, answer = 400, "invalid_blocks"
            else:
                entry[3] = uses + 1
                status, answer = 200, "ok"
                if payload.get("response_type") == "in_channel":
                    self._store(channel, {"type": "message", "text": payload.get("text") or "",
                                          "blocks": payload.get("blocks") or [], "team": TEAM_ID,
                                          "user": BOT_USER_ID}, None, token=None)
                else:
                    self._state.ephemerals.setdefault(user, []).append({
                        "type": "message", "text": payload.get("text") or "",
                        "blocks": payload.get("blocks") or [], "channel": channel,
                        "ts": self._next_ts(), "via": "response_url"})
            self._state.calls.append(Call("response_url", payload, {}, None, status,
                                          {"ok": status == 200, "error": answer}))
            return status, answer

    def _find(self, channel: str, ts: str) -> dict[str, Any]:
        for m in self._state.messages.get(channel, []):
            if m["ts"] == ts:
                return m
        raise SlackError("message_not_found")

    def _store(self, channel: str, message: dict[str, Any], thread_ts: str | None,
               token: str | None) -> dict[str, Any]:
        if channel not in self._channels:
            raise SlackError("channel_not_found")
        ts = self._next_ts()
        message = {**message, "ts": ts}
        if thread_ts:
            # Stricter than Slack, which accepts any thread_ts: a reply to a message that does
            # not exist is a bug in the app, and a test should say so.
            parent = next((m for m in self._state.messages.get(channel, [])
                           if m["ts"] == thread_ts), None)
            if parent is None:
                raise SlackError("thread_not_found")
            message["thread_ts"] = thread_ts
            message["parent_user_id"] = parent.get("user")
            parent["thread_ts"] = thread_ts
            parent["reply_count"] = int(parent.get("reply_count", 0)) + 1
            users = parent.setdefault("reply_users", [])
            if message.get("user") not in users:
                users.append(message.get("user"))
            parent["latest_reply"] = ts
        self._state.messages.setdefault(channel, []).append(message)
        self._state.revisions[(channel, ts)] = [dict(message)]
        if token is not None:
            self._state.owners[(channel, ts)] = token
        return message

    def _bot_message(self, tok: _Token, params: Mapping[str, Any]) -> dict[str, Any]:
        blocks = _loads(params.get("blocks"), "blocks")
        text = params.get("text")
        if not text and not blocks:
            raise SlackError("no_text")
        if blocks is not None:
            errors = validate_blocks(blocks)
            if errors:
                raise _invalid("invalid_blocks", errors)
        message: dict[str, Any] = {"type": "message", "text": text or "", "user": tok.user_id,
                                   "team": TEAM_ID, "app_id": APP_ID}
        if tok.bot_id:
            message["bot_id"] = tok.bot_id
        if blocks is not None:
            message["blocks"] = blocks
        return message

    def dispatch(self, method: str, params: dict[str, Any], headers: Mapping[str, str]
                 ) -> tuple[int, dict[str, Any], dict[str, str]]:
        """Serve one Web API call: returns (HTTP status, JSON body, extra headers)."""
        auth = headers.get("authorization", "")
        token = auth[7:] if auth.lower().startswith("bearer ") else params.pop("token", None)
        params.pop("token", None)
        status, extra_headers = 200, dict[str, str]()
        with self._lock:
            try:
                status, body, extra_headers = self._serve(method, params, token)
            except SlackError as e:
                body = {"ok": False, "error": e.code, **e.extra}
            self._state.calls.append(Call(method, dict(params), dict(headers), token, status, body))
        return status, body, extra_headers

    def _serve(self, method: str, params: dict[str, Any], token: str | None
               ) -> tuple[int, dict[str, Any], dict[str, str]]:
        now = self._now()
        queue = self._failures.get(method)
        if queue and queue[0].after > 0:
            queue[0].after -= 1
        elif queue:
            failure = queue[0]
            failure.times -= 1
            if failure.times <= 0:
                queue.pop(0)
            headers: dict[str, str] = {}
            if failure.retry_after is not None:
                headers["Retry-After"] = str(int(failure.retry_after))
                if failure.status == 429:  # Slack keeps refusing until the window has passed
                    self._blocked_until[method] = now + failure.retry_after
            return failure.status, {"ok": False, "error": failure.error}, headers
        if now < self._blocked_until.get(method, 0.0):
            left = self._blocked_until[method] - now
            return 429, {"ok": False, "error": "ratelimited"}, {"Retry-After": str(max(int(left), 1))}
        handler = getattr(self, "_m_" + method.replace(".", "_"), None)
        if handler is None:
            raise SlackError("unknown_method")
        if not token:
            raise SlackError("not_authed")
        tok = self._tokens.get(token)
        if tok is None:
            raise SlackError("invalid_auth")
        needed = _SCOPES.get(method)
        if method == "conversations.replies" and self._channels.get(
                str(params.get("channel")), ("", False))[1]:
            needed = "groups:history"
        if needed is not None and needed not in tok.scopes:
            raise SlackError("missing_scope", needed=needed, provided=",".join(tok.scopes))
        return 200, {"ok": True, **handler(tok, token, params)}, {}

    # -- methods (each returns the body after "ok": true) ---------------------------------------

    def _m_api_test(self, tok: _Token, token: str, p: dict[str, Any]) -> dict[str, Any]:
        return {"args": p}

    def _m_apps_connections_open(self, tok: _Token, token: str, p: dict[str, Any]) -> dict[str, Any]:
        if not token.startswith("xapp-"):
            raise SlackError("not_allowed_token_type")
        if self.socket_mode is None:
            raise SlackError("internal_error")  # the test did not start Socket Mode
        return {"url": self.socket_mode.url}

    def _m_auth_test(self, tok: _Token, token: str, p: dict[str, Any]) -> dict[str, Any]:
        body = {"url": "https://fake-workspace.slack.com/", "team": TEAM_NAME, "user": "runbook-bot",
                "team_id": TEAM_ID, "user_id": tok.user_id, "is_enterprise_install": False}
        if tok.bot_id:
            body["bot_id"] = tok.bot_id
        return body

    def _m_chat_postMessage(self, tok: _Token, token: str, p: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(p)
        message = self._bot_message(tok, p)
        stored = self._store(channel, message, p.get("thread_ts") or None, token)
        return {"channel": channel, "ts": stored["ts"], "message": dict(stored)}

    def _m_chat_update(self, tok: _Token, token: str, p: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(p)
        ts = str(p.get("ts") or "")
        current = self._find(channel, ts)  # ephemerals are not stored here: message_not_found
        if self._state.owners.get((channel, ts)) != token:
            raise SlackError("cant_update_message")
        new = self._bot_message(tok, p)
        for key in ("text", "blocks"):
            if key in new:
                current[key] = new[key]
        if "blocks" in p and not new.get("blocks"):
            current.pop("blocks", None)
        current["edited"] = {"user": tok.user_id, "ts": self._next_ts()}
        self._state.revisions[(channel, ts)].append(dict(current))
        return {"channel": channel, "ts": ts, "text": current["text"], "message": dict(current)}

    def _m_chat_postEphemeral(self, tok: _Token, token: str, p: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(p)
        user = p.get("user")
        if not user:
            raise SlackError("user_not_in_channel")
        message = self._bot_message(tok, p)
        message.update(channel=channel, ts=self._next_ts(), thread_ts=p.get("thread_ts"))
        self._state.ephemerals.setdefault(str(user), []).append(message)
        return {"message_ts": message["ts"]}

    def _view(self, view: Any, view_id: str, user: str) -> dict[str, Any]:
        view = _loads(view, "view")
        errors = validate_view(view)
        if errors:
            raise _invalid("invalid_arguments", errors)
        stored = {"id": view_id, "team_id": TEAM_ID, "state": {"values": {}},
                  "hash": f"{int(self._now())}.{next(self._seq):08x}", "private_metadata": "",
                  "callback_id": "", "external_id": "", "clear_on_close": False,
                  "notify_on_close": False, "root_view_id": view_id, "previous_view_id": None,
                  "app_id": APP_ID, "bot_id": BOT_ID, "user": user, **view}
        self._state.views[view_id] = stored
        return stored

    def _m_views_open(self, tok: _Token, token: str, p: dict[str, Any]) -> dict[str, Any]:
        trigger = p.get("trigger_id") or p.get("interactivity_pointer")
        if not trigger or trigger not in self._state.triggers:
            raise SlackError("invalid_trigger_id")
        issued, user, used = self._state.triggers[trigger]
        if used:
            raise SlackError("exchanged_trigger_id")
        if self._now() - issued > TRIGGER_TTL:
            raise SlackError("expired_trigger_id")
        view = self._view(p.get("view"), f"V{next(self._seq):09d}", user)
        self._state.triggers[trigger] = (issued, user, True)  # only a successful open uses it
        return {"view": {k: v for k, v in view.items() if k != "user"}}

    def _m_views_update(self, tok: _Token, token: str, p: dict[str, Any]) -> dict[str, Any]:
        view_id = p.get("view_id")
        if not view_id and p.get("external_id"):
            view_id = next((v["id"] for v in self._state.views.values()
                            if v.get("external_id") == p["external_id"]), None)
        old = self._state.views.get(str(view_id))
        if old is None:
            raise SlackError("not_found")
        if p.get("hash") and p["hash"] != old["hash"]:
            raise SlackError("hash_conflict")
        view = self._view(p.get("view"), old["id"], old["user"])
        view["previous_view_id"] = None
        return {"view": {k: v for k, v in view.items() if k != "user"}}

    def _m_usergroups_users_list(self, tok: _Token, token: str, p: dict[str, Any]) -> dict[str, Any]:
        group = p.get("usergroup")
        if group not in self._groups:
            raise SlackError("no_such_subteam")
        return {"users": list(self._groups[str(group)])}

    def _m_users_info(self, tok: _Token, token: str, p: dict[str, Any]) -> dict[str, Any]:
        user = self._users.get(str(p.get("user")))
        if user is None:
            raise SlackError("user_not_found")
        return {"user": json.loads(json.dumps(user))}

    def _m_conversations_replies(self, tok: _Token, token: str, p: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(p)
        ts = str(p.get("ts") or "")
        target = next((m for m in self._state.messages.get(channel, []) if m["ts"] == ts), None)
        if target is None:
            raise SlackError("thread_not_found")
        root = target.get("thread_ts") or ts  # a reply's ts returns its whole thread
        thread = [m for m in self._state.messages[channel]
                  if m["ts"] == root or m.get("thread_ts") == root]
        start = 0
        if p.get("cursor"):
            try:
                after = base64.b64decode(str(p["cursor"])).decode().removeprefix("next_ts:")
                start = next(i for i, m in enumerate(thread) if m["ts"] == after)
            except (ValueError, StopIteration):
                raise SlackError("invalid_cursor") from None
        limit = max(1, min(int(p.get("limit") or 1000), 1000))
        page = thread[start:start + limit]
        has_more = start + limit < len(thread)
        cursor = ""
        if has_more:
            cursor = base64.b64encode(f"next_ts:{thread[start + limit]['ts']}".encode()).decode()
        return {"messages": [dict(m) for m in page], "has_more": has_more,
                "response_metadata": {"next_cursor": cursor}}

    def _m_files_getUploadURLExternal(self, tok: _Token, token: str, p: dict[str, Any]
                                      ) -> dict[str, Any]:
        if not p.get("filename") or not str(p.get("length", "")).isdigit():
            raise SlackError("missing_argument")
        file_id = f"F{next(self._seq):09d}"
        self._state.uploads[file_id] = Upload(file_id, str(p["filename"]), int(p["length"]))
        return {"upload_url": f"http://127.0.0.1:{self.port}/upload/v1/{file_id}", "file_id": file_id}

    def receive_upload(self, file_id: str, content: bytes) -> bool:
        with self._lock:
            upload = self._state.uploads.get(file_id)
            if upload is None:
                return False
            upload.content = content
            return True

    def _m_files_completeUploadExternal(self, tok: _Token, token: str, p: dict[str, Any]
                                        ) -> dict[str, Any]:
        entries = _loads(p.get("files"), "files")
        if not isinstance(entries, list) or not entries:
            raise SlackError("invalid_arguments")
        uploads = []
        for entry in entries:
            upload = self._state.uploads.get(str(entry.get("id")))
            if upload is None or upload.content is None:
                raise SlackError("file_not_found")
            upload.title = entry.get("title") or upload.filename
            uploads.append(upload)
        channel = p.get("channel_id") or (p.get("channels") or "").split(",")[0] or None
        if channel is not None:
            self._channel({"channel": channel})
        files = [{"id": u.file_id, "name": u.filename, "title": u.title, "size": len(u.content or b""),
                  "user": tok.user_id, "created": int(self._now())} for u in uploads]
        if channel is not None:
            thread_ts = p.get("thread_ts") or None
            for u in uploads:
                u.channel, u.thread_ts = str(channel), thread_ts
            self._store(str(channel), {"type": "message", "user": tok.user_id, "team": TEAM_ID,
                                       "text": p.get("initial_comment") or "", "files": files,
                                       "upload": True}, thread_ts, token)
        return {"files": [{"id": f["id"], "title": f["title"]} for f in files]}


class _Handler(BaseHTTPRequestHandler):
    fake: FakeSlack
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        return

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _params(self, raw: bytes, query: str) -> dict[str, Any]:
        params: dict[str, Any] = dict(parse_qsl(query, keep_blank_values=True))
        ctype = self.headers.get("Content-Type", "")
        if ctype.startswith("application/json") and raw:
            params.update(json.loads(raw))
        elif ctype.startswith("multipart/form-data"):
            msg = BytesParser(policy=HTTP).parsebytes(
                f"Content-Type: {ctype}\r\n\r\n".encode() + raw)
            for part in msg.iter_parts():
                name = part.get_param("name", header="content-disposition")
                payload = part.get_payload(decode=True)
                data = payload if isinstance(payload, bytes) else b""
                params[str(name)] = data if part.get_filename() else data.decode()
        elif raw:
            params.update(parse_qsl(raw.decode(), keep_blank_values=True))
        return params

    def _send(self, status: int, body: bytes, ctype: str, headers: Mapping[str, str]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        raw = self._read_body()
        if url.path.startswith(f"/hooks/{TEAM_ID}/"):
            status, text = self.fake.respond(url.path.split("/", 3)[3], raw)
            self._send(status, text.encode(), "text/plain; charset=utf-8", {})
            return
        if url.path.startswith("/upload/v1/"):
            # The upload URL takes the raw bytes whatever Content-Type urllib put on them.
            ok = self.fake.receive_upload(url.path.rsplit("/", 1)[-1], raw)
            text = f"OK - {len(raw)}" if ok else "Not Found"
            self._send(200 if ok else 404, text.encode(), "text/plain; charset=utf-8", {})
            return
        if not url.path.startswith("/api/"):
            self._send(404, b"not found", "text/plain", {})
            return
        method = url.path[len("/api/"):]
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, body, extra = self.fake.dispatch(method, self._params(raw, url.query), headers)
        self._send(status, json.dumps(body).encode(), "application/json; charset=utf-8", extra)

    do_GET = do_POST


@pytest.fixture
def fake_slack() -> Iterator[FakeSlack]:
    """A started fake on the system clock; build FakeSlack(clock=...) yourself for a manual one."""
    with FakeSlack() as fake:
        yield fake
