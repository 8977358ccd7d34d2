"""The explorer's tests: saved counterexamples replayed, a bounded search of each shipped
runbook, and (marker ``explore``, outside ``make test``) planted bugs it must find."""

from __future__ import annotations

import pytest

pytest.importorskip("moto", reason="the explorer needs the sandbox: pip install runbook-bot[sim]")
