"""Block Kit primitives that stay inside Slack's documented limits by construction.

The ``LIMITS`` table, and the text, section, context, header, button, confirm-dialog and actions
builders every Slack message and modal of ``blockkit.py`` is made of: text is cut (with a pointer
to the thread), a too-long block list collapses its tail into one line, and ids and values that are
data raise instead of being cut. Its own module so that ``blockkit.py`` keeps to rendering runs,
within the module-size budget (docs/architecture.md); every name here is importable from there.
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



def header(text: str) -> Block:
    return {"type": "header", "text": plain(text, LIMITS["header_text"])}


def divider() -> Block:
    return {"type": "divider"}


def actions(elements: Sequence[Mapping[str, Any]], *, block_id: str) -> Block:
    return {"type": "actions", "block_id": _checked_id(block_id, "block_id"),
            "elements": [dict(e) for e in elements[: LIMITS["actions_elements"]]]}
