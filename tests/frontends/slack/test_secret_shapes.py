"""Every common secret shape a person types, as a param, a reject reason or a note, is redacted
where it enters: no table, no audit event, no export format (the command line's and the one
``/runbook export`` uploads) and no message the bot sends Slack holds it afterwards. Values the
product needs (node names, instance and volume ids, ARNs, Kubernetes names, durations, zones)
are kept as typed.

The attack goes through the real path: slash commands signed as Slack signs them, served over
HTTP; a note through the runner every front-end submits to (no front-end takes a note yet); the
exports through ``bot.cli.main`` and ``/runbook export``.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import inspect, text

from bot.cli import main
from bot.engine.commands import Confirm
from tests.fakes.engine_harness import runbook
from tests.fakes.slack_api import CHANNEL
from tests.frontends.slack.conftest import ALICE, BOB, Bot

JWT = ("eyJhbGciOiJSUzI1NiIsImtpZCI6InRlc3QifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6ZGVmYXVsdDpib3QifQ"
       ".c2lnbmF0dXJlLW9mLXRoZS10ZXN0LWp3dC0wMTIzNDU2Nzg5")
PEM_BODY = ("MIIEowIBAAKCAQEAt3stK3yB0dyL1neOnePemBodyLineNumberOneOfTheTestKey",
            "VGhpcyBpcyBub3QgYSByZWFsIGtleSwganVzdCBhIHRlc3QgYm9keSBsaW5lMg==")
PEM = "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(PEM_BODY) + "\n-----END RSA PRIVATE KEY-----"

# class -> (what a person types, the parts of it that must never be seen again: letters and
# digits only, so that no export's escaping hides them from the search)
SECRETS: dict[str, tuple[str, tuple[str, ...]]] = {
    "slack token": ("xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOp", ("AbCdEfGhIjKlMnOp",)),
    "aws access key id": ("AKIAIOSFODNN7EXAMPLE", ("AKIAIOSFODNN7EXAMPLE",)),
    "bearer": ("Authorization: Bearer Zm9vYmFyYmF6cXV4MTIzNDU2", ("Zm9vYmFyYmF6cXV4MTIzNDU2",)),
    "github classic": ("ghp_R4nd0mT0k3nV4lu3F0rT3st1ngOnly0001", ("R4nd0mT0k3nV4lu3F0rT3st1ngOnly0001",)),
    "github oauth": ("gho_0123456789abcdefghijABCDEFGHIJklmnop", ("0123456789abcdefghijABCDEFGHIJklmnop",)),
    "github fine-grained": ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOP",
                            ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOP",)),
    "url with password": ("https://deploy:S3cr3tPassw0rd@git.example.com/org/repo.git",
                          ("S3cr3tPassw0rd",)),
    "jwt": (JWT, (JWT.split(".")[1], JWT.split(".")[2])),
    "pem private key": (PEM, PEM_BODY),
    "basic auth": ("Authorization: Basic ZGVwbG95OlMzY3IzdC1CYXNpYy1QdzE=",
                   ("ZGVwbG95OlMzY3IzdC1CYXNpYy1QdzE",)),
    "url-encoded bearer": ("https://ci.example.com/hook?h=Authorization%3A%20Bearer%20c2VjcmV0LWJlYXJlcg",
                           ("c2VjcmV0LWJlYXJlcg",)),
    "url-encoded url password": ("next=https%3A%2F%2Fdeploy%3AEnc0dedPassw0rd%40git.example.com%2Frepo",
                                 ("Enc0dedPassw0rd",)),
    "url-encoded query token": ("cb?state=x%26access_token%3Dya29.a0AfH6SMBencodedToken1234",
                                ("a0AfH6SMBencodedToken1234",)),
}

# values the product needs: none of them may be touched
KEPT = ("ip-10-0-1-2.ec2.internal", "i-0abc123def4567890", "vol-0123456789abcdef0",
        "arn:aws:iam::123456789012:role/runbook-bot",
        "arn:aws:ec2:us-east-1:123456789012:volume/vol-0123456789abcdef0",
        "arn:aws:eks:eu-west-1:123456789012:cluster/prod-1", "kube-system/coredns-5d78c9869d-x7k2p",
        "pvc-3f0c2a1e-8d6b-4c1f-9a7e-2b5d4c3e1f00", "data-postgres-0", "1h30m", "15m", "900s",
        "us-east-1a", "use1-az1", "eu-west-1", "ap-southeast-1b",
        "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "https://grafana.example.com/d/abc?orgId=1&var-node=ip-10-0-1-2",
        "postgres://db.example.com:5432/app", "oncall@example.com",
        "basic troubleshooting by the bearer of bad news")

LEAKY = runbook("leaky", """
- id: look
  title: "Look at {{ params.name }}"
  manual: "Check {{ params.value }} by hand"
