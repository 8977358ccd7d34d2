"""The terminal in client mode against the API itself (bot/frontends/api/app.py): a real runtime
over SQLite with fake actions and a fake authenticator (tests/frontends/api/test_api_app.py's
harness), served over HTTP on an ephemeral port. Runs are driven on the request's thread, so
nothing waits."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from wsgiref.simple_server import make_server

import pytest

from bot.cli import main
from tests.cli.test_remote import _Quiet, _Threading
from tests.frontends.api.test_api_app import Harness


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Harness, str]]:
    h = Harness(tmp_path)
    server = make_server("127.0.0.1", 0, h.app, server_class=_Threading, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    config = tmp_path / "runbook-bot.yaml"
    config.write_text(f"server:\n  url: http://127.0.0.1:{server.server_address[1]}\n"
                      "  token: env:RB_TEST_TOKEN\n")
    monkeypatch.setenv("RUNBOOK_BOT_CONFIG", str(config))
    monkeypatch.setenv("RUNBOOK_BOT_DATABASE_URL", f"sqlite:///{tmp_path / 'never.db'}")
    monkeypatch.delenv("RUNBOOK_BOT_SERVER", raising=False)
    try:
        yield h, str(tmp_path / "never.db")
    finally:
        server.shutdown()
        server.server_close()
        h.app.close()
        h.db.close()


def test_a_run_from_the_terminal_through_the_api(served: tuple[Harness, str],
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    h, never = served
    monkeypatch.setenv("RB_TEST_TOKEN", "alice")
    assert main(["run", "change-thing", "-p", "name=web", "--incident", "INC-7"]) == 0
    out = capsys.readouterr().out
    m = re.search(r"run (rb-[a-z0-9]+): ", out)
    assert m, out
    run_id = m.group(1)
    assert f"approve with: runbook-bot approve {run_id} --step change" in out
    assert f"run {run_id} is waiting at step change" in out
    state = h.db.load(run_id)
    assert (state.requester, state.incident) == ("token:alice", "INC-7")
    # alice may not approve her own run's step: the engine's refusal, exit 1
    assert main(["approve", run_id]) == 1
    assert "cannot approve its steps: self-approval is not allowed" in capsys.readouterr().out
    monkeypatch.setenv("RB_TEST_TOKEN", "dave")
    assert main(["approve", run_id, "--step", "change", "--follow"]) == 0
    out = capsys.readouterr().out
    assert f"run {run_id} succeeded" in out
    assert h.db.load(run_id).status == "succeeded"
    assert main(["follow", run_id]) == 0
    assert f"run {run_id} succeeded" in capsys.readouterr().out
    assert main(["status", run_id]) == 0
    assert "approved by token:dave" in capsys.readouterr().out
    assert main(["audit", "verify", run_id]) == 0
    assert "audit chain intact" in capsys.readouterr().out
    assert main(["export", run_id, "-f", "md"]) == 0
    assert run_id in capsys.readouterr().out
    assert main(["audit", "head", run_id]) == 0
    head = capsys.readouterr().out.split()[3]  # rb-... audit head SEQ:HASH ...
    seq, hash_ = head.split(":")
    assert main(["audit", "verify", run_id, "--head", f"{seq}:{hash_[:12]}"]) == 0
    capsys.readouterr()
    assert main(["audit", "verify", run_id, "--head", f"{seq}:{'0' * 12}"]) == 1
    assert "the published head" in capsys.readouterr().out
    assert main(["audit", "show", run_id]) == 0
    assert "run.created" in capsys.readouterr().out
    assert main(["diagnose", "--node", "n1"]) == 0  # the bot scans, with its credentials
    assert [(x.cluster, x.node) for x in h.scans] == [("", "n1")]
    assert not Path(never).exists()
