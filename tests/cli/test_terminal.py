"""The terminal front-end end to end: ``run``, ``approve``, ``status``, ``runs``, ``audit verify``,
through ``bot.cli.main`` with a real config file, runbooks directory and SQLite store."""

from __future__ import annotations

import sqlite3
import textwrap

import pytest

from bot.cli import main

RUNBOOK = """\
apiVersion: runbook-bot/v1
kind: Runbook
metadata: {name: hello, title: Say hello after a check}
spec:
  params:
    who: {type: string, required: true, pattern: '^[a-z]+$', description: a lowercase name}
  approvals: {groups: [sre]}
  steps:
    - id: check
      title: "Check {{ params.who }} is ready"
      action: notify
      with: {message: "checking {{ params.who }}"}
      approval: {required: true, description: "Make sure {{ params.who }} wants this."}
    - id: greet
      title: Greet
      action: notify
      with: {message: "hello {{ params.who }}"}
"""


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    books = tmp_path / "runbooks"
    books.mkdir()
    (books / "hello.yaml").write_text(RUNBOOK)
    config = tmp_path / "runbook-bot.yaml"
    config.write_text(textwrap.dedent(f"""\
        database_url: sqlite:///{tmp_path / 'state.db'}
        runbooks_dir: {books}
        policy:
          groups: {{sre: [alice, bob]}}
          allow_impersonation: true
        """))
    monkeypatch.setenv("RUNBOOK_BOT_CONFIG", str(config))
    monkeypatch.setenv("RUNBOOK_BOT_AUDIT_KEY", "k")
    for var in ("RUNBOOK_BOT_DATABASE_URL", "RUNBOOK_BOT_RUNBOOKS_DIR"):
        monkeypatch.delenv(var, raising=False)

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out = capsys.readouterr()
        return code, out.out, out.err

    run.db = tmp_path / "state.db"  # type: ignore[attr-defined]
    return run


def _run_id(out: str) -> str:
    return next(w for w in out.split() if w.startswith("rb-")).rstrip(":")


def test_a_run_waits_for_an_approver_who_is_not_at_the_keyboard(cli):
    code, out, _ = cli("run", "hello", "-p", "who=ann", "--as", "alice")
    assert code == 0
    run_id = _run_id(out)
    assert "check needs 1 approval(s) from sre" in out
    assert "why: Make sure ann wants this." in out
    assert f"runbook-bot approve {run_id} --step check" in out
    code, out, _ = cli("approve", run_id, "--as", "alice")
    assert code == 1 and "cannot approve" in out
    code, out, _ = cli("approve", run_id, "--as", "bob")
    assert code == 0
    assert "message: checking ann" in out and "message: hello ann" in out
    assert f"run {run_id} succeeded" in out
    code, out, _ = cli("status", run_id)
    assert "status: succeeded" in out and "[approved by bob]" in out
    code, out, _ = cli("runs", "--all")
    assert run_id in out and "succeeded" in out
    code, out, _ = cli("audit", "verify", run_id)
    assert code == 0 and "intact" in out


def test_bad_params_name_the_param_and_start_nothing(cli):
    code, _, err = cli("run", "hello", "-p", "who=Ann", "--as", "alice")
    assert code == 1 and "'who'" in err and "pattern" in err
    code, out, _ = cli("runs", "--all")
    assert "no runs yet" in out


def test_as_user_needs_the_config_to_allow_impersonation(cli, tmp_path):
    config = tmp_path / "runbook-bot.yaml"
    config.write_text(config.read_text().replace("allow_impersonation: true",
                                                 "allow_impersonation: false"))
    code, _, err = cli("run", "hello", "-p", "who=ann", "--as", "bob")
    assert code == 1 and "allow_impersonation" in err


def test_abort_and_reject_need_a_reason_and_stop_the_run(cli):
    _, out, _ = cli("run", "hello", "-p", "who=ann", "--as", "alice")
    run_id = _run_id(out)
    code, out, _ = cli("reject", run_id, "--reason", "ann is on leave today", "--as", "bob")
    assert code == 0 and "rejected step check" in out
    code, out, _ = cli("status", run_id)
    assert "status: failed" in out and "rejected" in out


@pytest.mark.parametrize("tamper", ["edit", "delete", "insert", "reorder", "truncate"])
def test_audit_verify_names_the_first_bad_seq_after_any_tampering(cli, tamper):
    _, out, _ = cli("run", "hello", "-p", "who=ann", "--as", "alice")
    run_id = _run_id(out)
    cli("approve", run_id, "--as", "bob")
    con = sqlite3.connect(cli.db)
    n = con.execute("select max(seq) from events where run_id=?", (run_id,)).fetchone()[0]
    assert n >= 10
    if tamper == "edit":
        con.execute("update events set actor='mallory' where run_id=? and seq=5", (run_id,))
        bad = 5
    elif tamper == "delete":
        con.execute("delete from events where run_id=? and seq=4", (run_id,))
        bad = 4
    elif tamper == "insert":
        row = con.execute("select * from events where run_id=? and seq=3", (run_id,)).fetchone()
        con.execute("update events set seq=seq+1000 where run_id=? and seq>=3", (run_id,))
        con.execute("update events set seq=seq-999 where run_id=? and seq>=1003", (run_id,))
        con.execute("insert into events values (?,?,?,?,?,?,?,?)", (run_id, 3, *row[2:]))
        bad = 4
    elif tamper == "reorder":
        con.execute("update events set seq=-1 where run_id=? and seq=6", (run_id,))
        con.execute("update events set seq=6 where run_id=? and seq=7", (run_id,))
        con.execute("update events set seq=7 where run_id=? and seq=-1", (run_id,))
        bad = 6
    else:
        con.execute("delete from events where run_id=? and seq>?", (run_id, n - 2))
        bad = n - 1
    con.commit()
    con.close()
    code, out, _ = cli("audit", "verify", run_id)
    assert code == 1
    assert f"BROKEN at seq {bad}" in out


CHECKLIST = """\
apiVersion: runbook-bot/v1
kind: Runbook
metadata: {name: checklist, title: A checklist}
spec:
  steps:
    - id: told
      title: Tell the incident lead
      action: manual.confirm
      with: {item: "The incident lead knows the node is being fenced"}
    - id: after
      title: After
      action: notify
      with: {message: "done"}
"""


def test_run_yes_confirms_what_the_person_at_the_keyboard_may_confirm(cli, tmp_path):
    (tmp_path / "runbooks" / "checklist.yaml").write_text(CHECKLIST)
    code, out, _ = cli("run", "checklist", "--yes", "--as", "alice")
    assert code == 0 and "succeeded" in out
    run_id = _run_id(out)
    code, out, _ = cli("audit", "show", run_id)
    assert "step.confirmed" in out and "alice" in out


def test_a_run_started_without_following_is_carried_on_by_the_worker(cli, tmp_path):
    (tmp_path / "runbooks" / "checklist.yaml").write_text(CHECKLIST.replace(
        "action: manual.confirm\n      with: {item: \"The incident lead knows the node is being fenced\"}",
        "action: notify\n      with: {message: \"first\"}"))
    code, out, _ = cli("run", "checklist", "--no-follow", "--as", "alice")
    assert code == 0
    run_id = _run_id(out)
    code, out, _ = cli("status", run_id)
    assert "status: pending" in out
    code, out, _ = cli("worker", "--once")
    assert code == 0 and "drove 1 run" in out
    code, out, _ = cli("status", run_id)
    assert "status: succeeded" in out
