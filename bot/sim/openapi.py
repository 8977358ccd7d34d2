"""OpenAPI v3 documents, so that ``kubectl apply``, ``replace`` and ``explain`` work as on EKS.

kubectl downloads the server's OpenAPI v3 documents to validate what it sends and to explain
fields. No document can be downloaded from a real cluster here, so they are built from the JSON
schemas of the Kubernetes types that the ``kubernetes-validate`` package ships (the newest at or
below the version the sandbox reports), reduced to the kinds the sandbox serves and what they
refer to. Each kind carries ``x-kubernetes-group-version-kind``, which is how kubectl finds it.
Each group/version document lists the PATCH operation of its resources with the
``fieldValidation`` parameter, so kubectl leaves validation to the server (``fieldValidation``:
unknown fields are refused under ``Strict``, the kubectl default).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from bot.sim.discovery import VERSION
from bot.sim.errors import ApiError
from bot.sim.resources import RESOURCES, Resource

_VERSION_DIR = re.compile(r"^v(\d+)\.(\d+)\.(\d+)-local$")


def _schema_dir() -> Path:
    spec = importlib.util.find_spec("kubernetes_validate")
    if spec is None or not spec.submodule_search_locations:
        raise ApiError(404, "NotFound", "no OpenAPI schemas: install runbook-bot[sim] "
                       "(kubernetes-validate ships them)")
    root = Path(next(iter(spec.submodule_search_locations))) / "kubernetes-json-schema"
    want = (int(VERSION["major"]), int(VERSION["minor"]))
    found = sorted(((int(m[1]), int(m[2])), p) for p in root.iterdir()
                   if (m := _VERSION_DIR.match(p.name)))
    usable = [p for v, p in found if v <= want] or [p for _, p in found]
    if not usable:
        raise ApiError(404, "NotFound", f"no Kubernetes JSON schemas under {root}")
    return usable[-1]


def definition_name(res: Resource) -> str:
    group = res.group.split(".", 1)[0] if res.group else "core"
    return f"io.k8s.api.{group}.{res.version}.{res.kind}"


def _convert(node: Any) -> Any:
    """JSON Schema as kubernetes-validate writes it -> OpenAPI 3.0 (refs, nullable types)."""
    if isinstance(node, list):
        return [_convert(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k == "$ref":
            out[k] = str(v).replace("#/$defs/", "#/components/schemas/")
        elif k == "type" and isinstance(v, list):
            kinds = [t for t in v if t != "null"]
            out[k] = kinds[0] if kinds else "object"
        elif k in ("$schema", "$id"):
            continue
        else:
            out[k] = _convert(v)
    if "$ref" in out and len(out) > 1:  # OpenAPI 3.0 ignores siblings of $ref: wrap it
        ref = out.pop("$ref")
        out["allOf"] = [{"$ref": ref}]
    return out


def _refs(node: Any, found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            found.add(ref.rsplit("/", 1)[-1])
        for v in node.values():
            _refs(v, found)
    elif isinstance(node, list):
        for v in node:
            _refs(v, found)


@cache
def _definitions() -> dict[str, Any]:
    raw = json.loads((_schema_dir() / "_definitions.json").read_text())
    return dict(raw.get("$defs") or raw.get("definitions") or {})


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _paths(resources: list[Resource]) -> dict[str, Any]:
    params = [{"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
              {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
              {"name": "fieldManager", "in": "query", "schema": {"type": "string"}}]
    paths: dict[str, Any] = {}
    for r in resources:
        base = "/" + _gv_path(r.group, r.version)
        scope = f"{base}/namespaces/{{namespace}}/{r.plural}" if r.namespaced else f"{base}/{r.plural}"
        gvk = {"group": r.group, "version": r.version, "kind": r.kind}
        ok = {"200": {"description": "OK"}}
        paths[scope] = {"post": {"parameters": params, "responses": ok,
                                 "x-kubernetes-action": "post", "x-kubernetes-group-version-kind": gvk}}
        paths[f"{scope}/{{name}}"] = {
            verb: {"parameters": params, "responses": ok, "x-kubernetes-action": verb,
                   "x-kubernetes-group-version-kind": gvk}
            for verb in ("put", "patch")}
    return paths


@cache
def group_version_document(group: str, version: str) -> dict[str, Any]:
    defs = _definitions()
    served = [r for r in RESOURCES if r.group == group and r.version == version]
    if not served:
        raise ApiError(404, "NotFound", f"no OpenAPI document for {_gv_path(group, version)}")
    wanted = {definition_name(r) for r in served} | {definition_name(r) + "List" for r in served}
    wanted |= {"io.k8s.apimachinery.pkg.apis.meta.v1.Status",
               "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"}
    seen: set[str] = set()
    todo = [w for w in wanted if w in defs]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        found: set[str] = set()
        _refs(defs[name], found)
        todo += [f for f in found if f in defs and f not in seen]
    schemas = {name: _convert(defs[name]) for name in sorted(seen)}
    for r in served:
        for suffix in ("", "List"):
            s = schemas.get(definition_name(r) + suffix)
            if s is not None:
                s["x-kubernetes-group-version-kind"] = [
                    {"group": r.group, "version": r.version, "kind": r.kind + suffix}]
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": VERSION["gitVersion"]},
            "paths": _paths(served), "components": {"schemas": schemas}}


def _hash(group: str, version: str) -> str:
    doc = json.dumps(group_version_document(group, version), sort_keys=True).encode()
    return hashlib.sha512(doc).hexdigest()[:128].upper()


def index() -> dict[str, Any]:
    pairs = sorted({(r.group, r.version) for r in RESOURCES})
    return {"paths": {_gv_path(g, v): {
        "serverRelativeURL": f"/openapi/v3/{_gv_path(g, v)}?hash={_hash(g, v)}"} for g, v in pairs}}


def serve(path: str) -> dict[str, Any] | None:
    """The document for ``/openapi/v3`` or ``/openapi/v3/api/v1``-style paths; None if not one."""
    p = path.rstrip("/")
    if p == "/openapi/v3":
        return index()
    parts = [x for x in p.split("/") if x]
    if parts[:2] != ["openapi", "v3"]:
        return None
    rest = parts[2:]
    if rest[:1] == ["api"] and len(rest) == 2:
        return group_version_document("", rest[1])
    if rest[:1] == ["apis"] and len(rest) == 3:
        return group_version_document(rest[1], rest[2])
    return None


def unknown_fields(res: Resource, obj: dict[str, Any]) -> list[str]:
    """Paths of fields the kind's schema does not declare (for ``fieldValidation=Strict``)."""
    defs = _definitions()
    out: list[str] = []

    def resolve(schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            schema = defs.get(str(schema["$ref"]).rsplit("/", 1)[-1], {})
        return schema

    def walk(value: Any, schema: dict[str, Any], where: str) -> None:
        schema = resolve(schema)
        if isinstance(value, dict):
            props = schema.get("properties")
            if props is None:
                return  # a map (additionalProperties) or free-form object
            for k, v in value.items():
                if k not in props:
                    out.append(f"{where}.{k}" if where else k)
                else:
                    walk(v, props[k], f"{where}.{k}" if where else k)
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            for i, v in enumerate(value):
                walk(v, schema["items"], f"{where}[{i}]")

    top = defs.get(definition_name(res))
    if top is not None:
        walk(obj, top, "")
    return out
