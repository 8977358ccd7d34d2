"""Fixtures for the client tests: the same over-HTTP fakes the action tests use."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.kube_api import FakeKubeApi


@pytest.fixture
def fake_kube() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as api:
        yield api
