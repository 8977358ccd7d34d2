"""The run as a picture: an inline SVG timeline for the HTML transcript.

People would rather look than read: one row per step, time running left to right from the run's
start to its end, each step's span as a bar coloured by its outcome, the waits drawn over it
(amber while people were asked, blue while the world was polled), and a mark for every decision
(approved, rejected, expired, break-glass). Every shape carries a ``<title>`` so a reader hovering
it sees the exact time and words. The SVG is plain markup, with no script and no external asset,
so the transcript stays one self-contained file; every text in it is escaped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from markupsafe import Markup, escape

from bot.present import times
from bot.present.decision_summary import DecisionSummary

WIDTH = 960
LABEL = 230  # the column of step names
ROW = 24
TOP = 28  # the axis labels
BOTTOM = 34  # the legend
COLORS = {"succeeded": "#1a7f37", "failed": "#cf222e", "rejected": "#cf222e", "expired": "#cf222e",
          "aborted": "#cf222e", "skipped": "#afb8c1"}
WAIT_COLORS = {"approval": "#d4a72c", "confirmation": "#d4a72c", "world": "#0969da"}
MARKS = {"approved": "#1a7f37", "confirmed": "#1a7f37", "rejected": "#cf222e",
         "expired": "#cf222e", "invalidated": "#9a6700", "aborted": "#cf222e"}


@dataclass(frozen=True)
class Row:
    """What the chart draws of one step."""

    key: str
    title: str
    status: str
    started: str | None
    finished: str | None


def _t(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _span(seconds: float) -> str:
    return times.duration(seconds)


def _clip(text: str, size: int = 30) -> str:
    return text if len(text) <= size else text[: size - 1] + "…"


def timeline_svg(rows: Sequence[Row], summary: DecisionSummary, *, start: str | None,
                 end: str | None, label: Callable[[str | None], str] = lambda t: t or "-") -> Markup:
    """The SVG chart of a run, or an empty string when the run has no time span to draw.

    ``label`` writes a time for the axis (the transcript's ``when``: its zone, to the second).
    """
    t0, t1 = _t(start), _t(end)
    if t0 is None or t1 is None or not rows:
        return Markup("")
    span = max((t1 - t0).total_seconds(), 1.0)
    plot = WIDTH - LABEL - 10
    index = {r.key: i for i, r in enumerate(rows)}
    height = TOP + ROW * len(rows) + BOTTOM

    def x(text: str | None) -> float:
        when = _t(text)
        if when is None:
            return float(LABEL)
        offset = min(max((when - t0).total_seconds(), 0.0), span)
        return round(LABEL + plot * offset / span, 1)

    def y(key: str) -> int:
        return TOP + ROW * index[key]

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" '
           f'viewBox="0 0 {WIDTH} {height}" width="100%" '
           f'aria-label="Timeline of the run: {len(rows)} steps over {span:g} seconds">',
           "<title>Timeline of the run</title>",
           f'<text x="{LABEL}" y="14" class="axis">{escape(label(start))}</text>',
           f'<text x="{WIDTH - 10}" y="14" class="axis" text-anchor="end">'
           f'{escape(label(end))} (+{escape(_span(span))})</text>',
           f'<line x1="{LABEL}" y1="{TOP - 6}" x2="{WIDTH - 10}" y2="{TOP - 6}" class="rule"/>']
    for r in rows:
        top = y(r.key)
        out.append(f'<text x="4" y="{top + 16}" class="label">{escape(_clip(r.title))}'
                   f"<title>{escape(r.title)} ({escape(r.key)})</title></text>")
        if r.started is None and r.finished is None:
            continue
        x0 = x(r.started or r.finished)
        x1 = x(r.finished or end)
        color = COLORS.get(r.status, "#57606a")
        out.append(f'<rect x="{x0}" y="{top + 4}" width="{max(x1 - x0, 2.0)}" height="{ROW - 8}" '
                   f'fill="{color}" fill-opacity="0.35" class="step s-{escape(r.status)}">'
                   f"<title>{escape(r.title)}: {escape(r.status)}, {escape(label(r.started))} to "
                   f"{escape(label(r.finished))}</title></rect>")
    for w in summary.waits:
        if w.step not in index:
            continue
        top = y(w.step)
        x0, x1 = x(w.started), x(w.ended or end)
        color = WAIT_COLORS.get(w.kind, "#57606a")
        length = times.duration(w.seconds) if w.seconds is not None else "open"
        out.append(f'<rect x="{x0}" y="{top + 9}" width="{max(x1 - x0, 2.0)}" height="{ROW - 18}" '
                   f'fill="{color}" class="wait w-{escape(w.kind)}"><title>waited for '
                   f"{escape(w.kind)} {length}: {escape(w.outcome)}</title></rect>")
    for d in [*summary.decisions, *summary.break_glass]:
        if d.step not in index:
            continue
        cx, cy = x(d.at), y(d.step) + ROW // 2
        color = MARKS.get(d.kind, "#8250df")
        out.append(f'<circle cx="{cx}" cy="{cy}" r="5" fill="{color}" class="mark m-{escape(d.kind)}">'
                   f"<title>{escape(label(d.at))} {escape(d.by)}: {escape(d.text)}</title></circle>")
    legend = TOP + ROW * len(rows) + 22
    items = [("#1a7f37", "step succeeded"), ("#cf222e", "failed or refused"),
             ("#d4a72c", "waiting for people"), ("#0969da", "waiting for the world"),
             ("#8250df", "break-glass")]
    lx = LABEL
    for color, text in items:
        out.append(f'<rect x="{lx}" y="{legend - 9}" width="10" height="10" fill="{color}"/>'
                   f'<text x="{lx + 14}" y="{legend}" class="legend">{text}</text>')
        lx += 14 + 7 * len(text) + 22  # the monospace font is 7 px a character
    out.append("</svg>")
    return Markup("".join(out))
