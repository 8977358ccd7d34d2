"""``validate``, ``list``, ``show`` and ``schema``: the commands for writing and reading runbooks.

They need no cluster, no AWS account and no Slack, so they are what an author runs while editing,
and what CI runs on every change. Only argparse is imported at module level: building the parser
for ``runbook-bot --help`` must stay fast and import no SDK.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot.runbook.model import Runbook, Step
    from bot.runbook.source import DirectorySource
    from bot.runbook.validate import Catalog


def register(sub: Any) -> None:
    p = sub.add_parser(
        "validate",
        help="check runbooks and print every problem as FILE:LINE:COL: message",
        description="Check runbook files (or every *.yaml in a directory) against the language "
        "and the action catalog. Exit status 0 when all are valid, 1 otherwise.",
    )
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="runbook files or directories (default: the shipped runbooks and the "
                   "configured directories)")
    p.set_defaults(handler=cmd_validate)

    p = sub.add_parser("list", help="the runbooks you can run, with step counts",
                       description="List the runbooks you can run: the shipped ones and those of "
                       "the configured runbooks_dir directories (a later one replaces a shipped "
                       "runbook of the same name, with a warning naming both files).")
    p.add_argument("--dir", help="only this runbooks directory (default: the shipped runbooks and "
                   "the configured directories)")
    p.set_defaults(handler=cmd_list)

    p = sub.add_parser("show", help="a runbook's params and steps, which need approval, and guards",
                       description="Show a runbook step by step: what each does, whether it "
                       "needs approval and why, and the guards checked before it applies.")
    p.add_argument("name", metavar="NAME", help="a runbook name (see `list`) or a file path")
    p.add_argument("--dir", help="only this runbooks directory (default: the shipped runbooks and "
                   "the configured directories)")
    p.set_defaults(handler=cmd_show)

    p = sub.add_parser("schema", help="print the JSON Schema of the runbook language",
                       description="Print the JSON Schema generated from the runbook model "
                       "(committed as runbooks/runbook.schema.json).")
    p.set_defaults(handler=cmd_schema)


def _catalog() -> Catalog:
    from bot.actions.builtin import builtin_actions

    return builtin_actions()


def _source(explicit: str | None, catalog: Catalog) -> DirectorySource:
    """``--dir`` alone, else the shipped runbooks and the configured directories on top."""
    from bot.runbook.source import DirectorySource

    def warn(line: str) -> None:
        print(f"runbook-bot: warning: {line}", file=sys.stderr)

    if explicit:
        return DirectorySource([explicit], catalog=catalog, shipped=False, on_override=warn)
    from bot.config import load_settings

    return DirectorySource(load_settings().runbooks_dir, catalog=catalog, on_override=warn)


def _files(paths: list[str]) -> list[Path]:
    from bot.runbook.loader import runbook_files

    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        out += runbook_files(path) if path.is_dir() else [path]
    return out


def cmd_validate(args: argparse.Namespace) -> int:
    from bot.errors import RunbookError
    from bot.runbook.loader import load_with_sources, read_runbook_text
    from bot.runbook.wording import unworded

    catalog = _catalog()
    paths = _files(args.paths) if args.paths else _source(None, catalog).files()
    if not paths:
        print("no runbooks found (*.yaml, *.yml)", file=sys.stderr)
        return 1
    failed = 0
    for path in paths:
        try:
            runbook, sources = load_with_sources(read_runbook_text(path), file=str(path),
                                                 catalog=catalog)
        except RunbookError as e:
            failed += 1
            for problem in e.problems:
                print(problem)
            continue
        warnings = unworded(runbook, catalog=catalog, locate=sources.problem)
        for w in warnings:
            print(f"{w.file}:{w.line}:{w.col}: warning: {w.message}", file=sys.stderr)
        print(f"{path}: ok ({runbook.name}, {len(runbook.spec.steps)} steps"
              + (f", {len(warnings)} warning{'s' if len(warnings) > 1 else ''})" if warnings
                 else ")"))
    if failed:
        print(f"{failed} of {len(paths)} runbooks invalid", file=sys.stderr)
        return 1
    return 0


def _destructive(step: Step, catalog: Catalog) -> bool:
    return step.action is not None and step.action in catalog and catalog.get(step.action).destructive


def _load_dir(explicit: str | None, catalog: Catalog) -> tuple[dict[str, Runbook], list[str]]:
    """Every runbook by name, and the problems of the files that do not load."""
    found: dict[str, Runbook] = {}
    problems: list[str] = []
    for name, entry in sorted(_source(explicit, catalog).index().entries.items()):
        if entry.runbook is not None:
            found[name] = entry.runbook
        elif entry.error is not None:
            problems += [str(p) for p in entry.error.problems]
    return found, problems


def cmd_list(args: argparse.Namespace) -> int:
    catalog = _catalog()
    runbooks, problems = _load_dir(args.dir, catalog)
    rows = [("NAME", "TITLE", "STEPS", "DESTRUCTIVE")]
    for name in sorted(runbooks):
        rb = runbooks[name]
        destructive = sum(_destructive(s, catalog) for s in rb.spec.steps)
        rows.append((name, rb.metadata.title, str(len(rb.spec.steps)), str(destructive)))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for row in rows:
        print(f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]:>{widths[2]}}  {row[3]}")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


def cmd_show(args: argparse.Namespace) -> int:
    from bot.errors import NotFound
    from bot.runbook.loader import load_runbook

    catalog = _catalog()
    if args.name.endswith((".yaml", ".yml")) or "/" in args.name:
        runbook = load_runbook(args.name, catalog=catalog)
    else:
        runbooks, problems = _load_dir(args.dir, catalog)
        if args.name not in runbooks:
            for problem in problems:
                print(problem, file=sys.stderr)
            known = ", ".join(sorted(runbooks)) or "none"
            raise NotFound(f"no runbook named {args.name!r}; runbooks: {known}")
        runbook = runbooks[args.name]
    print(describe(runbook, catalog))
    return 0


def describe(runbook: Runbook, catalog: Catalog) -> str:
    """A runbook as plain text for a terminal: params, then each step with approval and guards."""
    md = runbook.metadata
    lines = [f"{md.name}: {md.title}"]
    if md.description:
        import textwrap

        lines += ["", *textwrap.wrap(" ".join(md.description.split()), width=96,
                                     initial_indent="  ", subsequent_indent="  ")]
    lines += _param_lines(runbook)
    lines += ["", "Steps:"]
    for number, step in enumerate(runbook.spec.steps, 1):
        lines += _step_lines(runbook, number, step, catalog)
    return "\n".join(lines)


def _param_lines(runbook: Runbook) -> list[str]:
    """The ``Params:`` section of ``describe``: none without params."""
    if not runbook.spec.params:
        return []
    lines = ["", "Params:"]
    for name, param in runbook.spec.params.items():
        bits = [param.type, "required" if param.required else "optional"]
        if param.default is not None:
            bits.append(f"default {param.default}")
        about = f": {param.description}" if param.description else ""
        lines.append(f"  {name} ({', '.join(bits)}){about}")
    return lines


def _step_lines(runbook: Runbook, number: int, step: Step, catalog: Catalog) -> list[str]:
    """One step in ``describe``: its action, conditions, approval, guards, wait and failure path."""
    from bot.runbook.durations import format_duration
    from bot.runbook.validate import approval_reason

    destructive = _destructive(step, catalog)
    kind = step.action if step.action else "manual"
    flag = "  [DESTRUCTIVE]" if destructive else ""
    lines = [f"  {number}. {step.id}: {step.title}  ({kind}){flag}"]
    if step.when_expr:
        lines.append(f"       only when: {step.when_expr}")
        if step.when_because:
            lines.append(f"         else not needed: {step.when_because}")
    if step.foreach:
        lines.append(f"       for each item in: {step.foreach}")
    reason = approval_reason(runbook, step, destructive=destructive)
    if reason:
        lines += _approval_lines(runbook, step, reason)
    for guard in step.guards:
        lines.append(f"       guard: {guard.expr}")
        if guard.checks:
            lines.append(f"         checks: {guard.checks}")
        lines.append(f"         else: {' '.join(guard.message.split())}")
    if step.wait_until:
        lines.append(f"       waits until: {step.wait_until.expr} (every "
                     f"{format_duration(step.wait_until.interval)}, up to "
                     f"{format_duration(step.wait_until.timeout)})")
        if step.wait_until.waiting_for:
            lines.append(f"         waiting for: {step.wait_until.waiting_for}")
    if not isinstance(step.on_failure, str):
        lines.append(f"       on failure: go to {step.on_failure.goto}")
    elif step.on_failure == "continue":
        lines.append("       on failure: continue")
    return lines


def _approval_lines(runbook: Runbook, step: Step, reason: str) -> list[str]:
    """Who must approve a step (its own approval over the runbook's defaults), and why."""
    from bot.runbook.durations import format_duration

    defaults, own = runbook.spec.approvals, step.approval
    count = (own.min_approvers if own and own.min_approvers else None) or (
        defaults.min_approvers or 1)
    groups = (own.groups if own and own.groups is not None else None) or defaults.groups
    expires = (own.expires_after if own and own.expires_after else None) or (
        defaults.expires_after)
    who = f" from {', '.join(groups)}" if groups else ""
    until = f", expires after {format_duration(expires)}" if expires else ""
    lines = [f"       approval: {count} approver{'s' if count > 1 else ''}{who}"
             f"{until} ({reason})"]
    if own and own.description:
        lines.append(f"       approvers are told: {' '.join(own.description.split())}")
    return lines


def cmd_schema(args: argparse.Namespace) -> int:
    from bot.runbook.schema import schema_json

    sys.stdout.write(schema_json())
    return 0
