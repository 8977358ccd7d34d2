"""Runbooks by name, from a directory: what the runner starts runs from.

A run keeps the text it started with, so ``parse`` re-reads that text (not the file, which may have
changed since) when a run resumes after a restart. Parsing and validating a runbook costs
milliseconds, so parsed documents are kept by their exact text (``ParseCache``): starting the
hundredth run of the same runbook, a burst of runs from Slack, or drawing a run's card again
parses it once. The source's cache is the only one in the process: the runner and every
front-end parse through ``parse``.
"""

from __future__ import annotations

import functools
from pathlib import Path

from bot.errors import NotFound, RunbookError
from bot.runbook.loader import load_text, read_runbook_text, runbook_files
from bot.runbook.model import Runbook
from bot.runbook.validate import Catalog

# Parsed runbooks kept per source, by count. A long-running server meets a new text only when a
# runbook file is edited or an old run (which keeps the text it started with) is resumed or shown,
# so this holds every runbook and its recent edits. The shipped runbooks hold 10 to 70 KiB each
# once parsed (tracemalloc), so a full cache of runbooks that size stays under 20 MiB.
PARSED_RUNBOOKS = 256


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
    def __init__(self, directory: str | Path, *, catalog: Catalog | None) -> None:
        self.directory = Path(directory)
        self.catalog = catalog
        self.parsed = ParseCache(catalog)

    def _files(self) -> list[Path]:
        if not self.directory.is_dir():
            raise NotFound(f"runbooks directory {self.directory} does not exist "
                           "(set runbooks_dir or RUNBOOK_BOT_RUNBOOKS_DIR)")
        return runbook_files(self.directory)

    def names(self) -> list[str]:
        out = []
        for path in self._files():
            try:
                out.append(self.parse(read_runbook_text(path), file=str(path)).name)
            except RunbookError:
                continue
        return sorted(out)

    def get(self, name: str) -> tuple[Runbook, str, str]:
        for path in self._files():
            if path.stem == name:
                text = read_runbook_text(path)
                runbook = self.parse(text, file=str(path))
                if runbook.name == name:
                    return runbook, text, str(path)
        for path in self._files():  # a file whose name differs from metadata.name
            text = read_runbook_text(path)
            try:
                runbook = self.parse(text, file=str(path))
            except RunbookError:
                continue
            if runbook.name == name:
                return runbook, text, str(path)
        known = ", ".join(self.names()) or "none"
        raise NotFound(f"no runbook named {name!r} in {self.directory}; known: {known}")

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
