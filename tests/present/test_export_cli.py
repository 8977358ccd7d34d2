"""``runbook-bot export`` end to end through ``bot.cli.main``, and ``audit verify --file`` on what
it wrote: an untouched export verifies offline, an edited one names the first bad seq."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from bot.cli import main
from tests.present.conftest import thread
from tests.present.test_event_golden import STORIES


@pytest.fixture
def cli(scenario, tmp_path, monkeypatch, capsys):
    _, run = scenario
    config = tmp_path / "runbook-bot.yaml"
    config.write_text(f"database_url: sqlite:///{tmp_path / 'state.db'}\n")
    monkeypatch.setenv("RUNBOOK_BOT_CONFIG", str(config))
    monkeypatch.setenv("RUNBOOK_BOT_AUDIT_KEY", "test-key")
    monkeypatch.delenv("RUNBOOK_BOT_DATABASE_URL", raising=False)

    def call(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out = capsys.readouterr()
        return code, out.out, out.err

    return call, run, tmp_path


@pytest.mark.parametrize("fmt", ["md", "html", "json"])
def test_export_writes_the_file_named_by_o(cli, fmt):
    call, run, tmp = cli
    path = tmp / f"export.{fmt}"
    code, out, err = call("export", run, "--format", fmt, "-o", str(path))
    assert code == 0, err
    assert out == "" and f"wrote {path}" in err
    text = path.read_text(encoding="utf-8")
    assert run in text and "StopInstances" in text


def test_export_writes_markdown_to_standard_output_by_default(cli):
    call, run, _ = cli
    code, out, _ = call("export", run)
    assert code == 0
    assert out.startswith(f"# Run {run}: ") and "## Integrity" in out


def test_an_untouched_json_export_verifies_offline(cli, monkeypatch):
    call, run, tmp = cli
    path = tmp / "export.json"
    assert call("export", run, "--format", "json", "-o", str(path))[0] == 0
    monkeypatch.setenv("RUNBOOK_BOT_DATABASE_URL", f"sqlite:///{tmp / 'elsewhere.db'}")
    code, out, _ = call("audit", "verify", "--file", str(path))
    assert code == 0, out
    assert "audit chain intact: 25 events" in out


@pytest.mark.parametrize(("edit", "seq"), [
    (lambda doc: doc["events"][9].update(actor="mallory"), 10),
    (lambda doc: doc["events"][12]["payload"]["calls"][0].update(targets=["i-other"]), 13),
    (lambda doc: doc["events"].pop(4), 5),
    (lambda doc: doc["events"].pop(), 25),
])
def test_an_edited_json_export_fails_verification_naming_the_seq(cli, edit, seq):
    call, run, tmp = cli
    path = tmp / "export.json"
    assert call("export", run, "--format", "json", "-o", str(path))[0] == 0
    doc = json.loads(path.read_text(encoding="utf-8"))
    edit(doc)
    path.write_text(json.dumps(doc), encoding="utf-8")
    code, out, _ = call("audit", "verify", "--file", str(path))
    assert code == 1
    assert f"BROKEN at seq {seq}" in out


def test_tz_shows_times_in_that_zone(cli):
    call, run, _ = cli
    code, out, _ = call("export", run, "--tz", "America/New_York")
    assert code == 0
    assert "| Started | 2025-12-31 19:00:00 EST |" in out


def test_an_unknown_tz_is_an_error_that_says_what_to_give(cli):
    call, run, _ = cli
    code, _, err = call("export", run, "--tz", "Nowhere/Special")
    assert code == 2 and "IANA name" in err  # a usage error


def test_thread_messages_from_a_file_join_the_timeline(cli):
    call, run, tmp = cli
    path = tmp / "thread.json"
    path.write_text(json.dumps(thread()), encoding="utf-8")
    code, out, _ = call("export", run, "--format", "json", "--thread", str(path))
    assert code == 0
    texts = [x["text"] for x in json.loads(out)["timeline"] if x["source"] == "slack"]
    assert texts == [m["text"] for m in thread()]


def test_an_unknown_run_is_an_error(cli):
    call, _, _ = cli
    code, _, err = call("export", "rb-44444")
    assert code == 1 and "no run rb-44444" in err


GOLDEN = Path(__file__).parent / "golden"


def test_every_golden_json_export_verifies_offline_as_it_is(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("RUNBOOK_BOT_DATABASE_URL", f"sqlite:///{tmp_path / 'none.db'}")
    monkeypatch.setenv("RUNBOOK_BOT_AUDIT_KEY", "test-key")
    monkeypatch.setenv("RUNBOOK_BOT_AUDIT_PREVIOUS_KEYS", "test-key-2")  # the key-rotated story's
    monkeypatch.delenv("RUNBOOK_BOT_CONFIG", raising=False)
    paths = sorted(GOLDEN.glob("**/*.json"))
    assert len(paths) == len(STORIES) + 1  # every story, and the transcript's run
    for path in paths:
        assert main(["audit", "verify", "--file", str(path)]) == 0, capsys.readouterr().out


@pytest.fixture
def story_engine(make_engine, monkeypatch):
    """The engine the golden stories are told on, its run ids spelt by the story."""
    from tests.present.test_event_golden import CHANGE, FLOW, RECOVER

    e = make_engine({"change": CHANGE, "flow": FLOW, "recover": RECOVER})
    monkeypatch.setattr(e, "_run_ids", [], raising=False)
    monkeypatch.setattr("bot.engine.ids.secrets", SimpleNamespace(choice=lambda _: e._run_ids.pop(0)))
    return e


@pytest.mark.parametrize("story", sorted(STORIES))
def test_every_golden_run_exported_by_the_cli_verifies_offline(story_engine, story, tmp_path,
                                                              monkeypatch, capsys):
    """``export --format json`` of each golden story's stored run, then ``audit verify --file``
    on the untouched file: intact. JSON is the one format that carries a seal; the Markdown and
    HTML of the same run say intact too."""
    run = STORIES[story](story_engine)
    monkeypatch.setenv("RUNBOOK_BOT_DATABASE_URL", story_engine.db.url)
    monkeypatch.setenv("RUNBOOK_BOT_AUDIT_KEY", "test-key")
    monkeypatch.setenv("RUNBOOK_BOT_AUDIT_PREVIOUS_KEYS", "test-key-2")  # the key-rotated story's
    monkeypatch.delenv("RUNBOOK_BOT_CONFIG", raising=False)
    path = tmp_path / f"{story}.json"
    assert main(["export", run, "--format", "json", "-o", str(path)]) == 0, capsys.readouterr()
    monkeypatch.setenv("RUNBOOK_BOT_DATABASE_URL", f"sqlite:///{tmp_path / 'elsewhere.db'}")
    assert main(["audit", "verify", "--file", str(path)]) == 0, capsys.readouterr().out
    assert "audit chain intact" in capsys.readouterr().out
