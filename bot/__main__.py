"""Entry point for ``python -m bot`` and the ``runbook-bot`` console script."""

from __future__ import annotations

import sys

from bot.cli import main

if __name__ == "__main__":
    sys.exit(main())
