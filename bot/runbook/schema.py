"""The JSON Schema of the runbook language, generated from the model so the two cannot drift.

Editors with the YAML language server read the committed copy (``runbooks/runbook.schema.json``)
to complete and check runbooks as they are typed; a test fails when the copy is stale.
"""

from __future__ import annotations

import json
from typing import Any

from bot.runbook.model import API_VERSION, Runbook

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def runbook_schema() -> dict[str, Any]:
    """The JSON Schema of a runbook document, as a dict."""
    body = Runbook.model_json_schema(by_alias=True)
    return {
        "$schema": SCHEMA_DIALECT,
        **body,
        "title": f"runbook-bot runbook ({API_VERSION})",
        "description": "An incident runbook: typed params, approvals, and guarded steps. "
        "See docs/runbook-language.md.",
    }


def schema_json() -> str:
    """The schema as the text committed in runbooks/runbook.schema.json."""
    return json.dumps(runbook_schema(), indent=2, ensure_ascii=False) + "\n"
