"""Where runbooks come from: the shipped ones, then the configured directories on top.

The runbooks that come with runbook-bot are part of every install: in a source checkout they are
``runbooks/`` at the top of the tree (beside ``templates/``); a wheel installs them as data files
under ``<prefix>/share/runbook-bot/runbooks`` (``[tool.setuptools.data-files]`` in pyproject.toml).
The ``runbooks_dir`` setting lists directories that add to them, in order: a runbook whose name is
already taken by an earlier directory replaces it, and the replacement is reported naming both
files, so a site's own copy of a shipped runbook is never used by surprise.

A file that does not parse still claims its file name: a broken override of ``node-dead-ngns``
makes ``node-dead-ngns`` fail with the file's problems instead of silently running the shipped
version the operator meant to replace.
"""

from __future__ import annotations

import sys
import sysconfig
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bot.errors import NotFound, RunbookError
from bot.runbook.loader import runbook_files
from bot.runbook.model import Runbook

SHARE = Path("share") / "runbook-bot" / "runbooks"


def shipped_dir() -> Path:
    """``runbooks/`` in a source checkout, else where a wheel installs the shipped runbooks."""
    checkout = Path(__file__).resolve().parents[2] / "runbooks"
    if (checkout.parent / "pyproject.toml").is_file() and checkout.is_dir():
        return checkout
    for base in dict.fromkeys((sysconfig.get_path("data"), sys.prefix, sys.base_prefix)):
        installed = Path(base) / SHARE
        if installed.is_dir():
            return installed
    return checkout


def search_path(directories: Sequence[str | Path], *, shipped: bool = True) -> list[Path]:
    """The directories looked in, lowest first; a directory listed twice counts once."""
    out: list[Path] = []
    seen: set[Path] = set()
    for d in ([shipped_dir()] if shipped else []) + [Path(d) for d in directories]:
        key = d.resolve()
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


@dataclass(frozen=True)
class Entry:
    """The file that provides one runbook name: its parsed runbook, or why it does not parse."""

    path: Path
    text: str
    runbook: Runbook | None
    error: RunbookError | None = None


@dataclass
class Index:
    entries: dict[str, Entry] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)  # "runbook X: B overrides A"


def build_index(directories: Sequence[Path], *, read: Callable[[Path], str],
                parse: Callable[[str, str], Runbook]) -> Index:
    """Every runbook name and the file that provides it, later directories winning."""
    index = Index()
    for directory in directories:
        if not directory.is_dir():
            raise NotFound(f"runbooks directory {directory} does not exist "
                           "(check runbooks_dir or RUNBOOK_BOT_RUNBOOKS_DIR)")
        here: set[str] = set()
        for path in runbook_files(directory):
            try:
                text = read(path)
                runbook: Runbook | None = parse(text, str(path))
                entry = Entry(path, text, runbook)
            except RunbookError as e:
                entry = Entry(path, "", None, e)
            name = entry.runbook.name if entry.runbook is not None else path.stem
            if name in here:
                continue  # two files of one directory with one name: the first (sorted) is used
            here.add(name)
            earlier = index.entries.get(name)
            if earlier is not None:
                index.overrides.append(f"runbook {name!r}: {path} overrides {earlier.path}")
            index.entries[name] = entry
    return index
