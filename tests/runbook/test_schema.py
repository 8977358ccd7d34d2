"""The committed JSON Schema is the one the model generates, and it describes real runbooks."""

from __future__ import annotations

import json
from pathlib import Path

from bot.runbook.schema import runbook_schema, schema_json

COMMITTED = Path(__file__).parents[2] / "runbooks" / "runbook.schema.json"


def test_the_committed_schema_matches_the_model() -> None:
    assert COMMITTED.read_text(encoding="utf-8") == schema_json(), (
        "runbooks/runbook.schema.json is stale: run `make schema`"
    )


def test_the_schema_names_its_dialect_and_the_language_version() -> None:
    schema = runbook_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == "runbook-bot runbook (runbook-bot/v1)"
    assert set(schema["required"]) == {"apiVersion", "kind", "metadata", "spec"}


def test_the_schema_uses_the_yaml_spelling_of_fields() -> None:
    step = runbook_schema()["$defs"]["Step"]["properties"]
    assert "with" in step and "with_" not in step


def test_durations_are_strings_like_6m_or_seconds_in_the_schema() -> None:
    timeout = json.dumps(runbook_schema()["$defs"]["Step"]["properties"]["timeout"])
    assert "(\\\\d+m)?" in timeout and '"number"' in timeout
