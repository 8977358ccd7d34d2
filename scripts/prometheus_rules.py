"""The alert rules' unit tests: the shipped PrometheusRules as plain rule files, run by promtool.

The rules ship as PrometheusRule objects (``deploy/prometheus-rules.yaml``, ``deploy/prometheus/*.yaml``)
for the Prometheus Operator; promtool reads plain rule files. This writes each object's
``spec.groups`` to a rule file of the same name in an output directory, copies the unit tests
(``deploy/prometheus/*.test.yaml``, whose ``rule_files`` name those files) beside them, and runs
``promtool check rules`` on the rule files and ``promtool test rules`` on the tests, each once.

Usage: ``python scripts/prometheus_rules.py [--out DIR] [--extract-only] [--promtool PATH]``.
Without ``--out`` a temporary directory is used and removed. Exits 1 if promtool finds a problem
(its output is printed), 2 if promtool is missing (Debian's ``prometheus`` package provides it).
``tests/deploy/test_alert_rules.py`` runs it in ``make test``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"


def rule_objects(deploy: Path = DEPLOY) -> dict[Path, dict[str, Any]]:
    """Every PrometheusRule shipped under ``deploy``, by file."""
    found = {}
    for path in [deploy / "prometheus-rules.yaml", *sorted((deploy / "prometheus").glob("*.yaml"))]:
        if path.name.endswith(".test.yaml"):
            continue
        doc = YAML(typ="safe").load(path.read_text())
        if isinstance(doc, dict) and doc.get("kind") == "PrometheusRule":
            found[path] = doc
    return found


def unit_tests(deploy: Path = DEPLOY) -> list[Path]:
    return sorted((deploy / "prometheus").glob("*.test.yaml"))


def extract(out: Path, deploy: Path = DEPLOY) -> tuple[list[Path], list[Path]]:
    """Write the plain rule files and copy the unit tests into ``out``; return both lists."""
    out.mkdir(parents=True, exist_ok=True)
    rules = []
    for path, doc in rule_objects(deploy).items():
        target = out / path.name
        YAML(typ="safe").dump({"groups": doc["spec"]["groups"]}, target)
        rules.append(target)
    tests = []
    for path in unit_tests(deploy):
        shutil.copy(path, out / path.name)
        tests.append(out / path.name)
    return rules, tests


def run_promtool(promtool: str, out: Path, rules: Sequence[Path], tests: Sequence[Path]) -> int:
    """``promtool check rules`` then ``promtool test rules`` in ``out``; 0 when both pass."""
    for args in (["check", "rules", *(r.name for r in rules)],
                 ["test", "rules", *(t.name for t in tests)]):
        done = subprocess.run([promtool, *args], cwd=out, capture_output=True, text=True,
                              timeout=120, check=False)
        if done.returncode != 0:
            print(f"promtool {' '.join(args)} failed:\n{done.stdout}{done.stderr}", file=sys.stderr)
            return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="where to write the rule files (default: a temporary "
                        "directory, removed afterwards)")
    parser.add_argument("--extract-only", action="store_true", help="write the files, run nothing")
    parser.add_argument("--promtool", default=shutil.which("promtool"), help="the promtool binary")
    parser.add_argument("--deploy", type=Path, default=DEPLOY, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="prometheus-rules-") as tmp:
        out = args.out or Path(tmp)
        rules, tests = extract(out, args.deploy)
        if args.extract_only:
            print("\n".join(str(p) for p in [*rules, *tests]))
            return 0
        if not args.promtool:
            print("promtool is not installed: apt-get install prometheus (Debian's package)",
                  file=sys.stderr)
            return 2
        code = run_promtool(args.promtool, out, rules, tests)
        if code == 0:
            print(f"ok: {len(rules)} rule files checked, {len(tests)} unit test files passed")
        return code


if __name__ == "__main__":
    sys.exit(main())
