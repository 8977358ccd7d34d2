"""The document checks of a runbook whose structure is wrong in places: one run of ``validate``
reports both kinds.

When the model refuses a runbook (a mistyped key, a step with neither ``action`` nor ``manual``, a
bad param type), there is no ``Runbook`` to run the cross-reference and policy checks of
``validate.py`` on, so their problems (an unknown action, a reference to a param never declared,
a destructive step whose approval was weakened) used to appear only once the first ones were
fixed. Here the parts that are wrong are set aside, so that the rest can be checked now:

- an unknown key is dropped (everything else about its mapping is still checked);
- a step that is wrong in any other way becomes a stand-in: its id (if it is one), and nothing
  else to check, so other steps' references to it still resolve and its position stays;
- a param that is wrong becomes a plain string param of the same name, so references resolve;
- a trigger or an outcome rule that is wrong is left out (the others keep their own positions);
- wrong ``approvals`` fall back to the defaults, and what is said against them is not reported;
- ``metadata``, ``apiVersion`` and ``kind`` are not needed by these checks at all.

What the stand-ins would cause is dropped: problems inside a set-aside part, and problems naming
a stand-in step or the runbook's approvals when those were set aside. Where the structure does not
allow even that (``spec`` or its ``steps`` missing or not of the right kind, or the rest still
refused), only the structural problems are reported, as before.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from bot.errors import Problem
from bot.runbook.model import IDENTIFIER, Metadata, Runbook, Spec
from bot.runbook.validate import Catalog, Locator, validate

Loc = tuple[str | int, ...]
_PLACEHOLDER_TITLE = "set aside"


class _Salvage:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.stand_ins: dict[int, str] = {}  # step index -> its id
        self.dropped: dict[str, set[int]] = {"triggers": set(), "outcome": set()}
        self.approvals = False  # set aside
        self.possible = True

    def drop_key(self, loc: Loc) -> None:
        """Remove an unknown key (``loc`` below ``spec``) from its mapping, if still there."""
        node: Any = self.spec
        for part in loc[:-1]:
            if (isinstance(node, Mapping) and part in node) or (
                    isinstance(node, list) and isinstance(part, int) and part < len(node)):
                node = node[part]  # type: ignore[index]
            else:
                return
        if isinstance(node, dict):
            node.pop(loc[-1], None)

    def set_aside(self, loc: Loc) -> None:
        """The part of ``spec`` that ``loc`` (below ``spec``) is in, for any other error."""
        section = loc[0] if loc else None
        index = loc[1] if len(loc) > 1 else None
        if section == "steps" and isinstance(index, int):
            self.stand_ins.setdefault(index, "")
        elif section == "params" and isinstance(index, str) and isinstance(self.spec.get("params"), dict):
            self.spec["params"][index] = {}
        elif section in self.dropped and isinstance(index, int):
            self.dropped[str(section)].add(index)
        elif section == "approvals":
            self.approvals = True
            self.spec.pop("approvals", None)
        elif section == "auto_run":
            self.spec.pop("auto_run", None)
        else:  # spec itself, its steps as a whole, or its params as a whole
            self.possible = False

    def rebuild(self) -> None:
        steps = self.spec["steps"]
        for index in sorted(self.stand_ins):
            raw = steps[index] if index < len(steps) else None
            step_id = raw.get("id") if isinstance(raw, Mapping) else None
            if not (isinstance(step_id, str) and re.fullmatch(IDENTIFIER, step_id)):
                step_id = f"set_aside_{index}"
            self.stand_ins[index] = step_id
            steps[index] = {"id": step_id, "title": _PLACEHOLDER_TITLE, "manual": _PLACEHOLDER_TITLE}
        for section, gone in self.dropped.items():
            if gone and isinstance(self.spec.get(section), list):
                self.spec[section] = [x for i, x in enumerate(self.spec[section]) if i not in gone]

    def original(self, loc: Loc) -> Loc:
        """A location in the rebuilt spec, in the document as written."""
        if len(loc) > 2 and loc[0] == "spec" and loc[1] in self.dropped and isinstance(loc[2], int):
            kept = [i for i in range(loc[2] + len(self.dropped[str(loc[1])]) + 1)
                    if i not in self.dropped[str(loc[1])]]
            return (loc[0], loc[1], kept[loc[2]], *loc[3:])
        return loc

    def caused_by_stand_ins(self, loc: Loc, message: str) -> bool:
        if len(loc) > 2 and loc[:2] == ("spec", "steps") and loc[2] in self.stand_ins:
            return True
        if self.approvals and "spec.approvals" in message:
            return True
        return any(f"step {step_id!r}" in message or f"steps.{step_id}." in message
                   for step_id in self.stand_ins.values())


def problems_despite(data: Any, errors: Sequence[Mapping[str, Any]], *, catalog: Catalog | None,
                     locate: Locator) -> list[Problem]:
    """The problems ``validate`` finds in what of ``data`` the model's ``errors`` leave standing
    (``locate``: the document's source map); [] where the structure does not allow it."""
    if not isinstance(data, Mapping) or not isinstance(data.get("spec"), Mapping):
        return []
    salvage = _Salvage(copy.deepcopy(dict(data["spec"])))
    if not isinstance(salvage.spec.get("steps"), list) or not salvage.spec["steps"]:
        return []
    locs = [tuple(err["loc"]) for err in errors]
    for err, loc in zip(errors, locs, strict=True):
        if loc[:1] != ("spec",):
            continue  # apiVersion, kind, metadata: not read by these checks
        if any(other[: len(loc)] == loc and other != loc for other in locs):
            continue  # a list "too short" because its items failed: the items say more
        if err["type"] == "extra_forbidden":
            salvage.drop_key(loc[1:])
        else:
            salvage.set_aside(loc[1:])
    if not salvage.possible:
        return []
    salvage.rebuild()
    try:
        spec = Spec.model_validate(salvage.spec)
    except ValidationError:
        return []
    # the checks read the spec only: the rest is a stand-in, whatever the document says
    runbook = Runbook.model_construct(api_version="runbook-bot/v1", kind="Runbook", spec=spec,
                                      metadata=Metadata(name="set-aside", title=_PLACEHOLDER_TITLE))
    kept: list[Problem] = []

    def located(loc: Loc, message: str, *, key: bool = False) -> Problem:
        problem = locate(salvage.original(loc), message, key=key)
        if not salvage.caused_by_stand_ins(loc, message):
            kept.append(problem)
        return problem

    found = validate(runbook, catalog=catalog, locate=located)
    return [p for p in found if any(p is k for k in kept)]
