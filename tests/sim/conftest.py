"""Fixtures for the sandbox tests: the pool that keeps one sandbox running at a time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("moto")

from tests.sim.kit import Pool  # the kit needs moto: imported after the skip


@pytest.fixture(scope="session")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    p = Pool(tmp_path_factory.mktemp("sandboxes"))
    yield p
    p.close()
