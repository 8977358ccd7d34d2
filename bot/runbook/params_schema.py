"""A runbook's params as a pydantic model, and so as a JSON schema: what a caller that is not a
person (an AI agent through the MCP server, a script through the API) is told it may pass.

Generated from the runbook's own ``spec.params`` (``Param``: type, description, required, default,
pattern, enum values, bounds), so the schema cannot drift from what ``check_params`` accepts. A
``duration`` is a string like ``6m`` or a number of seconds; a ``list`` is a list of strings or
one comma-separated string, as the other front-ends take them. The model forbids unknown params.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from bot.runbook.model import Param, Runbook


def _type(spec: Param) -> Any:
    if spec.type == "integer":
        return Annotated[int, Field(ge=spec.minimum, le=spec.maximum)]
    if spec.type == "boolean":
        return bool
    if spec.type == "enum":
        return Literal[tuple(spec.values or ())]
    if spec.type == "duration":
        return str | float
    if spec.type == "list":
        item = Annotated[str, Field(pattern=spec.pattern)] if spec.pattern else str
        return list[item] | str  # type: ignore[valid-type]
    return Annotated[str, Field(pattern=spec.pattern)] if spec.pattern else str


def params_model(runbook: Runbook) -> type[BaseModel]:
    """The runbook's params as a model: one field per param, required ones required."""
    fields: dict[str, Any] = {}
    for name, spec in runbook.spec.params.items():
        kind = _type(spec)
        if spec.required:
            fields[name] = (kind, Field(..., description=spec.description or None))
        else:
            fields[name] = (kind | None, Field(spec.default, description=spec.description or None))
    model: type[BaseModel] = create_model(
        f"{runbook.name}-params", __config__=ConfigDict(extra="forbid"), **fields)
    return model


def params_json_schema(runbook: Runbook) -> dict[str, Any]:
    """The JSON schema of the runbook's params (``params_model``)."""
    return params_model(runbook).model_json_schema()
