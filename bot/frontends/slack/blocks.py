"""Block Kit helpers that keep every message and modal inside Slack's limits.

Slack rejects a whole message (``invalid_blocks``) or modal (``invalid_arguments``) when one field
is a character too long, so a long plan or a 60-step runbook would silently fail to post. Views
are built from platform-free models elsewhere; this module is the last step before the Web API:
it truncates text with a pointer to the thread, collapses a too-long block list, builds buttons and
confirm dialogs that cannot break a limit, and validates a payload against the same table the fake
Slack Web API in the tests uses, so a test fails wherever the app would break a limit in production.

Limits (docs.slack.dev Block Kit reference): 50 blocks per message, 100 per modal, section text
3000, button text 75, value 2000, action_id/block_id 255, confirm title 100 / text 300 / buttons
30, modal title, submit and close 24, header text 150, 10 section fields of 2000, 25 elements per
actions block, 10 per context block. Button ``style`` is ``primary`` or ``danger``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

Block = dict[str, Any]

LIMITS: Final[Mapping[str, int]] = {
    "message_blocks": 50,
    "modal_blocks": 100,
    "section_text": 3000,
    "section_fields": 10,
    "section_field_text": 2000,
    "header_text": 150,
    "context_elements": 10,
    "context_text": 3000,
    "actions_elements": 25,
    "button_text": 75,
    "button_value": 2000,
    "button_url": 3000,
    "action_id": 255,
    "block_id": 255,
    "confirm_title": 100,
    "confirm_text": 300,
    "confirm_button": 30,
    "modal_title": 24,
    "modal_submit": 24,
    "modal_close": 24,
    "callback_id": 255,
    "private_metadata": 3000,
    "input_label": 2000,
    "input_hint": 2000,
}
BUTTON_STYLES: Final = frozenset({"primary", "danger"})
THREAD_POINTER: Final = "… full plan in the thread"
ELLIPSIS: Final = "…"


# -- text ---------------------------------------------------------------------------------------


def truncate(text: str, limit: int, *, pointer: str = THREAD_POINTER) -> str:
    """Cut ``text`` to at most ``limit`` characters, ending with ``pointer`` when it was cut."""
    if len(text) <= limit:
        return text
    tail = "\n" + pointer if pointer else ELLIPSIS
    if len(tail) >= limit:  # a tiny limit (a button label): a bare ellipsis is all that fits
        return text[: max(limit - 1, 0)] + ELLIPSIS
    return text[: limit - len(tail)].rstrip() + tail


def plain(text: str, limit: int | None = None) -> dict[str, Any]:
    """A plain_text object, truncated with an ellipsis when a limit is given."""
    if limit is not None:
        text = truncate(text, limit, pointer="")
    return {"type": "plain_text", "text": text, "emoji": True}


def mrkdwn(text: str) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": text}


def section(text: str, *, block_id: str | None = None, pointer: str = THREAD_POINTER) -> Block:
    """A mrkdwn section; text beyond 3000 characters ends with a pointer to the thread."""
    block: Block = {"type": "section", "text": mrkdwn(truncate(text, LIMITS["section_text"],
                                                                pointer=pointer))}
    if block_id is not None:
        block["block_id"] = _checked_id(block_id, "block_id")
    return block


def context(text: str) -> Block:
    return {"type": "context", "elements": [mrkdwn(truncate(text, LIMITS["context_text"]))]}


def limit_blocks(
    blocks: Sequence[Block], max: int = LIMITS["message_blocks"], *, pointer: str = THREAD_POINTER
) -> list[Block]:
    """Keep at most ``max`` blocks: the tail collapses into one context block saying what was cut."""
    if len(blocks) <= max:
        return list(blocks)
    kept = list(blocks[: max - 1])
    hidden = len(blocks) - len(kept)
    kept.append(context(f"{hidden} more block{'s' if hidden != 1 else ''} not shown {pointer}"))
    return kept


# -- buttons and confirm dialogs ----------------------------------------------------------------


def _checked_id(value: str, kind: str) -> str:
    if not value or len(value) > LIMITS[kind]:
        raise ValueError(f"{kind} must be 1..{LIMITS[kind]} characters, got {len(value)}")
    return value


def confirm_dialog(
    *, title: str, text: str, confirm: str = "Approve", deny: str = "Cancel", style: str = "danger"
) -> dict[str, Any]:
    """A confirm dialog; over-long strings are cut, never sent."""
    if style not in BUTTON_STYLES:
        raise ValueError(f"confirm style must be one of {sorted(BUTTON_STYLES)}, got {style!r}")
    return {
        "title": plain(title, LIMITS["confirm_title"]),
        "text": plain(text, LIMITS["confirm_text"]),
        "confirm": plain(confirm, LIMITS["confirm_button"]),
        "deny": plain(deny, LIMITS["confirm_button"]),
        "style": style,
    }


def button(
    *,
    text: str,
    action_id: str,
    value: str | None = None,
    style: str | None = None,
    confirm: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A button. Ids and values are data, so a too-long one is a bug: it raises instead of cutting."""
    element: dict[str, Any] = {
        "type": "button",
        "text": plain(text, LIMITS["button_text"]),
        "action_id": _checked_id(action_id, "action_id"),
    }
    if value is not None:
        if len(value) > LIMITS["button_value"]:
            raise ValueError(f"button value is {len(value)} characters; limit {LIMITS['button_value']}")
        element["value"] = value
    if style is not None:
        if style not in BUTTON_STYLES:
            raise ValueError(f"button style must be one of {sorted(BUTTON_STYLES)}, got {style!r}")
        element["style"] = style
    if confirm is not None:
        element["confirm"] = dict(confirm)
    return element


