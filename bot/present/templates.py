"""The Jinja2 environment for ``templates/``: where the files are, and the filters they may use.

Templates fail loudly (``StrictUndefined``): a field that is missing stops the rendering instead of
printing an empty cell into a postmortem. HTML templates (``*.html.j2``) are autoescaped. Markdown
has no autoescape, so its templates pass every value through a filter:

- ``md``: text safe anywhere in Markdown. The characters that can open markup inline
  (``\\`*_[]<>|#~&``) get a backslash, a leading list or heading marker is escaped, and line breaks
  and control characters become spaces, so a hostile pod name or chat message stays the text it
  is: no HTML tag, no link, no emphasis, no new table column or list.
- ``code``: a code span; text that holds a backtick or a pipe falls back to ``md``.
- ``when``: an ISO-8601 time shown in the zone named by the template's ``timezone`` variable,
  e.g. ``2026-01-01 01:00:05 CET``.
- ``duration``, ``value`` (plain data as one line of text) and ``short`` (a hash's first 12).

The templates live in ``templates/`` at the top of the source tree, beside ``runbooks/``, as the
architecture lays out: a source checkout and an editable install read them there. A wheel installs
them as data files under ``<prefix>/share/runbook-bot/templates`` (``[tool.setuptools.data-files]``
in pyproject.toml), the second place looked, so they need not move into the package.
"""

from __future__ import annotations

import re
import sys
import sysconfig
from datetime import UTC, datetime, tzinfo
from functools import lru_cache
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import jinja2

from bot.errors import ConfigError
from bot.present import times
from bot.present.events import short_hash, value_text


def zone(name: str | None) -> tzinfo:
    """The zone for ``--tz``: an IANA name; UTC when none is given."""
    if not name or name.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise ConfigError(f"unknown time zone {name!r}: give an IANA name like Europe/Paris") from e


# Characters that can open Markdown (or HTML) markup inline; control characters and line breaks
# become spaces so a value stays inside its table cell or list item.
_MD = {ord(c): "\\" + c for c in "\\`*_[]<>|#~&"}
_MD.update({c: " " for c in (*range(0x20), 0x7F, 0x2028, 0x2029)})
# a list item or setext marker only counts when followed by a space or the end
_NEEDS_MD = re.compile(r"[\\`*_\[\]<>|#~&\x00-\x1f\x7f\u2028\u2029]|^\s*(?:[-+=]|\d{1,9}[.)])(?:\s|$)")
_BLOCK_START = re.compile(r"^(\s*)(?:([-+=])|(\d{1,9})([.)]))(?=\s|$)")
_CODE = {c: " " for c in (*range(0x20), 0x7F, 0x2028, 0x2029)}


def _unblock(m: re.Match[str]) -> str:
    """A leading list or heading marker, escaped so the text stays a paragraph."""
    if m.group(2):
        return f"{m.group(1)}\\{m.group(2)}"
    return f"{m.group(1)}{m.group(3)}\\{m.group(4)}"


def md(value: Any) -> str:
    """Text safe anywhere in Markdown: in a table cell, a list item or a heading."""
    if value is None:
        return ""
    return _md(value if isinstance(value, str) else value_text(value))


@lru_cache(maxsize=65536)
def _md(text: str) -> str:
    if not _NEEDS_MD.search(text):  # most values (names, ids, times) need nothing
        return text
    text = text.translate(_MD)
    if text and text[0] in "-+=0123456789 ":
        text = _BLOCK_START.sub(_unblock, text, count=1)
    return text


def md_code(value: Any) -> str:
    """A code span, or escaped text where a backtick or a pipe would end the span or the cell."""
    text = (value_text(value) if value is not None else "").translate(_CODE).strip()
    if not text:
        return ""
    if "`" in text or "|" in text:
        return md(text)
    return f"`{text}`"


def md_expr(value: Any, cell: bool = True) -> str:
    """A runbook expression as a code span, pipes and all: in a table ``cell`` a pipe is written
    ``\\|``, which GitHub's tables read as a pipe inside the span; a backtick widens the fence."""
    text = (value_text(value) if value is not None else "").translate(_CODE).strip()
    if not text:
        return ""
    if cell:
        text = text.replace("|", "\\|")
    if "`" in text:
        return f"`` {text} ``"
    return f"`{text}`"


@jinja2.pass_context
def when(ctx: Any, value: str | None) -> str:
    """An ISO-8601 time for reading, in the template's zone: ``2026-01-01 01:00:05 CET``.

    The result is digits, letters and ``:+-.`` only, so Markdown needs no escaping of it.
    """
    return _when(value or "", ctx.get("timezone") or "UTC")


def when_text(value: str | None, tz: str) -> str:
    """``when`` outside a template: an ISO-8601 time for reading, in the zone ``tz``."""
    return _when(value or "", tz)


@lru_cache(maxsize=8192)
def _when(value: str, tz: str) -> str:
    if not value:
        return "-"
    try:
        t = datetime.fromisoformat(value)
    except ValueError:  # not one of ours: shown, but never as markup in either format
        return "invalid time " + re.sub(r"[^0-9A-Za-z:+. -]", "?", value)
    if t.tzinfo is None:
        return t.strftime("%Y-%m-%d %H:%M:%S")
    return times.clock(t, _zone_cached(tz))  # an ISO offset has no zone name; this restores it


@lru_cache(maxsize=64)
def _zone_cached(name: str) -> tzinfo:
    return zone(name)


def duration(seconds: float | None) -> str:
    return times.duration(seconds)


def template_dirs(probe: str = "transcript.md.j2") -> list[Path]:
    """Where the templates are: the source tree's ``templates/``, then the installed data files."""
    dirs = [Path(__file__).resolve().parents[2] / "templates"]
    for base in dict.fromkeys((sysconfig.get_path("data"), sys.prefix)):
        dirs.append(Path(base) / "share" / "runbook-bot" / "templates")
    return [d for d in dirs if (d / probe).is_file()]


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    dirs = template_dirs()
    if not dirs:
        raise ConfigError("the templates are not installed (looked for templates/ in the source "
                          "tree and share/runbook-bot/templates under the install prefix)")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(d) for d in dirs]),
        undefined=jinja2.StrictUndefined,
        autoescape=lambda name: bool(name and name.endswith(".html.j2")),
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
    )
    env.filters.update(md=md, code=md_code, when=when, duration=duration, value=value_text,
                       short=short_hash, expr=md_expr)
    # a step's guards show their expressions in their own table: its other conditions go apart
    env.tests["guard_detail"] = lambda d: str(d).startswith("guard: ")
    return env
