"""Fixtures for the client tests: the same over-HTTP fakes the action tests use."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def _load_fakes() -> Any:
    if "rb_test_fakes" not in sys.modules:
        path = Path(__file__).parent.parent / "actions" / "fakes.py"
        spec = importlib.util.spec_from_file_location("rb_test_fakes", path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules["rb_test_fakes"] = module
        spec.loader.exec_module(module)
    return sys.modules["rb_test_fakes"]


@pytest.fixture
def fake_kube() -> Iterator[Any]:
    with _load_fakes().FakeKubeApi() as api:
        yield api
