"""Which runbooks answer an alert, and the params the alert's labels fill in.

A runbook's ``spec.triggers`` name an alert by its ``alertname`` and optional label matchers,
and map labels (and annotations) to params with templates that see only ``labels`` and
``annotations``. This module is the one place that reads them: the Alertmanager webhook asks
``suggestions`` for every alert it receives. Pure: no I/O, nothing started.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from bot.errors import ExpressionError
from bot.runbook.autorun import may_auto_run
from bot.runbook.model import Runbook
from bot.runbook.templating import render


@dataclass(frozen=True)
class Suggestion:
    """A runbook that answers an alert, with the params filled from it (or why they could not be)."""

    runbook: str
    params: Mapping[str, str] = field(default_factory=dict)
    auto_run: bool = False
    problem: str | None = None  # a template failed (a label the alert does not carry)


def fill(runbook: Runbook, labels: Mapping[str, str],
         annotations: Mapping[str, str]) -> list[Suggestion]:
    """Every trigger of ``runbook`` the alert matches, first match per runbook only."""
    context = {"labels": dict(labels), "annotations": dict(annotations)}
    for trigger in runbook.spec.triggers:
        if not trigger.matches(labels):
            continue
        params: dict[str, str] = {}
        try:
            for name, source in trigger.params.items():
                params[name] = render(source, context).strip()
        except ExpressionError as e:
            return [Suggestion(runbook.name, params, False, f"param {name!r}: {e}")]
        empty = [k for k, v in params.items() if not v]
        if empty:
            return [Suggestion(runbook.name, params, False,
                               f"the alert leaves {', '.join(empty)} empty")]
        # validation refuses auto_run on a runbook that writes; checked again where it acts
        return [Suggestion(runbook.name, params, may_auto_run(runbook))]
    return []


def suggestions(runbooks: Iterable[Runbook], labels: Mapping[str, str],
                annotations: Mapping[str, str]) -> list[Suggestion]:
    """What each runbook that answers this alert would be started with, by runbook name."""
    out: list[Suggestion] = []
    for runbook in sorted(runbooks, key=lambda r: r.name):
        out.extend(fill(runbook, labels, annotations))
    return out
