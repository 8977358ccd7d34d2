"""Fixtures for the sandbox tests: the pool that keeps one sandbox running at a time."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("moto")


def _load_kit() -> Any:
    if "sim_kit" not in sys.modules:
        spec = importlib.util.spec_from_file_location("sim_kit", Path(__file__).with_name("kit.py"))
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules["sim_kit"] = module
        spec.loader.exec_module(module)
    return sys.modules["sim_kit"]


kit = _load_kit()


@pytest.fixture(scope="session")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    p = kit.Pool(tmp_path_factory.mktemp("sandboxes"))
    yield p
    p.close()
