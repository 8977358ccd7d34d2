"""The README, walked as written: the commands of its code blocks are parsed out of README.md and
run, so an edit that breaks one fails here.

- The demo, then the "Next" commands (those the demo prints and those under "What the demo
  shows"), with the demo's run id for the README's example id.
- Every command of "Running it on a real cluster", against the sandbox started with ``sim up`` as
  its own process: the example config copied as the README says, with the sandbox's kubeconfig,
  context and cluster name substituted, and the commands run as processes from that directory.
- The recovery half of a game day in docs/sandbox.md ("Bringing the node back"), after the
  node-dead-ngns run it follows.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli import main
from bot.frontends.term.identity import os_user
from tests.sim.test_cli_sim import read_until_ready

pytest.importorskip("moto", reason="the walk needs the sandbox: pip install runbook-bot[sim]")
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
EXAMPLE_ID = "rb-tqnjc"  # the run id the README's demo output shows
EXAMPLE_CLUSTER = "prod-apse1"  # the cluster of deploy/runbook-bot.example.yaml
_FENCE = re.compile(r"^\s*```")


def section(text: str, heading: str) -> str:
    """The Markdown section under ``heading`` (its level), up to the next heading of that level
    or higher."""
    lines = text.splitlines()
    level = len(heading) - len(heading.lstrip("#"))
    start = lines.index(heading)
    end = next((i for i in range(start + 1, len(lines))
                if lines[i].startswith("#") and 0 < len(lines[i]) - len(lines[i].lstrip("#")) <= level
                and not _inside_fence(lines, i)), len(lines))
    return "\n".join(lines[start:end])


def _inside_fence(lines: list[str], i: int) -> bool:
    return sum(1 for line in lines[:i] if _FENCE.match(line)) % 2 == 1


def commands(markdown: str, *, program: str = "runbook-bot") -> list[str]:
    """The shell commands of every code block (fenced, or indented by four spaces) that call
    ``program`` or another tool, comments removed; prose and output lines are left out."""
    out: list[str] = []
    fenced = False
    for line in markdown.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced and not line.startswith("    "):
            continue
        text = line.strip()
        text = re.sub(r"\s+#\s.*$", "", text)  # a trailing comment
        words = text.split(maxsplit=1)
        if words and (words[0].endswith(program) or words[0] in ("kubectl", "aws")
                      or (re.fullmatch(r"[A-Z][A-Z0-9_]*=\S+", words[0]) and len(words) > 1)):
            out.append(text)
    return out


def _argv(command: str, **subs: str) -> list[str]:
    for old, new in subs.items():
        command = command.replace(old, new)
    return shlex.split(command)


def test_commands_are_found_in_the_readme_sections_the_walk_runs():
    text = README.read_text()
    demo = commands(section(text, "### What the demo shows"))
    assert demo and all(c.startswith(".venv/bin/runbook-bot ") for c in demo)
    real = commands(section(text, "## Running it on a real cluster"))
    assert "runbook-bot config check" in real
    assert any(c.startswith("runbook-bot run zombie-volumeattachments") for c in real)
    assert any("--dry-run" in c for c in real)


def test_the_demo_and_its_next_commands_work_as_written(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RUNBOOK_BOT_DATABASE_URL", f"sqlite:///{tmp_path / 'state.db'}")
    monkeypatch.setenv("RUNBOOK_BOT_AUDIT_KEY", "demo-key")
    monkeypatch.delenv("RUNBOOK_BOT_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    run_id = re.search(r"^run (rb-[a-z0-9]{5}) succeeded", out, re.M).group(1)  # type: ignore[union-attr]
    printed = [line.strip() for line in out.split("\nNext:\n", 1)[1].splitlines()
               if line.startswith("    runbook-bot ")]
    readme = commands(section(README.read_text(), "### What the demo shows"))
    assert printed and readme
    for command in printed + readme:
        argv = _argv(command, **{EXAMPLE_ID: run_id})
        assert argv[0].endswith("runbook-bot")
        code = main(argv[1:])
        said = capsys.readouterr()
        assert code == 0, f"{command}: {said.out}{said.err}"
        assert "error" not in said.err, command
    assert (tmp_path / f"{run_id}.html").stat().st_size > 10_000


@pytest.fixture
def sandbox(tmp_path):
    """``sim up --scenario node-dead`` as its own process; yields (env, facts)."""
    kubeconfig, env_file = tmp_path / "sandbox" / "kubeconfig", tmp_path / "sandbox" / "sandbox.env"
    err = tmp_path / "sim.err"
    with err.open("w") as stderr, subprocess.Popen(
            [sys.executable, "-m", "bot", "sim", "up", "--scenario", "node-dead", "--kubeconfig",
             str(kubeconfig), "--time-scale", "20"],
            stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)}) as proc:
        try:
            read_until_ready(proc, timeout=90)
            env = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
            said = err.read_text().split("): ", 1)[1].splitlines()[0]
            facts = dict(pair.split("=", 1) for pair in said.split(", "))
            yield env, facts, kubeconfig
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def _shell(tmp_path: Path, env: dict[str, str]):
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RUNBOOK_BOT_", "AWS_"))}
    base.update(env, HOME=str(home), PYTHONPATH=str(ROOT), RUNBOOK_BOT_AUDIT_KEY="walk-key")
    workdir = tmp_path / "laptop"
    workdir.mkdir(exist_ok=True)

    def run(argv: list[str], extra: dict[str, str] | None = None) -> str:
        if argv[0].endswith("runbook-bot"):
            argv = [sys.executable, "-m", "bot", *argv[1:]]
        elif shutil.which(argv[0]) is None:
            pytest.skip(f"{argv[0]} is not installed")
        done = subprocess.run(argv, cwd=workdir, env={**base, **(extra or {})},
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{shlex.join(argv)}: {done.stdout}{done.stderr}"
        return done.stdout

    return run, workdir


def _run_ids(text: str) -> list[str]:
    return re.findall(r"\b(rb-[a-z0-9]{5})\b", text)


def test_running_it_on_a_real_cluster_works_as_written_against_the_sandbox(sandbox, tmp_path):
    env, facts, kubeconfig = sandbox
    run, workdir = _shell(tmp_path, env)
    # 1. Config: the example, copied as runbook-bot.yaml, naming the sandbox's cluster
    example = (ROOT / "deploy" / "runbook-bot.example.yaml").read_text()
    assert f"  {EXAMPLE_CLUSTER}:" in example and "kubeconfig: ~/.kube/config" in example
    (workdir / "runbook-bot.yaml").write_text(
        example.replace(f"context: {EXAMPLE_CLUSTER}", "context: runbook-bot")
        .replace(EXAMPLE_CLUSTER, "sandbox").replace("~/.kube/config", str(kubeconfig))
        # "put yourself in one" of the groups policy.start names, as the README says
        .replace("sre-oncall: [alice, bob,", f"sre-oncall: [{os_user()}, alice, bob,"))
    walked = commands(section(README.read_text(), "## Running it on a real cluster"))
    assert len(walked) >= 5
    last_run = ""
    for command in walked:
        argv = _argv(command, **{EXAMPLE_CLUSTER: "sandbox", "=NODE": "=" + facts["node"],
                                 "RUN_ID": last_run or "RUN_ID"})
        out = run(argv)
        last_run = (_run_ids(out) or [last_run])[0] if argv[1] == "run" else last_run
        if argv[1:3] == ["config", "check"]:
            assert "cluster sandbox kubernetes" in out and "cluster sandbox aws" in out
        if "--dry-run" in argv:
            assert "would succeed" in out and "every step finished" not in out
    assert last_run


def test_the_game_day_in_the_sandbox_docs_works_as_written(sandbox, tmp_path):
    env, facts, kubeconfig = sandbox
    run, workdir = _shell(tmp_path, env)
    docs = (ROOT / "docs" / "sandbox.md").read_text()
    config = re.search(r"```yaml\n(# runbook-bot.yaml\n.*?)```", docs, re.S).group(1)  # type: ignore[union-attr]
    (workdir / "sandbox").symlink_to(kubeconfig.parent)
    (workdir / "runbook-bot.yaml").write_text(config)
    node, instance = facts["node"], facts["instance_id"]
    subs = {"ip-10-0-1-23.ap-southeast-1.compute.internal": node, "i-dcf2b6590edc59dda": instance}
    # the incident half: run, approve (the taint), export
    game = [c for c in commands(section(docs, "## Running it")) if c.startswith("runbook-bot")]
    first = game.index(next(c for c in game if "--as alice" in c))
    incident = game[first:first + 4]
    assert [c.split()[1] for c in incident] == ["run", "approve", "follow", "export"]
    run_id = ""
    for command in incident:
        out = run(_argv(command, **subs, RUN_ID=run_id or "RUN_ID"))
        run_id = run_id or _run_ids(out)[0]
    assert "succeeded" in run(["runbook-bot", "status", run_id])
    # the recovery half, as "Bringing the node back" writes it
    recovery = commands(section(docs, "### Bringing the node back"))
    assert [c.split()[0] for c in recovery][-3:] == ["runbook-bot", "runbook-bot", "kubectl"]
    recovered = ""
    for command in recovery:
        extra = {}
        if "=" in command.split()[0]:  # VAR=value command ...
            assignment, command = command.split(maxsplit=1)
            key, value = assignment.split("=", 1)
            extra[key] = value
        argv = _argv(command, **subs, RUN_ID=recovered or "RUN_ID")
        if argv[0] == "kubectl" and argv[1:3] == ["get", "node"] and len(argv) == 4:
            _until_ready(run, argv)
            continue
        out = run(argv, extra)
        if argv[1:3] == ["run", "node-recovered"]:
            recovered = _run_ids(out)[0]
    assert recovered and "succeeded" in run(["runbook-bot", "status", recovered])
    assert "out-of-service" not in out  # the last command: the node's taints


def _until_ready(run, argv: list[str]) -> None:
    """``kubectl get node`` until the node says Ready (the sandbox runs at 20x: a few seconds)."""
    for _ in range(60):
        if " Ready " in run(argv):
            return
        subprocess.run(["sleep", "0.5"], check=True)  # real time for the sandbox's clock to move
    raise AssertionError("the node never came back Ready")