def approve_button(
    *, action_id: str, value: str, destructive: bool, summary: str, text: str = "Approve"
) -> dict[str, Any]:
    """Approve: ``primary``, or ``danger`` behind a confirm dialog that repeats what will change."""
    if not destructive:
        return button(text=text, action_id=action_id, value=value, style="primary")
    dialog = confirm_dialog(title="Approve a destructive step?", text=summary, confirm=text)
    return button(text=text, action_id=action_id, value=value, style="danger", confirm=dialog)


# -- validation ---------------------------------------------------------------------------------


def _text_of(obj: Any) -> str:
    if isinstance(obj, Mapping):
        return str(obj.get("text", ""))
    return "" if obj is None else str(obj)


class _Checker:
    """Collects Slack-style error strings: ``must be less than 3001 characters [json-pointer:/…]``."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def length(self, value: Any, limit: int, pointer: str) -> None:
        if value is not None and len(str(value)) > limit:
            self.errors.append(f"must be less than {limit + 1} characters [json-pointer:{pointer}]")

    def count(self, items: Any, limit: int, pointer: str) -> None:
        if isinstance(items, list) and len(items) > limit:
            self.errors.append(f"no more than {limit} items allowed [json-pointer:{pointer}]")

    def enum(self, value: Any, allowed: frozenset[str], pointer: str) -> None:
        if value is not None and value not in allowed:
            self.errors.append(
                f"must be one of: {', '.join(sorted(allowed))} [json-pointer:{pointer}]")

    def confirm(self, dialog: Any, p: str) -> None:
        if not isinstance(dialog, Mapping):
            return
        self.length(_text_of(dialog.get("title")), LIMITS["confirm_title"], f"{p}/title/text")
        self.length(_text_of(dialog.get("text")), LIMITS["confirm_text"], f"{p}/text/text")
        for key in ("confirm", "deny"):
            self.length(_text_of(dialog.get(key)), LIMITS["confirm_button"], f"{p}/{key}/text")
        self.enum(dialog.get("style"), BUTTON_STYLES, f"{p}/style")

    def element(self, el: Any, p: str) -> None:
        if not isinstance(el, Mapping):
            return
        self.length(el.get("action_id"), LIMITS["action_id"], f"{p}/action_id")
        if el.get("type") == "button":
            self.length(_text_of(el.get("text")), LIMITS["button_text"], f"{p}/text/text")
            self.length(el.get("value"), LIMITS["button_value"], f"{p}/value")
            self.length(el.get("url"), LIMITS["button_url"], f"{p}/url")
            self.enum(el.get("style"), BUTTON_STYLES, f"{p}/style")
        self.confirm(el.get("confirm"), f"{p}/confirm")

    def block(self, block: Any, p: str) -> None:
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            self.errors.append(f"missing required field: type [json-pointer:{p}]")
            return
        kind = block["type"]
        self.length(block.get("block_id"), LIMITS["block_id"], f"{p}/block_id")
        if kind == "section":
            self.length(_text_of(block.get("text")) or None, LIMITS["section_text"], f"{p}/text/text")
            fields = block.get("fields")
            self.count(fields, LIMITS["section_fields"], f"{p}/fields")
            for i, field in enumerate(fields or []):
                self.length(_text_of(field), LIMITS["section_field_text"], f"{p}/fields/{i}/text")
            self.element(block.get("accessory"), f"{p}/accessory")
        elif kind == "header":
            self.length(_text_of(block.get("text")), LIMITS["header_text"], f"{p}/text/text")
        elif kind == "actions":
            elements = block.get("elements")
            self.count(elements, LIMITS["actions_elements"], f"{p}/elements")
            for i, el in enumerate(elements or []):
                self.element(el, f"{p}/elements/{i}")
        elif kind == "context":
            elements = block.get("elements")
            self.count(elements, LIMITS["context_elements"], f"{p}/elements")
            for i, el in enumerate(elements or []):
                if isinstance(el, Mapping) and "text" in el:
                    self.length(_text_of(el), LIMITS["context_text"], f"{p}/elements/{i}/text")
        elif kind == "input":
            self.length(_text_of(block.get("label")), LIMITS["input_label"], f"{p}/label/text")
            self.length(_text_of(block.get("hint")) or None, LIMITS["input_hint"], f"{p}/hint/text")
            self.element(block.get("element"), f"{p}/element")

    def blocks(self, blocks: Any, limit: int, p: str) -> None:
        if not isinstance(blocks, list):
            self.errors.append(f"must be an array [json-pointer:{p}]")
            return
        self.count(blocks, limit, p)
        seen: set[str] = set()
        for i, block in enumerate(blocks):
            self.block(block, f"{p}/{i}")
            block_id = block.get("block_id") if isinstance(block, Mapping) else None
            if isinstance(block_id, str):
                if block_id in seen:  # Slack refuses two blocks with one block_id in a surface
                    self.errors.append(f"duplicate block_id [json-pointer:{p}/{i}/block_id]")
                seen.add(block_id)


def validate_blocks(blocks: Any, *, pointer: str = "/blocks") -> list[str]:
    """Problems with a message's blocks, in Slack's wording; empty when Slack would accept them."""
    checker = _Checker()
    checker.blocks(blocks, LIMITS["message_blocks"], pointer)
    return checker.errors


def validate_view(view: Any) -> list[str]:
    """Problems with a modal view, in Slack's wording; empty when Slack would accept it."""
    checker = _Checker()
    if not isinstance(view, Mapping):
        return ["must be an object [json-pointer:/view]"]
    if view.get("type") != "modal":
        checker.errors.append("must be modal [json-pointer:/view/type]")
    if not _text_of(view.get("title")):
        checker.errors.append("missing required field: title [json-pointer:/view/title]")
    checker.length(_text_of(view.get("title")), LIMITS["modal_title"], "/view/title/text")
    for key in ("submit", "close"):
        checker.length(_text_of(view.get(key)) or None, LIMITS[f"modal_{key}"], f"/view/{key}/text")
    checker.length(view.get("callback_id"), LIMITS["callback_id"], "/view/callback_id")
    checker.length(view.get("private_metadata"), LIMITS["private_metadata"], "/view/private_metadata")
    checker.blocks(view.get("blocks", []), LIMITS["modal_blocks"], "/view/blocks")
    return checker.errors
