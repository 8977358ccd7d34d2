"""Fixtures for the runbook language tests: the shipped action catalog and a minimal valid runbook."""

from __future__ import annotations

import pytest

from bot.actions.builtin import builtin_actions
from bot.actions.registry import Registry

MINIMAL = """\
apiVersion: runbook-bot/v1
kind: Runbook
metadata:
  name: minimal
  title: Minimal
spec:
  params:
    node:
      type: string
      required: true
  steps:
    - id: read
      title: "Read {{ params.node }}"
      action: k8s.node.get
      with:
        node: "{{ params.node }}"
      outputs:
        ready: result.ready
    - id: tell
      title: Tell
      action: notify
      with:
        message: "ready={{ steps.read.outputs.ready }}"
"""


@pytest.fixture
def catalog() -> Registry:
    return builtin_actions()


@pytest.fixture
def minimal() -> str:
    return MINIMAL
