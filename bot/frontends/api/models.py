"""The API's request bodies, as pydantic models: one per kind of request, and one per decision verb
generated from the verb table (``bot.engine.verbs``), so a verb's JSON body has the arguments its
row declares and nothing else (``run_id`` is in the path). Their ``model_json_schema()`` is what
the OpenAPI document publishes (``openapi.py``), and what a body is checked against.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from bot.engine.verbs import Arg, Verb, decisions


class Body(BaseModel):
    """A request body: unknown members are refused, so a typo is an error, not a default."""

    model_config = ConfigDict(extra="forbid")


class StartBody(Body):
    """``POST /api/v1/runs``: the run to start (the ``run`` verb's arguments)."""

    runbook: str = Field(min_length=1, max_length=63, description="the runbook to run")
    params: dict[str, Any] = Field(default_factory=dict, description="the run's parameters")
    dry_run: bool = Field(default=False, description="plan every step, change nothing")
    incident: str | None = Field(default=None, max_length=500,
                                 description="the incident this run belongs to: an id (INC-123), "
                                 "a channel or a link")
    reason: str | None = Field(default=None, max_length=2000,
                               description="an agent's request: why it asks (shown to the "
                               "approvers; needed unless dry_run)")
    evidence: str | None = Field(default=None, max_length=8000,
                                 description="an agent's request: what it found (shown to the "
                                 "approvers)")


class ValidateBody(Body):
    """``POST /api/v1/runbooks/validate``: a runbook's YAML text."""

    text: str = Field(description="the runbook, as YAML")


class DiagnoseBody(Body):
    """``POST /api/v1/diagnose``: what to scan (a pod or a node, not both)."""

    cluster: str = Field(default="", description="a configured cluster (\"\": the only one)")
    node: str | None = None
    pod: str | None = None
    namespace: str | None = None


class ErrorBody(BaseModel):
    """Every error: a stable code and a sentence for a person; never a stack trace."""

    error: str
    message: str


class DecisionAnswer(BaseModel):
    """What a decision did: ``ok`` false (409) when the engine refused it (audited)."""

    ok: bool
    message: str
    run_id: str
    step: str | None = None


def _field(a: Arg) -> tuple[Any, Any]:
    """A verb argument as a JSON member: its type and its field (required or defaulted)."""
    kind: Any = {"flag": bool, "pairs": dict[str, str]}.get(a.kind)
    if kind is None:
        kind = int if a.type == "count" else str
    default: Any = ... if a.required else ({"flag": False}.get(a.kind, a.default))
    if not a.required and kind is not bool:
        kind = kind | None
    return kind, Field(default, description=a.help)


def _model_name(verb: Verb) -> str:
    return "".join(part.capitalize() for part in verb.name.split("-")) + "Body"


def decision_body(verb: Verb) -> type[Body]:
    """The JSON body of a decision verb: its arguments but ``run_id`` (in the path)."""
    fields = {a.name: _field(a) for a in verb.args if a.name != "run_id"}
    model: type[Body] = create_model(_model_name(verb), __base__=Body,
                                     __doc__=f"``{verb.name}``: {verb.help}",
                                     **fields)  # type: ignore[call-overload]
    return model


DECISION_BODIES: dict[str, type[Body]] = {
    v.name: decision_body(v) for v in decisions() if "api" in v.front_ends and v.name != "run"}
