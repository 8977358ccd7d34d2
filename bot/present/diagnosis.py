"""How a diagnosis reads in a terminal: each finding with its severity, evidence, runbook, params
and the command that starts it, worst first."""

from __future__ import annotations

from bot.diagnose import Finding, Report


def _when(report: Report) -> str:
    return report.scanned_at.strftime("%Y-%m-%d %H:%M:%S %Z").strip()


def finding_text(f: Finding) -> list[str]:
    subject = " ".join(f"{k}={v}" for k, v in f.subject.items())
    lines = [f"{f.severity.value.upper():<7} {f.kind}  {subject}", f"  {f.summary}", "  evidence:"]
    lines += [f"    - {e.what}  [{e.source}, read {e.read_at.strftime('%H:%M:%S')}]"
              for e in f.evidence]
    if f.runbook:
        params = " ".join(f"{k}={v}" for k, v in sorted(f.params.items()))
        lines += [f"  runbook: {f.runbook}  params: {params or '-'}", f"  run:     {f.command}"]
    else:
        lines += ["  runbook: none applies", f"  look:    {f.command}"]
    return lines


def report_text(report: Report) -> str:
    n = len(report.findings)
    head = (f"cluster {report.cluster}, scanned {_when(report)}: "
            + (f"{n} finding{'s' if n != 1 else ''}" if n else "nothing found")
            + f" ({report.calls} API calls)")
    lines = [head]
    for f in report.findings:
        lines += ["", *finding_text(f)]
    return "\n".join(lines) + "\n"
