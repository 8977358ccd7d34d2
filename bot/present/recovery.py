"""Time to recovery: the stages a run went through, read from its audit events alone.

``stage_times(events)`` is the one reading of a run's stages, for the transcript's "Time to
recovery" timeline, the metrics' histogram per runbook and stage, and the recovery bench. Each
stage comes from an event that records it (``docs/transcript.md``, "Time to recovery"):

- ``detected``: ``run.linked``'s ``detected_at`` (what suggested the run first saw the trouble);
- ``card_shown``: ``run.linked``'s ``shown_at`` (the card offering the run was posted);
- ``run_started``: ``run.created``;
- ``approval_asked`` and ``approval_given``, per step: ``approval.requested``, and the
  ``approval.granted`` that brought the last needed approval;
- ``fenced``, ``tainted``, ``attachments_gone``, ``volume_attached``, ``pod_running``:
  ``stage.reached`` (``bot/engine/stages.py`` says which step results show them);
- ``run_finished``: ``run.finished``.

Times count from ``detected`` when the run knows it, else from the run's start. Each stage's share
is the part of the whole (up to the last stage) spent since the stage before it. Pure: events in,
stages out; an event is a stored ``Event``, an ``AuditDraft`` or the dict of a JSON export.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup

from bot.engine.events import EventType as T
from bot.present.chart import Row, timeline_svg
from bot.present.decision_summary import DecisionSummary

STAGES = ("detected", "card_shown", "run_started", "approval_asked", "approval_given", "fenced",
          "tainted", "attachments_gone", "volume_attached", "pod_running", "run_finished")
# the events a stage is read from (a reader that keeps only some events keeps these)
SOURCES = frozenset({T.RUN_CREATED, T.RUN_LINKED, T.APPROVAL_REQUESTED, T.APPROVAL_GRANTED,
                     T.STAGE_REACHED, T.RUN_FINISHED})


@dataclass(frozen=True)
class Stage:
    """One stage reached: when, how long after the start, and its share of the whole."""

    stage: str  # one of STAGES
    at: str  # ISO time it was observed (as recorded)
    seconds: float  # since detected, else since the run started
    took: float  # since the stage before it
    share: float  # took / the whole (0 to 1)
    source: str  # what observed it: watcher:..., alert:..., step:KEY, the run
    step: str | None = None
    subject: str = ""  # node, volume, pod it concerns, in words


def _get(e: Any, name: str) -> Any:
    return e.get(name) if isinstance(e, Mapping) else getattr(e, name)


def _instant(ts: str) -> datetime | None:
    try:
        when = datetime.fromisoformat(ts)
    except (TypeError, ValueError):
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _seen(type_: str, ts: str, p: Mapping[str, Any]) -> list[tuple[str, str, str, str | None, str]]:
    """(stage, at, source, step, subject) for what one event records."""
    step = str(p["step"]) if p.get("step") else None
    if type_ == T.RUN_LINKED:
        by = str(p.get("suggested_by") or "the run")
        return [(name, str(p[field]), by, None, "")
                for name, field in (("detected", "detected_at"), ("card_shown", "shown_at"))
                if p.get(field)]
    if type_ == T.RUN_CREATED:
        return [("run_started", ts, "the run", None, "")]
    if type_ == T.APPROVAL_REQUESTED:
        return [("approval_asked", ts, f"step:{step}", step, "")]
    if type_ == T.APPROVAL_GRANTED and int(p.get("count") or 0) >= int(p.get("needed") or 1):
        return [("approval_given", ts, f"step:{step}", step, "")]
    if type_ == T.STAGE_REACHED:
        subject = ", ".join(f"{k} {p[k]}" for k in ("node", "volume", "pod") if p.get(k))
        source = str(p.get("source", ""))
        return [(str(p.get("stage", "")), str(p.get("at") or ts), source,
                 source.removeprefix("step:") if source.startswith("step:") else None, subject)]
    if type_ == T.RUN_FINISHED:
        return [("run_finished", ts, str(p.get("status", "")), None, "")]
    return []


def stage_times(events: Iterable[Any]) -> list[Stage]:
    """The stages of a run in time order (chain order for one instant); empty when the events
    hold no start to count from."""
    seen: list[tuple[datetime, int, tuple[str, str, str, str | None, str]]] = []
    reached: set[tuple[str, str]] = set()
    for e in events:
        type_ = str(_get(e, "type"))
        if type_ not in SOURCES:
            continue
        for s in _seen(type_, str(_get(e, "ts")), _get(e, "payload") or {}):
            when = _instant(s[1])
            if when is not None and (type_ != T.STAGE_REACHED or (s[0], s[4]) not in reached):
                reached.add((s[0], s[4]))  # a stage of the world: the first time it was seen
                seen.append((when, len(seen), s))
    seen.sort(key=lambda x: (x[0], x[1]))
    starts = [w for w, _, s in seen if s[0] == "detected"] or [w for w, _, s in seen
                                                               if s[0] == "run_started"]
    if not starts:
        return []
    origin = starts[0]
    offsets = [max(0.0, (w - origin).total_seconds()) for w, _, _ in seen]
    total = max(offsets, default=0.0)
    out: list[Stage] = []
    previous = 0.0
    for offset, (_, _, (name, at, source, step, subject)) in zip(offsets, seen, strict=True):
        took = max(0.0, offset - previous)
        previous = max(previous, offset)
        out.append(Stage(stage=name, at=at, seconds=round(offset, 3), took=round(took, 3),
                         share=round(took / total, 4) if total else 0.0, source=source,
                         step=step, subject=subject))
    return out


def first_times(stages: Iterable[Stage]) -> dict[str, float]:
    """Each stage's first time (seconds since the start), as the metrics observe them."""
    first: dict[str, float] = {}
    for s in stages:
        first.setdefault(s.stage, s.seconds)
    return first


# the stages only runs that record their recovery have (an older run shows no timeline of them)
RECORDED = frozenset({"detected", "card_shown", "fenced", "tainted", "attachments_gone",
                      "volume_attached", "pod_running"})


def recovery_of(events: Iterable[Any]) -> list[Stage]:
    """The stages the transcript shows: none for a run that recorded no stage of its recovery."""
    stages = stage_times(events)
    return stages if any(s.stage in RECORDED for s in stages) else []


def recovery_svg(stages: Sequence[Stage], *, label: Callable[[str | None], str]) -> Markup:
    """The stages on the run's chart (``chart.timeline_svg``): one row per stage, its bar from
    the stage before it, titled with its share of the whole."""
    rows = [Row(f"{i}:{s.stage}", f"{s.stage} {s.share:.0%}" + (f" {s.subject}" if s.subject else ""),
                "succeeded", stages[i - 1].at if i else s.at, s.at) for i, s in enumerate(stages)]
    if not rows:
        return Markup("")
    ends = sorted(stages, key=lambda s: s.seconds)
    return timeline_svg(rows, NO_DECISIONS, start=ends[0].at, end=ends[-1].at, label=label)


NO_DECISIONS = DecisionSummary(happened="", requester="", decisions=[], interlocks=[],
                               break_glass=[], changes=[], in_place=[], waits=[])
