"""The outcome of a run linked to a PagerDuty incident, posted to the incident as a note.

A run is linked to a PagerDuty incident when its incident reference is ``pagerduty:<id>``
(optionally followed by the incident's link): runs started from a card of a PagerDuty incident
are, and so is ``--incident pagerduty:Q1ABC``. Any other ``--incident`` text is kept as it is and
posts nothing.

Like the Slack outbox, the runner's notifier call does no network I/O: when a linked run finishes,
``PagerDutyNotes.run_changed`` records the note it owes in the shared database
(``bot.store.pagerduty_notes``: once per run, on whichever replica saw it finish) and wakes the
notes thread, which posts what is due through the REST API (``POST /incidents/{id}/notes``, as
the ``pagerduty.from_email`` user). A failed post stays owed and is tried again later with a
growing delay; a restart, or another replica, finds it in the table. A note PagerDuty refuses
for good (4xx), or one that failed ``give_up_after`` times, is marked failed with its error and
logged as a warning: never silently dropped. The clock is injected, so tests move retries on by
advancing it and call ``flush``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any, Protocol

from sqlalchemy.engine import Engine

from bot.config_pagerduty import PagerDutyConfig
from bot.engine.ports import Clock
from bot.engine.runstate import AuditDraft, RunState
from bot.engine.state import RUN_TERMINAL
from bot.errors import ExternalError, PermanentError
from bot.frontends.pagerduty import linked_incident
from bot.store.pagerduty_notes import NoteLog

log = logging.getLogger(__name__)

CLAIM_FOR = 60.0  # seconds a replica holds a note while it posts it
OUTCOMES = {"succeeded": "succeeded", "partial": "finished, only partly resolving the incident",
            "failed": "failed", "aborted": "was aborted"}


class Notes(Protocol):
    """Where notes go (``bot.clients.pagerduty.PagerDutyClient``)."""

    def add_note(self, incident_id: str, *, content: str, from_email: str) -> str: ...


def note_text(state: RunState, *, transcript_url: str | None) -> str:
    """The note: which run, how it ended and why, what it left in place, where its transcript is."""
    how = OUTCOMES.get(state.status.value, state.status.value)
    kind = "Dry run" if state.dry_run else "Run"
    lines = [f"runbook-bot: {kind} {state.run_id} of {state.runbook} {how}."]
    if state.outcome:
        lines.append(state.outcome)
    lines += [f"Left in place: {c}" for c in state.compensations[:5]]
    if transcript_url:
        lines.append("Transcript: " + transcript_url.replace("{run_id}", state.run_id))
    else:
        lines.append(f"Transcript: runbook-bot export {state.run_id}")
    return "\n".join(lines)[:25000]


class PagerDutyNotes:
    """The runner's Notifier for PagerDuty notes, and the thread that posts them."""

    def __init__(self, *, config: PagerDutyConfig, client: Notes, notes: NoteLog, clock: Clock,
                 interval: float = 5.0, first_delay: float = 30.0, max_delay: float = 1800.0,
                 give_up_after: int = 20) -> None:
        self.config = config
        self.client = client
        self.notes = notes
        self.clock = clock
        self.interval = interval
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.give_up_after = give_up_after
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the Notifier port ----------------------------------------------------------------------

    def run_changed(self, state: RunState, *, events: Sequence[AuditDraft],
                    messages: Sequence[str]) -> None:
        """Called by the runner after a save: a linked run that finished owes its note."""
        if state.status not in RUN_TERMINAL:
            return
        linked = linked_incident(state.incident)
        if linked is None:
            return
        try:
            owed = self.notes.owe(run_id=state.run_id, incident_id=linked[0],
                                  content=note_text(state, transcript_url=self.config.transcript_url),
                                  now=self._now())
        except Exception:  # the run is saved; a note not recorded is said, never raised into it
            log.exception("could not record the PagerDuty note of run %s", state.run_id)
            return
        if owed:
            self._wake.set()

    # -- posting --------------------------------------------------------------------------------

    def _now(self) -> float:
        return self.clock.now().timestamp()

    def flush(self) -> int:
        """Post every note due now; how many PagerDuty took."""
        now = self._now()
        took = 0
        for note in self.notes.claim_due(now=now, hold=CLAIM_FOR):
            try:
                note_id = self.client.add_note(note.incident_id, content=note.content,
                                               from_email=self.config.from_email or "")
            except ExternalError as e:
                tries = note.attempts + 1
                final = isinstance(e, PermanentError) or tries >= self.give_up_after
                delay = min(self.max_delay, self.first_delay * 2 ** note.attempts)
                self.notes.failed_once(note.run_id, error=str(e),
                                       retry_at=None if final else now + delay)
                if final:
                    log.warning("gave up the PagerDuty note of run %s on incident %s after %d "
                                "tries: %s", note.run_id, note.incident_id, tries, e)
                else:
                    log.warning("could not post the PagerDuty note of run %s on incident %s "
                                "(try %d; again in %.0f s): %s", note.run_id, note.incident_id,
                                tries, delay, e)
                continue
            self.notes.posted(note.run_id, note_id=note_id)
            log.info("posted the outcome of run %s to PagerDuty incident %s", note.run_id,
                     note.incident_id)
            took += 1
        return took

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.flush()
            except Exception:  # the database was away: the notes stay owed
                log.exception("could not post PagerDuty notes")
            self._wake.wait(self.interval)
            self._wake.clear()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="runbook-bot-pagerduty",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


def notes_for(config: PagerDutyConfig, *, notifiers: list[Any], engine: Engine,
              clock: Clock) -> PagerDutyNotes | None:
    """The notes notifier where notes are configured (``api_token`` and ``from_email``), added to
    ``notifiers`` (a runner's) unless one is there already; not yet started. None otherwise."""
    if not config.posts_notes:
        return None
    for n in notifiers:
        if isinstance(n, PagerDutyNotes):
            return None
    from bot.clients.pagerduty import PagerDutyClient

    notes = PagerDutyNotes(config=config, clock=clock, notes=NoteLog(engine),
                           client=PagerDutyClient(base_url=config.api_url,
                                                  token=config.api_token or "",
                                                  backoff=config.retry_backoff))
    notifiers.append(notes)
    return notes
