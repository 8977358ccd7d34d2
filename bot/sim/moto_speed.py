"""moto, answering the same, in less time: memos of what moto recomputes on every request although
it depends on nothing a request changes. Installed by the in-process transport (``ec2._MotoApp``);
``uninstall`` gives moto back as shipped (the explorer's reference plays over HTTP run on it).

- ``method_names_from_class``: the methods of a response class, listed with ``inspect`` on every
  request to find the action's handler; a function of the class.
- The serializer's attribute picker tries, for each member of each object it writes, the names the
  attribute may have: it builds six alias providers per member to list them. The list depends on
  the picker's kind and providers, the object's type, the member's name and its shape (the
  providers read the shape, its parent structure and the object's class, and a class-level
  ``Meta``), so it is kept per shape (weakly: shapes come and go with their models) and those.
  Which name holds a value is still asked of each object, in the same order. The response
  transformer that applies to a key path is kept per transformer table and path.

An object with a ``Meta`` of its own (not its class's) is never memoised.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

_installed: dict[str, Any] = {}


def install() -> None:
    if _installed:
        return
    from moto.core import responses, serialize

    names = getattr(responses, "method_names_from_class", None)
    if names is not None:
        _installed["method_names_from_class"] = names
        setattr(responses, "method_names_from_class", functools.cache(names))  # noqa: B010
    picker = serialize.AttributePicker
    _installed["AttributePicker.__call__"] = picker.__call__
    picker.__call__ = _picker_call(serialize)  # type: ignore[method-assign]


def uninstall() -> None:
    if not _installed:
        return
    from moto.core import responses, serialize

    if "method_names_from_class" in _installed:
        setattr(responses, "method_names_from_class",  # noqa: B010
                _installed.pop("method_names_from_class"))
    serialize.AttributePicker.__call__ = _installed.pop(  # type: ignore[method-assign]
        "AttributePicker.__call__")


def _picker_call(serialize: Any) -> Any:
    missing, get_value = serialize.MISSING, serialize.get_value
    keys_by_shape: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], tuple[str, ...]]] = (
        weakref.WeakKeyDictionary())
    transforms: dict[int, tuple[Any, dict[str, Any]]] = {}  # id(table) -> (table, path -> fn)

    def possible_keys(picker: Any, context: Any) -> tuple[str, ...] | list[str]:
        obj, shape = context.obj, context.shape
        if shape is None or "Meta" in getattr(obj, "__dict__", ()):
            return list(picker.get_possible_keys(context))
        memo = keys_by_shape.get(shape)
        if memo is None:
            memo = keys_by_shape[shape] = {}
        at = (type(picker), tuple(picker.alias_providers), type(obj), context.key,
              getattr(getattr(shape, "parent", None), "name", None))
        found = memo.get(at)
        if found is None:
            found = memo[at] = tuple(picker.get_possible_keys(context))
        return found

    def transform_of(picker: Any, key_path: str) -> Any:
        table = picker.response_transformers
        if not table:
            return None
        held = transforms.get(id(table))
        if held is None or held[0] is not table:
            held = transforms[id(table)] = (table, {})
        paths = held[1]
        if key_path not in paths:
            paths[key_path] = next((fn for path, fn in table.items() if key_path.endswith(path)),
                                   None)
        return paths[key_path]

    def call(self: Any, context: Any) -> Any:
        obj = context.obj
        for possible_key in possible_keys(self, context):
            value = get_value(obj, possible_key, missing)
            if value is not missing:
                break
        else:
            value = None
        transform = transform_of(self, f"{context.key_path}.{context.key}")
        return transform(value) if transform is not None else value

    return call
