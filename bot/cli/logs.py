"""Logging, set up in one place for every command: human-readable lines or JSON lines, on stderr.

``--log-format text`` (the default, for a terminal) writes ``time level logger: message``;
``--log-format json`` (or ``RUNBOOK_BOT_LOG_FORMAT=json``, what a container sets) writes one JSON
object per line with ``ts`` (ISO-8601 UTC), ``level``, ``logger``, ``message`` and, where the
record has them, ``run_id``, ``step``, ``actor``, ``event`` and ``runbook`` (``bot.frontends.runlog``
sets them on every run's events), plus ``exc`` with the traceback. ``--log-level`` (or
``RUNBOOK_BOT_LOG_LEVEL``) sets the level; without either, the long-running commands (``worker``,
``slack serve``) log at INFO and the others at WARNING, without the log of runs' events (what
they print shows the run already).

Each record is written and flushed as it comes, and standard output is made line-buffered, so
nothing waits in a buffer when the process runs under a container runtime without a terminal.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

RUNS_LOGGER = "bot.runs"  # bot.frontends.runlog's
FIELDS = ("run_id", "step", "actor", "event", "runbook")
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}
_HANDLER_NAME = "runbook-bot"


class JsonLines(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                out[name] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


class Text(logging.Formatter):
    """``2026-12-03T09:05:04Z INFO bot.runs: message``, for people."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%SZ")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return datetime.fromtimestamp(record.created, UTC).strftime(datefmt or "%Y-%m-%dT%H:%M:%SZ")


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record comes (it may be replaced after setup)."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass


def add_arguments(parser: argparse.ArgumentParser, *, here: bool = False) -> None:
    """``--log-format`` and ``--log-level``: on the top-level parser, and again on a long-running
    command's (``here``) so they can follow its name too."""
    default = argparse.SUPPRESS if here else None
    parser.add_argument("--log-format", choices=("text", "json"), default=default,
                        help="log lines for people (text, the default) or JSON lines "
                        "(env RUNBOOK_BOT_LOG_FORMAT)")
    parser.add_argument("--log-level", choices=tuple(_LEVELS), default=default,
                        help="the least severe level logged (env RUNBOOK_BOT_LOG_LEVEL; default "
                        "info for worker and slack serve, warning otherwise)")


def configure_from(args: argparse.Namespace) -> None:
    """Logging as the command line, else the environment, else the command's default says."""
    from bot.config import log_defaults

    env_fmt, env_level = log_defaults()
    fmt = getattr(args, "log_format", None) or env_fmt or "text"
    asked = getattr(args, "log_level", None) or env_level
    serving = getattr(args, "default_log_level", None)
    configure(fmt=fmt, level=asked or serving or "warning")
    # a terminal command prints its run as it goes: the log of runs' events would say it twice
    logging.getLogger(RUNS_LOGGER).setLevel(logging.NOTSET if asked or serving else logging.ERROR)


def configure(*, fmt: str, level: str, stream: TextIO | None = None) -> logging.Handler:
    """Send every log record of ``level`` and above to ``stream`` (stderr) in ``fmt``.

    Called again (tests, ``main`` run twice in one process), it replaces its own handler.
    """
    root = logging.getLogger()
    for h in list(root.handlers):
        if h.get_name() == _HANDLER_NAME:
            root.removeHandler(h)
    # flushes after every record
    handler = logging.StreamHandler(stream) if stream is not None else _Stderr()
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JsonLines() if fmt == "json" else Text())
    root.addHandler(handler)
    root.setLevel(_LEVELS[level])
    logging.getLogger(RUNS_LOGGER).setLevel(logging.NOTSET)
    # libraries' chatter stays at WARNING unless asked for with debug
    quiet = logging.DEBUG if level == "debug" else logging.WARNING
    for name in ("waitress", "urllib3", "botocore", "kubernetes", "slack_sdk", "slack_bolt", "alembic"):
        logging.getLogger(name).setLevel(quiet)
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(line_buffering=True)
    return handler
