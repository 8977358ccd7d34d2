"""A zone outage reads in words in every view: the terminal, ``status``, the Slack card and the
transcript of a zone-outage-ngns run in the sandbox quote no expression as their main text.

Its own module: the node-dead views of ``test_words_in_views`` keep one sandbox for their module,
and moto allows one per process at a time.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from bot.frontends.term.printer import TerminalPrinter
from bot.present import blockkit as bk
from bot.present.console import status
from bot.present.transcript import export
from bot.present.views import run_view, stored_runbook
from tests.fakes.blockkit_limits import validate_blocks
from tests.rehearsals.test_words_in_views import code_in, mrkdwn, prose_of_markdown

pytest.importorskip("moto", reason="rehearsals need the sandbox: pip install runbook-bot[sim]")

from bot.sim.rehearsal import Rehearsal


def test_a_zone_outage_reads_in_words_in_every_view(tmp_path: Path) -> None:
    out = io.StringIO()
    r = Rehearsal("az-outage", options={"nodes": 1, "hung": 0}, workdir=tmp_path,
                  policy={"max_out_of_service_nodes": 20}, notifiers=[TerminalPrinter(out=out)])
    r.start()
    try:
        state = r.run("zone-outage-ngns", zone="ap-southeast-1a")
        view = run_view(state, stored_runbook(state))
        card = bk.run_card(view, now=r.clock.now())
        md = export(r.store, state.run_id, fmt="md", exported_at=r.clock.now())
    finally:
        r.stop()
    assert validate_blocks(card) == []
    assert code_in(out.getvalue()) == [] and code_in(status(view, now=r.clock.now())) == []
    assert code_in(mrkdwn(card)) == [] and code_in(prose_of_markdown(md)) == []
    assert "its condition did not hold" not in out.getvalue() + mrkdwn(card) + md
