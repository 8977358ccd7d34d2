"""The config's ``watcher:`` section: the node watcher of long-running processes (docs/watcher.md).

A module apart from ``bot/config.py`` (which reads it into ``Settings.watcher`` and re-exports
``WatcherConfig``) only because that module is at the size budget:

    watcher:
      enabled: true          # in worker and slack serve; the terminal never watches
      detect_after: 60       # seconds since a Lease's last renewal before its node is a suspect
      clusters: [prod]       # default: every configured cluster
      watch_timeout: 5       # seconds each watch call may wait for changes (the loop stops within it)
      interval: 5            # seconds between passes
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

Text = Annotated[str, Field(min_length=1)]


@dataclass(frozen=True)
class WatcherConfig:
    enabled: bool = True
    detect_after: float = 60.0
    clusters: tuple[str, ...] | None = None  # None: every configured cluster
    watch_timeout: int = 5
    interval: float = 5.0


class WatcherModel(BaseModel):
    """The section as the file writes it, strictly (unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    enabled: bool = True
    detect_after: Annotated[float, Field(ge=10, le=3600, allow_inf_nan=False)] = 60.0
    clusters: list[Text] | None = None
    watch_timeout: Annotated[int, Field(ge=1, le=300)] = 5
    interval: Annotated[float, Field(gt=0, le=300, allow_inf_nan=False)] = 5.0


def watcher_config(model: WatcherModel) -> WatcherConfig:
    return WatcherConfig(enabled=model.enabled, detect_after=model.detect_after,
                         clusters=tuple(model.clusters) if model.clusters is not None else None,
                         watch_timeout=model.watch_timeout, interval=model.interval)