- id: change
  title: "Set {{ params.name }} to {{ params.value }}"
  action: fake.set
  with: {name: "{{ params.name }}", value: "{{ params.value }}"}
""", params="""
name: {type: string, required: true}
value: {type: string, default: "on"}
""", approvals="""
groups: [sre]
""")


@pytest.fixture
def sbot(make_bot: Any) -> Bot:
    return make_bot(texts={"leaky": LEAKY})


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, bytes):
        yield value.decode("utf-8", "replace")
    elif isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def _tables(bot: Bot) -> dict[str, str]:
    """Every row of every table of the state database, as stored."""
    out = {}
    with bot.db.engine.connect() as conn:
        for table in inspect(conn).get_table_names():
            rows = conn.execute(text(f'SELECT * FROM "{table}"')).fetchall()
            out[f"table {table}"] = "\n".join(str(tuple(r)) for r in rows)
    return out


def test_every_secret_shape_typed_by_a_person_is_redacted_everywhere(
        sbot: Bot, tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    bot = sbot
    # every shape at once, one to a line (one run keeps the exports few): each line is
    # checked on its own, by the parts of it that must not be seen again
    typed = "\n".join(f"({i}) {secret} ." for i, (secret, _) in enumerate(SECRETS.values()))
    # typed where a command or a param name belongs: the answers say what is wrong without it
    answers = [bot.command(f"run leaky {shlex.quote(typed.replace('=', ''))}")[1],
               bot.command(f"run leaky name=thing {shlex.quote(typed + '=1')}")[1]]
    answers.append(bot.command(f"run leaky name=thing {shlex.quote(f'value=see {typed}')}")[1])
    [header] = bot.db.runs(limit=5)
    run = header.run_id
    out = bot.runner.submit(Confirm(run_id=run, actor=f"slack:{BOB}", step="look",
                                    note=f"checked by hand,\n{typed}"))
    assert out.ok, out.message
    bot.runner.drive(run)
    bot.settle()
    bot.fake.post_as_user(CHANNEL, BOB, f"careful, I pasted\n{typed}", thread_ts=bot.card()["ts"])
    answers.append(bot.command(f"reject {run} {shlex.quote(f'rejected: {typed} was pasted')}",
                               user=BOB)[1])
    assert bot.db.load(run).status == "failed"
    for fmt in ("md", "html", "json"):
        answers.append(bot.command(f"export {run} {fmt}", user=ALICE)[1])
    seen = _tables(bot)
    seen["audit events"] = json.dumps([e.payload for e in bot.events(run)])
    config = tmp_path / "runbook-bot.yaml"
    config.write_text(f"database_url: {bot.db.url}\n")
    monkeypatch.setenv("RUNBOOK_BOT_CONFIG", str(config))
    monkeypatch.setenv("RUNBOOK_BOT_AUDIT_KEY", "k")
    monkeypatch.delenv("RUNBOOK_BOT_DATABASE_URL", raising=False)
    for fmt in ("md", "html", "json"):
        assert main(["export", run, "--format", fmt]) == 0, fmt  # 0: the chain verifies
        seen[f"export --format {fmt}"] = capsys.readouterr().out
    uploads = bot.fake.uploads
    assert sorted(u.filename for u in uploads) == [f"{run}.{fmt}" for fmt in ("html", "json", "md")]
    for u in uploads:
        seen[f"/runbook export {u.filename}"] = (u.content or b"").decode()
    for n, call in enumerate(bot.fake.calls()):
        seen[f"slack {call.method} #{n}"] = "\n".join(_strings(dict(call.params)))
    seen["answers to commands"] = "\n".join(_strings(answers))
    assert "[REDACTED]" in seen["table runs"] and "REDACTED" in seen[f"/runbook export {run}.md"]
    leaks = sorted({(name, where) for name, (_, needles) in SECRETS.items()
                    for where, haystack in seen.items() for needle in needles if needle in haystack})
    assert not leaks, "\n".join(f"{name}: {where}" for name, where in leaks)


def test_values_the_product_needs_are_kept_as_typed(sbot: Bot) -> None:
    bot = sbot
    value = " ".join(KEPT)
    bot.command(f"run leaky name=ip-10-0-1-2.ec2.internal {shlex.quote(f'value={value}')}")
    [run] = bot.db.runs(limit=5)
    state = bot.db.load(run.run_id)
    assert state.params == {"name": "ip-10-0-1-2.ec2.internal", "value": value}
    bot.runner.submit(Confirm(run_id=run.run_id, actor=f"slack:{BOB}", step="look", note=value))
    bot.command(f"reject {run.run_id} {shlex.quote(value)}", user=BOB)
    events = bot.events(run.run_id)
    [confirmed] = [e.payload for e in events if e.type == "step.confirmed"]
    assert confirmed["note"] == value
    assert any(value in json.dumps(e.payload) for e in events if e.type == "approval.rejected")
    assert "REDACTED" not in json.dumps([e.payload for e in events])
