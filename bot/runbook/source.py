"""Runbooks by name, from the shipped runbooks and directories: what the runner starts runs from.

A run keeps the text it started with, so ``parse`` re-reads that text (not the file, which may have
changed since) when a run resumes after a restart. Parsing and validating a runbook costs
milliseconds, so parsed documents are kept by their exact text (``ParseCache``): starting the
hundredth run of the same runbook, a burst of runs from Slack, or drawing a run's card again
parses it once. The source's cache is the only one in the process: the runner and every
front-end parse through ``parse``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from bot.errors import NotFound
from bot.runbook.dirs import Index, build_index, search_path
from bot.runbook.loader import load_text, read_runbook_text, runbook_files
from bot.runbook.model import Runbook
from bot.runbook.validate import Catalog

# Parsed runbooks kept per source, by count. A long-running server meets a new text only when a
# runbook file is edited or an old run (which keeps the text it started with) is resumed or shown,
# so this holds every runbook and its recent edits. The shipped runbooks hold 10 to 70 KiB each
# once parsed (tracemalloc), so a full cache of runbooks that size stays under 20 MiB.
PARSED_RUNBOOKS = 256

log = logging.getLogger(__name__)


class ParseCache:
    """Parsed runbooks by (file, text); the least recently used is dropped beyond ``size``.

    A changed file has a new text and is parsed again. Only valid runbooks are kept: a text that
    fails to parse raises again the next time (it costs the same milliseconds, and says why).
    """

    def __init__(self, catalog: Catalog | None, *, size: int = PARSED_RUNBOOKS) -> None:
        self.catalog = catalog
        self._parsed = functools.lru_cache(maxsize=size)(self._load)

    def _load(self, file: str, text: str) -> Runbook:
        return load_text(text, file=file, catalog=self.catalog)

    def parse(self, text: str, *, file: str) -> Runbook:
        return self._parsed(file, text)

    def __len__(self) -> int:
        return self._parsed.cache_info().currsize


class DirectorySource:
    """Runbooks by name from the shipped runbooks and the given directories (``bot.runbook.dirs``).

    A runbook that a later directory replaces is reported once per source through ``on_override``
    (a log warning unless given), naming both files. ``parsed`` is a cache to share with other
    sources whose catalog holds the same actions (a new one, for ``catalog``, unless given).
    """

    def __init__(self, directories: str | Path | Sequence[str | Path], *, catalog: Catalog | None,
                 shipped: bool = True, on_override: Callable[[str], None] | None = None,
                 parsed: ParseCache | None = None) -> None:
        listed = [directories] if isinstance(directories, str | Path) else list(directories)
        self.directories = search_path(listed, shipped=shipped)
        self.catalog = catalog
        self.parsed = parsed if parsed is not None else ParseCache(catalog)
        self._on_override = on_override or log.warning
        self._reported: set[str] = set()

    def index(self) -> Index:
        """Every name and its file, read now (a file edited since the last call is seen)."""
        index = build_index(self.directories, read=read_runbook_text,
                            parse=lambda text, file: self.parse(text, file=file))
        for line in index.overrides:
            if line not in self._reported:
                self._reported.add(line)
                self._on_override(line)
        return index

    def files(self) -> list[Path]:
        """Every runbook file in every directory, including the ones a later directory replaces."""
        self.index()  # a missing directory is reported
        return [p for d in self.directories for p in runbook_files(d)]

    def names(self) -> list[str]:
        return sorted(n for n, e in self.index().entries.items() if e.runbook is not None)

    def get(self, name: str) -> tuple[Runbook, str, str]:
        index = self.index()
        entry = index.entries.get(name)
        if entry is None:
            known = ", ".join(sorted(n for n, e in index.entries.items() if e.runbook)) or "none"
            where = ", ".join(map(str, self.directories))
            raise NotFound(f"no runbook named {name!r} in {where}; known: {known}")
        if entry.error is not None:
            raise entry.error
        assert entry.runbook is not None
        # the file's name, not its path on this host: it is recorded with the run (the audit,
        # transcripts), and errors in the stored text are reported against it
        return entry.runbook, entry.text, entry.path.name

    def parse(self, text: str, *, file: str) -> Runbook:
        return self.parsed.parse(text, file=file)


class TextSource:
    """Runbooks given as text (tests, the demo): name -> YAML."""

    def __init__(self, texts: dict[str, str], *, catalog: Catalog | None) -> None:
        self.catalog = catalog
        self._texts = dict(texts)
        self.parsed = ParseCache(catalog)

    def names(self) -> list[str]:
        return sorted(self._texts)

    def get(self, name: str) -> tuple[Runbook, str, str]:
        if name not in self._texts:
            raise NotFound(f"no runbook named {name!r}; known: {', '.join(sorted(self._texts))}")
        text = self._texts[name]
        return self.parse(text, file=f"{name}.yaml"), text, f"{name}.yaml"

    def parse(self, text: str, *, file: str) -> Runbook:
        return self.parsed.parse(text, file=file)
