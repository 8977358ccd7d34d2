"""Every shipped alert rule is unit-tested with ``promtool test rules``, silent and firing.

``scripts/prometheus_rules.py`` writes the PrometheusRule objects' ``spec.groups`` as plain rule
files beside the unit tests of ``deploy/prometheus/*.test.yaml`` and runs promtool (Debian's
``prometheus`` package; ``make test`` installs it) on them; here it runs as a person would run it.
Which alert each unit test covers is read from the tests themselves, so a new rule without a
test, or with a test that only shows it silent, fails here.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from ruamel.yaml import YAML

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "scripts" / "prometheus_rules.py"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed: `make test` installs it (Debian's "
    "prometheus package: apt-get install prometheus)")


@functools.cache
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("prometheus_rules", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def alerts() -> dict[str, tuple[str, dict[str, Any]]]:
    """Every alert rule shipped, by name: its file and the rule."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for path, doc in script().rule_objects().items():
        for group in doc["spec"]["groups"]:
            for rule in group["rules"]:
                assert rule["alert"] not in found, f"{rule['alert']} is defined twice"
                found[rule["alert"]] = (path.name, rule)
    return found


def covered() -> dict[str, dict[str, set[bool]]]:
    """For each unit test file's rule files, the alerts it evaluates: whether each is expected
    firing (True) and silent (False) at some time."""
    out: dict[str, dict[str, set[bool]]] = {}
    for path in script().unit_tests():
        doc = YAML(typ="safe").load(path.read_text())
        for rule_file in doc["rule_files"]:
            seen = out.setdefault(rule_file, {})
            for test in doc["tests"]:
                for case in test.get("alert_rule_test", []):
                    seen.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
    return out


def test_every_alert_is_shown_firing_and_silent_by_a_unit_test_of_its_own_rule_file() -> None:
    tested = covered()
    shipped = alerts()
    assert len(shipped) >= 16
    missing = {name: f"{file}: {sorted(tested.get(file, {}).get(name, set()))}"
               for name, (file, _) in shipped.items()
               if tested.get(file, {}).get(name) != {True, False}}
    assert not missing, f"alerts not shown both firing and silent: {missing}"


def test_when_every_pod_is_gone_an_absence_alert_reads_what_the_stall_alert_reads() -> None:
    shipped = alerts()
    stalled = shipped["RunbookBotWorkerStalled"][1]["expr"]
    absent = shipped["RunbookBotAbsent"][1]
    [metric] = re.findall(r"\b(runbook_bot_\w+)", stalled)
    assert absent["expr"].strip() == f"absent({metric})"
    assert absent["labels"]["severity"] == "critical" and absent["for"]
    lease = shipped["NodeLeaseSeriesAbsent"][1]["expr"]
    assert lease.startswith("absent(kube_lease_owner") and "kube_lease_owner" in \
        shipped["NodeLeaseNotRenewed"][1]["expr"]


@needs_promtool
def test_promtool_checks_every_rule_file_and_every_unit_test_passes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = script().main(["--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.startswith("ok: 3 rule files checked, 4 unit test files passed"), out
    # what promtool read is each PrometheusRule's groups, as shipped
    for path, doc in script().rule_objects().items():
        assert YAML(typ="safe").load((tmp_path / path.name).read_text()) == {
            "groups": doc["spec"]["groups"]}


@needs_promtool
def test_a_rule_that_no_longer_fires_as_its_test_says_fails_its_unit_test(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    deploy = tmp_path / "deploy"
    shutil.copytree(ROOT / "deploy" / "prometheus", deploy / "prometheus")
    rules = (ROOT / "deploy" / "prometheus-rules.yaml").read_text()
    # the stall alert of before: it waits for half an hour instead of five minutes
    (deploy / "prometheus-rules.yaml").write_text(rules.replace("> 300\n", "> 1800\n", 1))
    out = tmp_path / "out"
    script().extract(out, deploy)
    # the unit test's case of the stall alert only (the rest take longer and say nothing more)
    unit = YAML(typ="safe").load((out / "runbook-bot.test.yaml").read_text())
    unit["tests"] = [t for t in unit["tests"] if any(
        c["alertname"] == "RunbookBotWorkerStalled" for c in t["alert_rule_test"])]
    YAML(typ="safe").dump(unit, out / "stall.test.yaml")
    done = subprocess.run([PROMTOOL, "test", "rules", "stall.test.yaml"], cwd=out,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert "alertname: RunbookBotWorkerStalled" in done.stdout + done.stderr
