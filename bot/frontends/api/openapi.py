"""The OpenAPI 3.1 document of the API, generated from its route table (``app.Api.routes``, whose
decision routes come from the verb table) and the pydantic models' ``model_json_schema()``, so it
cannot fall behind the routes: ``GET /api/v1/openapi.json`` serves it, a test checks every route
is in it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

import bot
from bot.frontends.api.models import ErrorBody

if TYPE_CHECKING:
    from bot.frontends.api.routing import Route

REF = "#/components/schemas/{model}"
_ERRORS = {"400": "a body or argument that is not valid", "401": "not authenticated",
           "403": "refused", "404": "no such run, runbook or endpoint",
           "409": "the engine refused the decision (audited), or another worker holds the run",
           "413": "the body is too large", "429": "too many requests: wait Retry-After seconds"}


def _schema(model: type[BaseModel], schemas: dict[str, Any]) -> dict[str, str]:
    """``model``'s schema into ``schemas`` (its ``$defs`` hoisted); a reference to it."""
    raw = model.model_json_schema(ref_template=REF)
    for name, sub in raw.pop("$defs", {}).items():
        schemas.setdefault(name, sub)
    schemas[model.__name__] = raw
    return {"$ref": REF.format(model=model.__name__)}


def _operation(route: Route, schemas: dict[str, Any]) -> dict[str, Any]:
    error = {"content": {"application/json": {"schema": {"$ref": REF.format(
        model=ErrorBody.__name__)}}}}
    params: list[dict[str, Any]] = [
        {"name": n, "in": "path", "required": True, "schema": {"type": "string"}}
        for n in re.findall(r"\{(\w+)\}", route.path)]
    params += [{"name": n, "in": "query", "required": False, "schema": {"type": t},
                "description": d} for n, t, d in route.query]
    ok: dict[str, Any] = {"description": "OK"}
    if route.answer is not None:
        ok["content"] = {route.content: {"schema": _schema(route.answer, schemas)}}
    else:
        ok["content"] = {route.content: {}}
    op: dict[str, Any] = {
        "operationId": f"{route.method.lower()}_" + re.sub(r"\W+", "_", route.path[len("/api/v1/"):]
                                                           ).strip("_"),
        "summary": route.summary,
        "responses": {str(route.status): ok,
                      **{code: {"description": what, **error} for code, what in _ERRORS.items()
                         if route.auth or code in ("404", "429")}},
    }
    if params:
        op["parameters"] = params
    if route.body is not None:
        op["requestBody"] = {"required": True, "content": {
            "application/json": {"schema": _schema(route.body, schemas)}}}
    if route.auth:
        op["security"] = [{"bearer": []}]
    else:
        op["security"] = []
    return op


def document(routes: Sequence[Route]) -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    _schema(ErrorBody, schemas)
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route, schemas)
    return {
        "openapi": "3.1.0",
        "info": {"title": "runbook-bot API", "version": bot.__version__,
                 "description": "Start, decide, read and follow runs; every request but this "
                 "document authenticated (docs/api.md)."},
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer",
                       "description": "a Kubernetes service account token, an OIDC ID token or "
                       "an API token (docs/api.md, Authentication)"}}},
    }
