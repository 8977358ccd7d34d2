"""moto, answering the same, in less time: memos of what moto recomputes on every request although
it depends on nothing a request changes. Installed by the in-process transport (``ec2_moto.MotoApp``);
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
- The walk over a structure's members (``_structure``): for each member, the names its value may
  have and the transformer of its key path are those of the structure's shape, the object's type
  and the path, worked out once (through the memos above) rather than through a picker context
  built per member; each object is still asked for each name, in the same order (with
  ``getattr`` itself where moto's ``get_value`` would come to it). A serializer
  whose member or value hooks differ from the base class's, or a picker moto does not ship, takes
  the shipped walk.
- The EC2 serializer's XML (``_xml_body``): the document xmltodict's generic walk would write
  through ``XMLGenerator``, written directly, with the same escaping and short empty elements;
  a body it does not expect (bytes, comments, odd names, pretty printing) goes to xmltodict.

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
    from moto.core import responses, serialize  # deferred: moto is loaded only when a sandbox runs

    names = getattr(responses, "method_names_from_class", None)
    if names is not None:
        _installed["method_names_from_class"] = names
        setattr(responses, "method_names_from_class", functools.cache(names))  # noqa: B010
    picker = serialize.AttributePicker
    _installed["AttributePicker.__call__"] = picker.__call__
    call, plan = _picker_call(serialize)
    picker.__call__ = call  # type: ignore[method-assign]
    base = serialize.ResponseSerializer
    _installed["ResponseSerializer._serialize_type_structure"] = base._serialize_type_structure
    base._serialize_type_structure = _structure(  # type: ignore[method-assign]
        serialize, base._serialize_type_structure, plan)
    ec2 = serialize.EC2Serializer
    _installed["EC2Serializer._serialize_body"] = ec2._serialize_body
    ec2._serialize_body = _xml_body(ec2._serialize_body)  # type: ignore[method-assign]


def uninstall() -> None:
    if not _installed:
        return
    from moto.core import responses, serialize  # deferred: moto is loaded only when a sandbox runs

    if "method_names_from_class" in _installed:
        setattr(responses, "method_names_from_class",  # noqa: B010
                _installed.pop("method_names_from_class"))
    serialize.AttributePicker.__call__ = _installed.pop(  # type: ignore[method-assign]
        "AttributePicker.__call__")
    serialize.ResponseSerializer._serialize_type_structure = _installed.pop(  # type: ignore[method-assign]
        "ResponseSerializer._serialize_type_structure")
    serialize.EC2Serializer._serialize_body = _installed.pop(  # type: ignore[method-assign]
        "EC2Serializer._serialize_body")


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

    def plan(picker: Any, context: Any) -> tuple[tuple[str, ...] | list[str], Any]:
        """What ``call`` would try for ``context``: the names, and the transformer."""
        return (possible_keys(picker, context),
                transform_of(picker, f"{context.key_path}.{context.key}"))

    return call, plan


def _structure(serialize: Any, shipped: Any, plan: Any) -> Any:
    """``ResponseSerializer._serialize_type_structure``, with each member's names and transformer
    kept per (structure shape, object type, picker, key path)."""
    base, missing, get_value = serialize.ResponseSerializer, serialize.MISSING, serialize.get_value
    member_hook, value_hook = base._serialize_structure_member, base.get_value
    context_of = serialize.AttributePickerContext
    plans: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Any]] = weakref.WeakKeyDictionary()

    def members(self: Any, value: Any, shape: Any, key_path: str) -> list[tuple[Any, ...]]:
        picker = self._value_picker
        memo = plans.get(shape)
        if memo is None:
            memo = plans[shape] = {}
        at = (type(picker), tuple(picker.alias_providers), id(picker.response_transformers),
              type(value), key_path)
        held = memo.get(at)
        if held is None or held[0] is not picker.response_transformers:
            om = self.operation_model
            rows = []
            for member_key, member_shape in shape.members.items():
                member_shape.parent = shape
                keys, transform = plan(picker, context_of(
                    obj=value, key=member_key, shape=member_shape, operation_model=om,
                    service_model=om.service_model if om is not None else None,
                    key_path=key_path))
                rows.append((member_key, member_shape, tuple(keys), transform))
            held = memo[at] = (picker.response_transformers, rows)
        return held[1]

    def structure(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
        cls = type(self)
        if (value is None or cls._serialize_structure_member is not member_hook
                or cls.get_value is not value_hook
                or type(self._value_picker).__call__ is not serialize.AttributePicker.__call__
                or "Meta" in getattr(value, "__dict__", ())):
            return shipped(self, serialized, value, shape, key)
        wrapper = self.MAP_TYPE() if key else serialized
        # what ``get_value`` does for a name without a dot on an object that is not a mapping
        plain = not hasattr(value, "__getitem__")
        for member_key, member_shape, keys, transform in members(self, value, shape,
                                                                 ".".join(self.path)):
            member_shape.parent = shape
            for possible_key in keys:
                if plain and type(possible_key) is str and "." not in possible_key:
                    member_value = getattr(value, possible_key, missing)
                else:
                    member_value = get_value(value, possible_key, missing)
                if member_value is not missing:
                    break
            else:
                member_value = None
            if transform is not None:
                member_value = transform(member_value)
            if member_value is not None:
                self._serialize(wrapper, member_value, member_shape, member_key)
        if key:
            self._default_serialize(serialized, wrapper, shape, key)
        return None

    return structure


class _Unusual(Exception):
    """A body the plain writer leaves to xmltodict (bytes, comments, odd names, several roots)."""


def _xml_body(shipped: Any) -> Any:
    """``EC2Serializer._serialize_body`` without xmltodict's generic walk: the same document
    ``xmltodict.unparse(body, full_document=True, short_empty_elements=True)`` writes through
    ``XMLGenerator`` (the same escaping, ``<a/>`` for an element with no content, character
    data after child elements, empty lists omitted), for the plain bodies moto builds (str keys,
    dicts, lists, scalars); anything else, or pretty printing, goes to ``shipped``."""
    from xml.sax.saxutils import escape, quoteattr

    import xmltodict

    valid: dict[Any, bool] = {}  # element and attribute names, checked as xmltodict checks them

    def name_ok(name: Any) -> bool:
        ok = valid.get(name)
        if ok is None:
            try:
                xmltodict._validate_name(name, "element")
                ok = True
            except ValueError:
                ok = False
            valid[name] = ok
        return ok

    def text(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (bytes, bytearray, memoryview)):
            raise _Unusual
        return str(v)

    def parts(v: Any) -> tuple[str | None, list[tuple[str, str]], list[tuple[Any, Any]]]:
        """(character data, attributes, children) of one element's value."""
        if v is None:
            return None, [], []
        if isinstance(v, str):
            return v, [], []
        if not isinstance(v, dict):
            return text(v), [], []
        cdata, attrs, children = None, [], []
        for k, x in v.items():
            if k == "#text":
                cdata = None if x is None else text(x)
            elif isinstance(k, str) and k.startswith("@"):
                if (k == "@xmlns" and isinstance(x, dict)) or not name_ok(k[1:]):
                    raise _Unusual
                attrs.append((k[1:], "" if x is None else x if isinstance(x, str) else text(x)))
            elif not (isinstance(x, list) and not x):
                children.append((k, x))
        return cdata, attrs, children

    def emit(key: Any, value: Any, out: list[str]) -> None:
        if not isinstance(key, str) or key == "#comment" or not name_ok(key):
            raise _Unusual
        if isinstance(value, (str, dict)) or not hasattr(value, "__iter__"):
            values: Any = (value,)
        elif isinstance(value, (list, tuple)):
            values = value
        else:
            raise _Unusual
        for v in values:
            cdata, attrs, children = parts(v)
            out.append("<" + key + "".join(f" {n}={quoteattr(a)}" for n, a in attrs))
            at = len(out)
            out.append("")  # the start tag's end: ">", or "/>" if nothing is written inside
            for child_key, child_value in children:
                emit(child_key, child_value, out)
            if cdata:
                out.append(escape(cdata))
            if len(out) == at + 1:  # XMLGenerator's short empty element
                out[at] = "/>"
            else:
                out[at] = ">"
                out.append(f"</{key}>")

    def serialize_body(self: Any, body: Any) -> Any:
        if not self.pretty_print and isinstance(body, dict) and len(body) == 1:
            [(root, value)] = body.items()
            if not isinstance(value, (list, tuple)):
                out = ['<?xml version="1.0" encoding="utf-8"?>\n']
                try:
                    emit(root, value, out)
                    return "".join(out)
                except _Unusual:
                    pass
        return shipped(self, body)

    return serialize_body
