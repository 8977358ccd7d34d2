"""``runbook-bot validate | list | show | schema``, run the way a person runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli import main

ROOT = Path(__file__).parents[2]
INVALID = Path(__file__).parent / "invalid"


_DESTRUCTIVE = {"aws.ec2.instance.stop", "aws.ec2.instance.terminate", "k8s.node.taint",
                "aws.ec2.volume.detach", "k8s.pod.delete", "k8s.volumeattachment.delete",
                "k8s.nodeclaim.delete"}


def _ngns():  # type: ignore[no-untyped-def]
    from bot.actions.builtin import builtin_actions
    from bot.runbook.loader import load_runbook

    return load_runbook(ROOT / "runbooks" / "node-dead-ngns.yaml", catalog=builtin_actions())


def test_validate_accepts_the_shipped_runbooks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(ROOT / "runbooks")]) == 0
    lines = capsys.readouterr().out.splitlines()
    steps = len(_ngns().spec.steps)
    assert f"{ROOT / 'runbooks' / 'node-dead-ngns.yaml'}: ok (node-dead-ngns, {steps} steps)" in lines
    assert len(lines) == len(list((ROOT / "runbooks").glob("*.yaml")))
    assert all(": ok (" in line for line in lines)


def test_validate_defaults_to_the_configured_runbooks_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RUNBOOK_BOT_RUNBOOKS_DIR", str(ROOT / "runbooks"))
    monkeypatch.delenv("RUNBOOK_BOT_CONFIG", raising=False)
    assert main(["validate"]) == 0
    assert "node-dead-ngns" in capsys.readouterr().out


def test_a_runbook_with_three_mistakes_prints_three_located_errors_and_fails(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = INVALID / "three-mistakes.yaml"
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert [line.split(": ", 1)[0] for line in lines] == [f"{path}:15:15", f"{path}:22:15",
                                                          f"{path}:24:19"]
    assert "unknown action 'k8s.node.gett'" in lines[0]
    assert "unknown param 'nodes'" in lines[1]
    assert "approval cannot be switched off" in lines[2]
    assert out.err == "1 of 1 runbooks invalid\n"


def test_validate_reports_every_invalid_file_of_a_directory(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(INVALID)]) == 1
    count = len(list(INVALID.glob("*.yaml")))
    assert capsys.readouterr().err == f"{count} of {count} runbooks invalid\n"


def test_validate_of_a_missing_file_is_a_located_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(tmp_path / "nope.yaml")]) == 1
    assert capsys.readouterr().out == (
        f"{tmp_path / 'nope.yaml'}:1:1: cannot read the file: No such file or directory\n"
    )


def test_list_prints_a_table_of_runbooks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--dir", str(ROOT / "runbooks")]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["NAME", "TITLE", "STEPS", "DESTRUCTIVE"]
    by_name = {r.split()[0]: r.split()[-2:] for r in rows}
    ngns = _ngns()
    destructive = [s for s in ngns.spec.steps if s.action in _DESTRUCTIVE]
    assert by_name["node-dead-ngns"] == [str(len(ngns.spec.steps)), str(len(destructive))]
    assert by_name["zombie-volumeattachments"] == ["2", "0"]


def test_show_lists_steps_in_order_with_approvals_and_guards(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "node-dead-ngns", "--dir", str(ROOT / "runbooks")]) == 0
    out = capsys.readouterr().out
    order = [out.index(f" {step}: ") for step in ("node", "instance", "fence", "taint", "done")]
    assert order == sorted(order)
    index = [s.id for s in _ngns().spec.steps].index("force_detach") + 1
    assert f"{index}. force_detach: BREAK GLASS" in out
    assert ("approval: 2 approvers from sre-oncall, expires after 30m "
            "(destructive action: approval is always required)") in out
    assert "guard: steps.fenced.result.state in ['stopped', 'terminated']" in out


def test_show_of_an_unknown_runbook_names_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "node-dead", "--dir", str(ROOT / "runbooks")]) == 1
    assert capsys.readouterr().err == (
        "runbook-bot: error: no runbook named 'node-dead'; runbooks: multi-attach-triage, "
        "node-dead-ngns, node-not-ready-triage, node-recovered, stuck-terminating-volume, "
        "volume-affinity-conflict, "
        "zombie-volumeattachments, zone-outage-ngns\n"
    )


def test_schema_prints_the_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "runbook-bot runbook (runbook-bot/v1)"


def test_help_imports_no_cloud_or_chat_sdk() -> None:
    probe = (
        "import sys, contextlib, io\n"
        "from bot.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try: main(['--help'])\n"
        "    except SystemExit: pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('boto3', 'botocore', 'kubernetes', 'slack_sdk', 'slack_bolt')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                          cwd=ROOT)
    assert done.stdout.strip() == "[]"


def test_validate_imports_no_cloud_or_chat_sdk() -> None:
    probe = (
        "import sys, contextlib, io\n"
        "from bot.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['validate', 'runbooks'])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('boto3', 'botocore', 'kubernetes', 'slack_sdk', 'slack_bolt')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                          cwd=ROOT)
    assert done.stdout.strip() == "[]"
