"""How long ``runbook-bot --help`` takes, and proof that it imports no cloud or chat SDK.

``--help`` is the first thing a newcomer runs and what shell completion calls; it must feel
instant. Importing boto3, kubernetes or slack would cost hundreds of milliseconds, so the command
line imports them only inside the handlers that need them. Target: median under 300 ms.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

RUNS = 7
TARGET_MS = 300.0
SDKS = ("boto3", "botocore", "kubernetes", "slack_sdk", "slack_bolt")
ROOT = Path(__file__).resolve().parents[1]
COMMAND = [sys.executable, "-m", "bot", "--help"]


def wall_times() -> list[float]:
    subprocess.run(COMMAND, cwd=ROOT, capture_output=True, check=True)  # warm the file cache
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(COMMAND, cwd=ROOT, capture_output=True, check=True)
        times.append((time.perf_counter() - start) * 1000)
    return times


def imported_sdks() -> list[str]:
    """Top-level packages that ``-X importtime`` shows were imported by ``--help``."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "bot", "--help"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    found = set()
    for line in done.stderr.splitlines():
        if "|" not in line:
            continue
        module = line.rsplit("|", 1)[1].strip()
        if module.split(".")[0] in SDKS:
            found.add(module.split(".")[0])
    return sorted(found)


def main() -> int:
    times = wall_times()
    median, worst = statistics.median(times), max(times)
    sdks = imported_sdks()
    print(f"runbook-bot --help: median {median:.0f} ms, max {worst:.0f} ms over {RUNS} runs "
          f"(target < {TARGET_MS:.0f} ms)")
    print(f"SDKs imported: {', '.join(sdks) if sdks else 'none'}")
    ok = median < TARGET_MS and not sdks
    print("OK" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
