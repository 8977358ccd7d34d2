"""Who the terminal says you are, and what a bad config or state database does to a command.

Each test runs ``python -m bot`` in a subprocess with its own environment, as a person at a shell
would, against a real config file, runbooks directory and SQLite store.
"""

from __future__ import annotations

import json
import os
import pwd
import socket
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ME = pwd.getpwuid(os.getuid()).pw_name  # the account this test suite runs as
ROOT = Path(__file__).resolve().parents[2]

RUNBOOK = """\
apiVersion: runbook-bot/v1
kind: Runbook
metadata: {name: hello, title: Say hello after an approval}
spec:
  approvals: {groups: [sre], allow_self: true}
  steps:
    - id: check
      title: Check
      action: notify
      with: {message: "checked"}
      approval: {required: true}
"""


class Shell:
    """A shell in ``tmp``: a config file, a runbooks directory, a state database."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.db = tmp / "state.db"
        (tmp / "runbooks").mkdir()
        (tmp / "runbooks" / "hello.yaml").write_text(RUNBOOK)
        self.config = tmp / "runbook-bot.yaml"
        self.configure()

    def configure(self, policy: str = "", top: str = "") -> None:
        db = "" if "database_url" in top else f"database_url: sqlite:///{self.db}\n"
        self.config.write_text(db + f"runbooks_dir: {self.tmp / 'runbooks'}\n"
            + top + "policy:\n  groups: {sre: [" + ME + ", bob]}\n"
            + textwrap.indent(textwrap.dedent(policy), "  "))

    def __call__(self, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("RUNBOOK_BOT_")}
        clean.update(RUNBOOK_BOT_CONFIG=str(self.config), RUNBOOK_BOT_AUDIT_KEY="k",
                     PYTHONPATH=str(ROOT), **env)  # the bot next to these tests
        return subprocess.run([sys.executable, "-m", "bot", *argv], cwd=self.tmp, env=clean,
                              capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=60)

    def start(self) -> str:
        """Start hello and follow it to its approval (nobody at this keyboard answers)."""
        done = self("run", "hello")
        assert done.returncode == 0, done.stderr
        run_id = next(w for w in done.stdout.split() if w.startswith("rb-")).rstrip(":")
        assert self.status(run_id) == "awaiting_approval"
        return run_id

    def events(self, run_id: str) -> list[tuple[str, str, dict[str, object]]]:
        with sqlite3.connect(self.db) as con:
            rows = con.execute("select type, actor, payload from events where run_id=? "
                               "order by seq", (run_id,)).fetchall()
        return [(t, a, json.loads(p)) for t, a, p in rows]

    def status(self, run_id: str) -> str:
        with sqlite3.connect(self.db) as con:
            return str(con.execute("select status from runs where id=?", (run_id,)).fetchone()[0])


@pytest.fixture
def sh(tmp_path: Path) -> Shell:
    return Shell(tmp_path)


def test_logname_and_user_do_not_change_who_approves(sh: Shell) -> None:
    run_id = sh.start()  # requested by the account running the tests
    done = sh("approve", run_id, "--no-follow", LOGNAME="bob", USER="bob", LNAME="bob",
              USERNAME="bob")
    assert done.returncode == 1
    assert f"{ME} started this run and cannot approve its steps" in done.stdout
    assert sh.status(run_id) == "awaiting_approval"
    [(_, actor, payload)] = [e for e in sh.events(run_id) if e[0] == "command.approve"]
    assert actor == ME
    assert payload["via"] == {"frontend": "terminal", "uid": os.getuid(), "os_user": ME,
                              "host": socket.gethostname(), "tty": None}
    assert not [e for e in sh.events(run_id) if e[1] == "bob"]


def test_a_run_records_the_uid_host_and_tty_it_was_started_from(sh: Shell) -> None:
    run_id = sh.start()
    [(_, actor, payload)] = [e for e in sh.events(run_id) if e[0] == "run.created"]
    assert actor == ME
    assert payload["origin"] == {"frontend": "terminal", "uid": os.getuid(), "os_user": ME,
                                 "host": socket.gethostname(), "tty": None}


@pytest.mark.parametrize(("policy", "key", "allowed"), [
    ('allow_self_approval: "false"', "policy.allow_self_approval", "must be true or false"),
    ('allow_impersonation: "no"', "policy.allow_impersonation", "must be true or false"),
    ("max_out_of_service_nodes: 0", "policy.max_out_of_service_nodes", "must be at least 1"),
])
def test_a_bad_policy_value_stops_every_command_with_one_line_and_exit_2(
    sh: Shell, policy: str, key: str, allowed: str,
) -> None:
    sh.configure(policy)
    done = sh("run", "hello", "--no-follow", "--as", "bob")
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith(f"runbook-bot: error: {sh.config}: {key}: {allowed}")
    assert not sh.db.exists() or not sqlite3.connect(sh.db).execute(
        "select count(*) from runs").fetchone()[0]


def test_a_quoted_false_no_longer_lets_the_requester_approve_their_own_step(sh: Shell) -> None:
    sh.configure('allow_self_approval: "false"')
    assert sh("run", "hello", "--no-follow").returncode == 2
    sh.configure("allow_self_approval: false")
    run_id = sh.start()
    done = sh("approve", run_id, "--no-follow")
    assert done.returncode == 1 and "self-approval is not allowed" in done.stdout
    assert sh.status(run_id) == "awaiting_approval"


def test_every_bad_value_is_reported_at_once(sh: Shell) -> None:
    sh.configure('allow_self_approval: "false"\ndefault_expires_after: -5\ncolour: red\n',
                 top="lease_seconds: .inf\nredact_patterns: ['(']\ndatabase_url: mysql://db/x\n")
    done = sh("runs")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    keys = [line.split(": ")[3] for line in done.stderr.splitlines()]
    assert sorted(keys) == sorted(["database_url", "redact_patterns", "policy.allow_self_approval",
                                   "policy.default_expires_after", "policy.colour",
                                   "lease_seconds"])


def test_a_corrupt_state_database_is_one_line_and_exit_2(sh: Shell) -> None:
    sh.db.write_bytes(b"this is not a database, it is a shopping list" * 100)
    done = sh("runs")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr == (f"runbook-bot: error: cannot open the state database "
                           f"sqlite:///{sh.db}: file is not a database\n")


def test_a_state_database_whose_directory_cannot_be_made_is_one_line_and_exit_2(sh: Shell) -> None:
    (sh.tmp / "a-file").write_text("")
    done = sh("runs", RUNBOOK_BOT_DATABASE_URL=f"sqlite:///{sh.tmp / 'a-file' / 'state.db'}")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert line.endswith(f"cannot create directory {sh.tmp / 'a-file'}: a file is in the way")


def test_a_read_only_state_database_is_one_line_and_exit_2_and_starts_nothing(sh: Shell) -> None:
    assert sh("runs").returncode == 0  # creates the tables
    read_only = f"sqlite:///file:{sh.db}?mode=ro&uri=true"
    done = sh("run", "hello", "--no-follow", RUNBOOK_BOT_DATABASE_URL=read_only)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert "cannot write the state database" in line and "readonly database" in line
    assert sh("runs", "--all").stdout.startswith("no runs yet")


def test_a_usage_error_exits_2_like_a_config_error(sh: Shell) -> None:
    done = sh("approve")
    assert done.returncode == 2 and "usage:" in done.stderr


def test_approvals_from_slack_refuses_terminal_approval_but_not_rejection(sh: Shell) -> None:
    sh.configure("approvals_from: [slack]\n")
    run_id = sh.start()
    done = sh("approve", run_id, "--no-follow", LOGNAME="bob")
    assert done.returncode == 1
    assert "policy.approvals_from accepts approvals only from slack" in done.stdout
    assert sh.status(run_id) == "awaiting_approval"
    done = sh("reject", run_id, "--reason", "not during the change freeze")
    assert done.returncode == 0 and sh.status(run_id) == "failed"


def test_the_terminal_cannot_impersonate_a_slack_user_or_the_bot(sh: Shell) -> None:
    sh.configure("allow_impersonation: true\napprovals_from: [slack]\n")
    run_id = sh.start()
    done = sh("approve", run_id, "--no-follow", "--as", "slack:UBOB000001")
    assert done.returncode == 1 and "cannot act as a Slack identity" in done.stderr
    sh.configure("allow_impersonation: true\n")
    sh.config.write_text(sh.config.read_text().replace("bob]", "bob, runbook-bot, system:worker]"))
    for bot in ("runbook-bot", "system:worker"):
        done = sh("approve", run_id, "--no-follow", "--as", bot)
        assert done.returncode == 1 and "never approves a step" in done.stdout, done.stdout
    assert sh.status(run_id) == "awaiting_approval"
    tried = [(a, p["via"]) for t, a, p in sh.events(run_id) if t == "command.approve"]
    assert [(a, v["os_user"], v["as"]) for a, v in tried] == [
        ("runbook-bot", ME, "runbook-bot"), ("system:worker", ME, "system:worker")]
