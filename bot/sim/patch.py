"""The three patch types of the Kubernetes API: strategic merge, JSON merge (RFC 7386), JSON patch.

Strategic merge follows the list semantics the real types declare. Lists with a merge key merge by
that key; ``metadata.finalizers`` merges as a set of strings; everything else, notably
``spec.taints`` (no patchStrategy in the Node type), is replaced whole. That last rule is why a
blind taint patch can drop another writer's taint, and why the bot uses resourceVersion.
"""

from __future__ import annotations

import copy
from typing import Any

from bot.sim.errors import ApiError

# path (list keys as "[]") -> merge key; "" means a merged list of primitives
MERGE_KEYS: dict[str, str] = {
    "metadata.finalizers": "",
    "metadata.ownerReferences": "uid",
    "spec.containers": "name",
    "spec.initContainers": "name",
    "spec.containers[].env": "name",
    "spec.containers[].ports": "containerPort",
    "spec.containers[].volumeMounts": "mountPath",
    "spec.volumes": "name",
    "spec.template.spec.containers": "name",
    "spec.template.spec.volumes": "name",
    "status.conditions": "type",
    "status.addresses": "type",
    "status.containerStatuses": "name",
    "spec.drivers": "name",
}


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def strategic_merge(target: Any, patch: Any, path: str = "") -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key == "$retainKeys":
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            out[field] = [x for x in out.get(field) or [] if x not in value]
            continue
        sub = _child(path, key)
        if value is None:
            out.pop(key, None)
        elif isinstance(value, list) and sub in MERGE_KEYS and isinstance(out.get(key), list):
            out[key] = _merge_list(out[key], value, MERGE_KEYS[sub], sub)
        elif isinstance(value, dict):
            out[key] = strategic_merge(out.get(key), value, sub)
            if out[key] is None:
                out.pop(key)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _merge_list(current: list[Any], patch: list[Any], key: str, path: str) -> list[Any]:
    if not key:  # a set of primitives: union, order of first appearance
        out = list(current)
        for item in patch:
            if item not in out:
                out.append(item)
        return out
    out = copy.deepcopy(current)
    for item in patch:
        if not isinstance(item, dict):
            continue
        directive = item.get("$patch")
        idx = next((i for i, c in enumerate(out) if isinstance(c, dict)
                    and c.get(key) == item.get(key)), None)
        if directive == "delete":
            if idx is not None:
                out.pop(idx)
        elif idx is None:
            out.append({k: v for k, v in item.items() if k != "$patch"})
        else:
            out[idx] = strategic_merge(out[idx], item, path + "[]")
    return out


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve(doc: Any, parts: list[str]) -> Any:
    cur = doc
    for p in parts:
        if isinstance(cur, list):
            try:
                cur = cur[int(p)]
            except (ValueError, IndexError) as e:
                raise ApiError(422, "Invalid", f"path not found: /{'/'.join(parts)}") from e
        elif isinstance(cur, dict) and p in cur:
            cur = cur[p]
        else:
            raise ApiError(422, "Invalid", f"path not found: /{'/'.join(parts)}")
    return cur


def _set(doc: Any, parts: list[str], value: Any, *, insert: bool) -> None:
    parent = _resolve(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, list):
        if last == "-":
            parent.append(value)
            return
        try:
            i = int(last)
        except ValueError as e:
            raise ApiError(422, "Invalid", f"bad array index {last!r}") from e
        if insert:
            if not 0 <= i <= len(parent):
                raise ApiError(422, "Invalid", f"array index {i} out of range")
            parent.insert(i, value)
        else:
            if not 0 <= i < len(parent):
                raise ApiError(422, "Invalid", f"array index {i} out of range")
            parent[i] = value
    elif isinstance(parent, dict):
        if not insert and last not in parent:
            raise ApiError(422, "Invalid", f"replace: path not found: {last}")
        parent[last] = value
    else:
        raise ApiError(422, "Invalid", "parent is not a container")


def _remove(doc: Any, parts: list[str]) -> Any:
    parent = _resolve(doc, parts[:-1])
    last = parts[-1]
    try:
        if isinstance(parent, list):
            return parent.pop(int(last))
        return parent.pop(last)
    except (KeyError, ValueError, IndexError, AttributeError) as e:
        raise ApiError(422, "Invalid", f"remove: path not found: {last}") from e


def json_patch(target: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise ApiError(400, "BadRequest", "a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        kind, parts = op.get("op"), _pointer(op.get("path", ""))
        if kind == "test":
            if _resolve(doc, parts) != op.get("value"):
                # The real server answers a failed test with 422 Invalid (not 409).
                raise ApiError(422, "Invalid",
                               f"the server rejected our request due to an error in our request: "
                               f"testing value {op.get('path')} failed")
        elif kind == "add":
            if not parts:
                doc = copy.deepcopy(op["value"])
            else:
                _set(doc, parts, copy.deepcopy(op["value"]), insert=True)
        elif kind == "remove":
            _remove(doc, parts)
        elif kind == "replace":
            _set(doc, parts, copy.deepcopy(op["value"]), insert=False)
        elif kind in ("move", "copy"):
            src = _pointer(op.get("from", ""))
            value = _remove(doc, src) if kind == "move" else copy.deepcopy(_resolve(doc, src))
            _set(doc, parts, value, insert=True)
        else:
            raise ApiError(400, "BadRequest", f"unknown JSON patch op {kind!r}")
    return doc


def apply_patch(target: dict[str, Any], body: Any, content_type: str) -> dict[str, Any]:
    ct = content_type.split(";")[0].strip()
    if ct == "application/strategic-merge-patch+json":
        return strategic_merge(target, body)
    if ct == "application/merge-patch+json":
        return merge_patch(target, body)
    if ct == "application/json-patch+json":
        return json_patch(target, body)
    if ct == "application/apply-patch+yaml":
        raise ApiError(415, "UnsupportedMediaType", "server-side apply is not supported by the sandbox")
    raise ApiError(415, "UnsupportedMediaType", f"unsupported patch content type {ct!r}")
