"""Slack's Block Kit limits, checked the way Slack checks them, for the fake Slack Web API.

Slack rejects a whole message (``invalid_blocks``) or modal (``invalid_arguments``) when one field
is a character too long. The builders in ``bot.present.blockkit`` stay inside the limits by
construction; the fake Slack Web API (``slack_api.py``) checks every payload the app sends against
the same limits table, in Slack's own wording, so a test fails wherever the app would break a
limit in production.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.present.blockkit import BUTTON_STYLES, LIMITS

__all__ = ["validate_blocks", "validate_view"]


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
