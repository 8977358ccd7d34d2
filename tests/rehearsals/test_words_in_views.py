"""What a person reads of a recovery is words, not the runbook's expressions: the terminal, the
Slack card and the transcript of a node-dead-ngns run played in the sandbox, against golden files.

Each view must show the skipped steps collapsed into one line that says why they were not needed,
and a wait as what it waits for, its progress, its next check and when it gives up; no view's
main text may quote an expression (``steps.``, ``result[``, ``params.``, ``{{``). Expressions
stay on demand: ``status --verbose``, the thread, the transcript's code spans.

    RUNBOOK_BOT_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/rehearsals/test_words_in_views.py
"""

from __future__ import annotations

import io
import os
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.engine.runstate import RunState
from bot.engine.state import StepStatus
from bot.frontends.term.printer import TerminalPrinter
from bot.present import blockkit as bk
from bot.present.console import status
from bot.present.transcript import export
from bot.present.views import run_view, stored_runbook
from tests.fakes.blockkit_limits import validate_blocks

pytest.importorskip("moto", reason="rehearsals need the sandbox: pip install runbook-bot[sim]")

from bot.sim.rehearsal import Rehearsal

GOLDEN = Path(__file__).parents[1] / "present" / "golden" / "words"
REGEN = os.environ.get("RUNBOOK_BOT_REGEN_GOLDEN") == "1"
CODE = ("steps.", "result[", "params.", "{{")


def code_in(text: str) -> list[str]:
    """The lines of person-facing ``text`` that quote an expression."""
    return [line for line in text.splitlines() if any(c in line for c in CODE)]


def prose_of_markdown(text: str) -> str:
    """A transcript without its code spans, where the expressions are kept on demand."""
    return re.sub(r"``.*?``|`[^`]*`", "`…`", text)


def mrkdwn(blocks: list[dict[str, Any]]) -> str:
    out: list[str] = []
    for b in blocks:
        if isinstance(b.get("text"), dict):
            out.append(b["text"].get("text", ""))
        out += [f.get("text", "") for f in b.get("fields") or ()]
        out += [e.get("text", "") for e in b.get("elements") or () if b.get("type") == "context"]
    return "\n".join(out)


def golden(name: str, text: str, run_id: str) -> None:
    # what differs between two plays of the same run: its id, the sandbox's port, the chain
    text = text.replace(run_id, "RUN_ID")
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", text)
    text = re.sub(r"\b[0-9a-f]{64}\b", "HASH", text)
    path = GOLDEN / name
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), (
        f"{path.name} differs; RUNBOOK_BOT_REGEN_GOLDEN=1 regenerates it")


def waiting(state: RunState, key: str, *, now: datetime) -> RunState:
    """The run as it was while ``key`` waited, recorded as the conductor records a wait whose
    ``wait_until`` is false: its last result, the engine's own progress, the next check."""
    copy = RunState.from_dict(state.to_dict(), [type(s).from_dict(s.to_dict())
                                                 for s in state.steps.values()])
    s = copy.steps[key]
    instance = state.steps["instance"].result or {}
    dead = instance.get("instance_id", "i-dead")
    s.status = StepStatus.WAITING
    s.result = {"count": 3, "items": [
        {"volume_id": "vol-1", "state": "in-use", "attachments": [{"instance_id": "i-new"}]},
        {"volume_id": "vol-2", "state": "in-use", "attachments": [{"instance_id": "i-new"}]},
        {"volume_id": "vol-3", "state": "in-use", "attachments": [{"instance_id": dead}]}]}
    s.poll_started_at = (now - timedelta(seconds=30)).isoformat()
    s.next_check_at = (now + timedelta(seconds=15)).isoformat()
    s.progress = "waiting until result['items'] | selectattr('state', 'eq', 'in-use') (30s of 300s)"
    for later in list(copy.steps.values())[list(copy.steps).index(key) + 1:]:
        del copy.steps[later.key]
    copy.status = "running"  # type: ignore[assignment]
    copy.finished_at = None
    copy.outcome = ""
    return copy


@pytest.fixture(scope="module")
def recovery(tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = io.StringIO()
    r = Rehearsal("node-dead", workdir=tmp_path_factory.mktemp("words"),
                  notifiers=[TerminalPrinter(out=out)])
    r.start()
    try:
        state = r.run("node-dead-ngns", node=r.facts["node"])
        yield r, state, out.getvalue()
    finally:
        r.stop()


def test_the_terminal_says_a_recovery_in_words(recovery: Any) -> None:
    r, state, printed = recovery
    assert state.status == "succeeded", state.outcome
    assert code_in(printed) == []
    assert ("⤼ 4 steps not needed: no pod was force-deleted from a machine that may still run, "
            "the instance was already stopped") in printed
    assert "⤼ 4 steps not needed: nothing was stuck at EC2" in printed
    view = run_view(state, stored_runbook(state))
    shown = status(view, now=r.clock.now())
    assert code_in(shown) == []
    assert "⤼ 4 steps not needed: no pod was force-deleted" in shown
    verbose = status(view, now=r.clock.now(), verbose=True)  # every step, and the expressions
    assert "(when: steps.instance.result.state in" in verbose
    now = r.clock.now()
    wait = status(run_view(waiting(state, "volumes_moved", now=now), stored_runbook(state)), now)
    assert code_in(wait) == []
    assert ("waiting: 2 of 3 volumes attached to their new nodes, next check in 15s, gives up at "
            in wait)
    golden("node-dead-ngns.term.txt", printed + "\n" + shown + "\n\n" + wait + "\n", state.run_id)


def test_the_slack_card_says_a_recovery_in_words(recovery: Any) -> None:
    r, state, _ = recovery
    runbook = stored_runbook(state)
    now = r.clock.now()
    card = bk.run_card(run_view(state, runbook), now=now)
    wait = bk.run_card(run_view(waiting(state, "volumes_moved", now=now), runbook), now=now)
    assert validate_blocks(card) == [] and validate_blocks(wait) == []
    text, waited = mrkdwn(card), mrkdwn(wait)
    assert code_in(text) == [] and code_in(waited) == []
    assert "4 steps not needed: no pod was force-deleted from a machine that may still run, " \
           "the instance was already stopped" in text
    stamp = int((now + timedelta(seconds=270)).timestamp())  # 5m after the first poll
    assert ("Waiting for: 2 of 3 volumes attached to their new nodes, next check in 15s, gives up "
            f"at <!date^{stamp}^{{time}}|") in waited
    # the thread tells a skipped step with its expression, on demand
    skipped = next(s for s in run_view(state, runbook).steps if s.key == "force_detach")
    reply = mrkdwn(bk.step_reply(skipped))
    assert "not needed, every volume came off with the normal detach" in reply
    assert "when: steps.still_stuck.status" in reply
    golden("node-dead-ngns.card.txt", text + "\n\n" + waited + "\n", state.run_id)


def test_the_transcript_says_a_recovery_in_words(recovery: Any) -> None:
    r, state, _ = recovery
    md = export(r.store, state.run_id, fmt="md", exported_at=r.clock.now())
    assert code_in(prose_of_markdown(md)) == []
    assert "Skipped at " in md and ": the instance was already stopped." in md
    assert "`when: steps.instance.result.state in" in md  # the expression, in the details
    assert "guard passed: instance " in md and "is powered off (stopped)" in md
    assert not re.search(r"\d{2}:\d{2}:\d{2}\.\d{6}", md)  # no microseconds anywhere
    golden("node-dead-ngns.md", md, state.run_id)
