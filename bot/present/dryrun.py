"""What a dry run found, step by step, and whether the real run would get through.

A dry run plans every step and changes nothing, so "every step finished" says nothing about the
real run: a step the dry run only planned would wait for an approval, an interlock or a guard
that refused the plan would stop the run there. This module reads the finished dry run (each
step's state and the reason the conductor recorded when it stopped short) and says, per step,
``would apply``, ``would wait for approval from G, then apply``, ``would be refused by interlock
X``, ``skipped because ...``, and overall ``would succeed`` or ``would stop at step S because ...``.
The terminal, the Slack card and the transcripts show these same words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.present.views import RunView, StepView

# The reasons the conductor (bot/engine/conductor.py) gives a dry run's skipped step.
_PLANNED = re.compile(r"^dry run: planned only(?:; applying would need (\d+) approver\(s\) from (.+))?$",
                      re.S)
_INTERLOCK = re.compile(r"^dry run: interlock (\S+) would refuse: (.*)$", re.S)
_GUARD = re.compile(r"^dry run: a guard would block this step: (.*)$", re.S)
_WAIT = "dry run: the step would wait here"
_WAIT_UNTIL = "dry run: the step would wait until its condition holds"
_PERSON = "dry run: a person would be asked"

APPLY, APPROVAL, WAIT, PERSON, READ, SKIPPED, REFUSED, BLOCKED, FAILED = (
    "would apply", "would wait for approval", "would wait", "would wait for a person", "read",
    "skipped", "would be refused", "would be blocked", "failed")
STOPS = (REFUSED, BLOCKED, FAILED)


@dataclass(frozen=True)
class StepVerdict:
    key: str
    title: str
    kind: str  # one of APPLY ... FAILED
    text: str  # the verdict in words, e.g. "would be refused by interlock oos-taint: ..."
    changes: bool = False  # the real run would change something here


@dataclass(frozen=True)
class DryRunVerdict:
    steps: tuple[StepVerdict, ...]
    stop: StepVerdict | None  # the first step the real run would stop at, if any
    unapplied: tuple[str, ...]  # steps before ``stop`` that would change things the dry run did not

    @property
    def would_succeed(self) -> bool:
        return self.stop is None

    @property
    def headline(self) -> str:
        """``would succeed ...`` or ``would stop at step S because ...``."""
        if self.stop is None:
            asks = sum(1 for s in self.steps if s.kind in (APPROVAL, PERSON))
            waits = sum(1 for s in self.steps if s.kind == WAIT)
            extra = [f"{asks} decision{'s' if asks != 1 else ''} by people"] if asks else []
            extra += [f"{waits} wait{'s' if waits != 1 else ''}"] if waits else []
            return "would succeed" + (f" (after {' and '.join(extra)})" if extra else "")
        text = f"would stop at step {self.stop.key} because it {self.stop.text.rstrip('.')}"
        if self.unapplied:
            names = ", ".join(self.unapplied)
            text += (f" (as the systems are now: step{'s' if len(self.unapplied) > 1 else ''} "
                     f"{names} would change them first in a real run, which the dry run did not)")
        return text


def step_verdict(s: StepView) -> StepVerdict:
    message = s.message or ""
    if s.status == "succeeded":
        if s.action == "notify":
            return StepVerdict(s.key, s.title, READ,
                               "would post its message (a notify step runs in a dry run too)")
        return StepVerdict(s.key, s.title, READ, "read: ran (read-only)")
    if s.status == "failed":
        return StepVerdict(s.key, s.title, FAILED, f"failed: {s.error or message}")
    if s.status != "skipped":
        return StepVerdict(s.key, s.title, s.status, s.status)
    if m := _PLANNED.match(message):
        if m.group(1):
            return StepVerdict(s.key, s.title, APPROVAL,
                               f"would wait for approval from {m.group(2)}, then apply", True)
        return StepVerdict(s.key, s.title, APPLY, "would apply", True)
    if m := _INTERLOCK.match(message):
        return StepVerdict(s.key, s.title, REFUSED,
                           f"would be refused by interlock {m.group(1)}: {m.group(2)}")
    if m := _GUARD.match(message):
        return StepVerdict(s.key, s.title, BLOCKED, f"would be blocked by its guard: {m.group(1)}")
    if message == _WAIT:
        return StepVerdict(s.key, s.title, WAIT, "would wait here (for the systems to change)")
    if message == _WAIT_UNTIL:
        return StepVerdict(s.key, s.title, WAIT, "would wait until its condition holds")
    if message.startswith(_PERSON):
        return StepVerdict(s.key, s.title, PERSON, "would wait for a person to confirm it", True)
    return StepVerdict(s.key, s.title, SKIPPED, f"skipped because {message or 'it was skipped'}")


def dry_run_verdict(view: RunView) -> DryRunVerdict:
    verdicts = tuple(step_verdict(s) for s in view.steps)
    stop = next((v for v in verdicts if v.kind in STOPS), None)
    unapplied: tuple[str, ...] = ()
    if stop is not None:
        before = verdicts[:verdicts.index(stop)]
        unapplied = tuple(v.key for v in before if v.changes)
    return DryRunVerdict(steps=verdicts, stop=stop, unapplied=unapplied)


def verdict_lines(view: RunView) -> list[str]:
    """The end of a dry run in the terminal: a verdict per step, then the overall one."""
    verdict = dry_run_verdict(view)
    width = max([len(v.key) for v in verdict.steps] + [4])
    lines = [f"dry run {view.run_id}: what a real run would do"]
    lines += [f"  {v.key:<{width}}  {v.text}" for v in verdict.steps]
    lines.append(f"dry run {view.run_id} {verdict.headline}; nothing was changed")
    return lines
