"""Admission: what the API server adds to or refuses in an object before it is stored.

- StorageObjectInUseProtection adds ``kubernetes.io/pv-protection`` to every new PV and
  ``kubernetes.io/pvc-protection`` to every new PVC.
- Validation answers 422 ``Invalid`` for what the real server refuses and a runbook could send:
  two taints with the same key and effect, a label key or value that is not a qualified name or
  a valid label value (63 characters of ``[A-Za-z0-9_.-]``, alphanumeric at both ends).
"""

from __future__ import annotations

import re
from typing import Any

from bot.sim.errors import ApiError
from bot.sim.resources import Resource

PROTECTION = {"PersistentVolume": "kubernetes.io/pv-protection",
              "PersistentVolumeClaim": "kubernetes.io/pvc-protection"}
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_VALUE = re.compile(rf"^({_NAME})?$")
_KEY_NAME = re.compile(rf"^{_NAME}$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def admit_create(res: Resource, obj: dict[str, Any]) -> None:
    fin = PROTECTION.get(res.kind)
    if fin:
        fins = obj["metadata"].setdefault("finalizers", [])
        if fin not in fins:
            fins.append(fin)


def _key_ok(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _PREFIX.match(prefix)):
        return False
    return bool(_KEY_NAME.match(name))


def _refuse(res: Resource, name: str, causes: list[tuple[str, Any, str]]) -> ApiError:
    qual = f"{res.kind}.{res.group}" if res.group else res.kind
    text = ", ".join(f"{f}: {why}" if v is None else f"{f}: Invalid value: {v!r}: {why}"
                     for f, v, why in causes)
    return ApiError(422, "Invalid", f'{qual} "{name}" is invalid: {text}', details={
        "name": name, "group": res.group, "kind": res.kind,
        "causes": [{"reason": "FieldValueInvalid" if v is not None else "FieldValueDuplicate",
                    "message": why, "field": f} for f, v, why in causes]})


def validate(res: Resource, obj: dict[str, Any]) -> None:
    meta = obj.get("metadata") or {}
    name = meta.get("name", "")
    causes: list[tuple[str, Any, str]] = []
    for k, v in (meta.get("labels") or {}).items():
        if not _key_ok(str(k)):
            causes.append(("metadata.labels", k, "name part must consist of alphanumeric characters, "
                           "'-', '_' or '.', and must start and end with an alphanumeric character"))
        if not isinstance(v, str) or not _VALUE.match(v):
            causes.append(("metadata.labels", v, "a valid label must be an empty string or consist "
                           "of alphanumeric characters, '-', '_' or '.', and must start and end with "
                           "an alphanumeric character"))
    if res.kind == "Node":
        seen: set[tuple[str, str]] = set()
        for i, t in enumerate((obj.get("spec") or {}).get("taints") or []):
            pair = (t.get("key", ""), t.get("effect", ""))
            if pair in seen:
                causes.append((f"spec.taints[{i}]", None,
                               f"taints must be unique by key and effect pair: Duplicate value: "
                               f'"{pair[0]}:{pair[1]}"'))
            seen.add(pair)
            if t.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                causes.append((f"spec.taints[{i}].effect", t.get("effect"),
                               'supported values: "NoExecute", "NoSchedule", "PreferNoSchedule"'))
    if causes:
        raise _refuse(res, name, causes)
