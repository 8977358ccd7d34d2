"""Load runbook YAML into the model, reporting every problem as ``FILE:LINE:COL: message``.

An SRE editing a runbook at 3 a.m. needs to see all mistakes at once, each at the line where it
is, not a Python traceback or the first error only. So the YAML is read with ruamel's round-trip
loader, which keeps the line and column of every key and value; pydantic's error paths (``loc``)
and the static checks of ``validate.py`` are mapped back to those marks. Anything wrong with the
text (syntax, tabs, duplicate keys, a top level that is not a mapping) is a located problem too:
the only exception that leaves this module is ``RunbookError``. When the model refuses the
document, the static checks still run on what its problems leave standing (``salvage.py``), so one
run reports both kinds.
"""

from __future__ import annotations

import difflib
import re
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import MarkedYAMLError, YAMLError, YAMLWarning

from bot.errors import Problem, RunbookError
from bot.runbook.limits import MAX_EXPANDED_BYTES, MAX_FILE_BYTES, MAX_NODES
from bot.runbook.model import DNS1123_LABEL, IDENTIFIER, RUN_OUTCOMES, Runbook
from bot.runbook.salvage import problems_despite
from bot.runbook.validate import Catalog, validate

__all__ = ["MAX_NODES", "SourceMap", "load_runbook", "load_runbooks", "load_text",
           "load_with_sources", "locate", "read_runbook_text", "runbook_files"]

Loc = tuple[str | int, ...]


class SourceMap:
    """Line and column (1-based) of any path in a loaded document, e.g. ``("spec", "steps", 2)``."""

    def __init__(self, file: str, root: Any) -> None:
        self.file = file
        self._root = root

    def locate(self, loc: Iterable[str | int]) -> tuple[int, int]:
        """The mark of the deepest node on ``loc`` that exists; path parts not found are skipped."""
        node = self._root
        line, col = _own_mark(node)
        for part in loc:
            if isinstance(node, CommentedMap):
                key = _find_key(node, part)
                if key is _MISSING:
                    continue  # a union tag or a missing field: stay at the parent
                child = node[key]
                # scalars are located at their value, collections at their key
                mark = node.lc.key(key) if isinstance(child, CommentedMap | CommentedSeq) else (
                    node.lc.value(key)
                )
                line, col = mark[0] + 1, mark[1] + 1
                node = child
            elif isinstance(node, CommentedSeq) and isinstance(part, int):
                if 0 <= part < len(node):
                    mark = node.lc.item(part)
                    line, col = mark[0] + 1, mark[1] + 1
                    node = node[part]
            else:
                break
        return line, col

    def key_mark(self, loc: Iterable[str | int]) -> tuple[int, int]:
        """The mark of the key at the end of ``loc`` (where a mapping entry starts)."""
        parts = list(loc)
        if not parts:
            return self.locate(())
        node = self._root
        for part in parts[:-1]:
            try:
                node = node[part]
            except (KeyError, IndexError, TypeError):
                return self.locate(parts)
        if isinstance(node, CommentedMap):
            key = _find_key(node, parts[-1])
            if key is not _MISSING:
                mark = node.lc.key(key)
                return mark[0] + 1, mark[1] + 1
        return self.locate(parts)

    def problem(self, loc: Iterable[str | int], message: str, *, key: bool = False) -> Problem:
        line, col = self.key_mark(loc) if key else self.locate(loc)
        return Problem(self.file, line, col, message)


_MISSING = object()


def _find_key(node: CommentedMap, part: str | int) -> Any:
    if part in node:
        return part
    # pydantic reports keys as strings; YAML may have read them as numbers or booleans
    for key in node:
        if str(key) == str(part):
            return key
    return _MISSING


def _own_mark(node: Any) -> tuple[int, int]:
    lc = getattr(node, "lc", None)
    if lc is not None and getattr(lc, "line", None) is not None:
        return lc.line + 1, lc.col + 1
    return 1, 1


# -- YAML text to plain data ------------------------------------------------------------------


class _Budget:
    """What a document may still expand to: nodes, and characters of scalars (aliases included)."""

    def __init__(self) -> None:
        self.nodes = MAX_NODES
        self.chars = MAX_EXPANDED_BYTES

    def take(self, chars: int) -> None:
        self.nodes -= 1
        self.chars -= chars
        if self.nodes < 0:
            raise _TooLarge(f"the document expands to more than {MAX_NODES} nodes (aliases?); "
                            f"runbooks are small")
        if self.chars < 0:
            raise _TooLarge(f"the document expands to more than {MAX_EXPANDED_BYTES} characters "
                            f"of text (a long value repeated through aliases?); runbooks are small")


def _plain(node: Any, *, budget: _Budget, stack: set[int]) -> Any:
    """Round-trip nodes to plain dicts, lists and scalars, refusing recursion and huge expansions."""
    budget.take(len(node) if isinstance(node, str) else 0)
    if isinstance(node, dict | list):
        if id(node) in stack:
            raise _Recursive
        stack.add(id(node))
        try:
            if isinstance(node, dict):
                out = {}
                for k, v in node.items():
                    budget.take(len(k) if isinstance(k, str) else 0)
                    out[_plain_key(k)] = _plain(v, budget=budget, stack=stack)
                return out
            return [_plain(v, budget=budget, stack=stack) for v in node]
        finally:
            stack.discard(id(node))
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, str):
        return str(node)
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    return node  # dates and timestamps: the model rejects them where a string is expected


def _plain_key(key: Any) -> Any:
    if isinstance(key, str):
        return str(key)
    if isinstance(key, bool | int | float) or key is None:
        return key
    return str(key)  # complex keys (``? [a, b]``): never valid, keep them printable


class _TooLarge(Exception):
    """The message says which limit."""


class _Recursive(Exception):
    pass


def _yaml_problem(file: str, e: YAMLError) -> Problem:
    if isinstance(e, MarkedYAMLError):
        mark = e.problem_mark or e.context_mark
        problem = e.problem or e.context or "invalid YAML"
        if isinstance(e, DuplicateKeyError):
            problem = f"{problem}: each key may appear once in a mapping"
        elif "'\\t'" in problem or "\\t" in problem:
            problem = "tab character: YAML indentation must use spaces, not tabs"
        else:
            problem = f"YAML syntax error: {problem}"
        if mark is not None:
            return Problem(file, mark.line + 1, mark.column + 1, problem)
        return Problem(file, 1, 1, problem)
    return Problem(file, 1, 1, f"YAML error: {e}")


def _parse(text: str, file: str) -> Any:
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    try:
        with warnings.catch_warnings():
            # ruamel warns (rather than fails) on some dubious input, e.g. an anchor defined
            # twice; in a runbook that is a mistake worth stopping for, at its line
            warnings.simplefilter("error", YAMLWarning)
            return yaml.load(text)
    except YAMLWarning as w:
        text_of = str(w).strip()
        # the warning carries its marks only in its text: use the last one (the offending node)
        marks = re.findall(r"line (\d+), column (\d+):", text_of)
        line, col = (int(marks[-1][0]), int(marks[-1][1])) if marks else (1, 1)
        what = text_of.splitlines()[0] if text_of else "suspicious YAML"
        raise RunbookError([Problem(file, line, col, f"YAML problem: {what}")]) from None
    except YAMLError as e:
        raise RunbookError([_yaml_problem(file, e)]) from None
    except (ValueError, TypeError, AttributeError, KeyError, IndexError, RecursionError) as e:
        # the round-trip constructor has corners that raise plain Python errors on odd input
        raise RunbookError([Problem(file, 1, 1, f"YAML error: {e}")]) from None


# -- pydantic errors to located messages ------------------------------------------------------


def _path_text(loc: Loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "document"


def _fields_of(loc: Loc) -> list[str] | None:
    """The field names valid at ``loc``, found by walking the model's annotations."""
    models: list[type[BaseModel]] = [Runbook]
    containers = 0
    for part in loc:
        if containers:
            containers -= 1
            continue
        found = None
        for model in models:
            for name, info in model.model_fields.items():
                if part in (name, info.alias):
                    found = info.annotation
        if found is None:
            return None
        models, containers = _models_in(found)
        if not models:
            return None
    names: list[str] = []
    for model in models:
        names += [info.alias or name for name, info in model.model_fields.items()]
    return names


def _models_in(annotation: Any, depth: int = 0) -> tuple[list[type[BaseModel]], int]:
    """Models reachable inside an annotation, and how many container levels (list, dict) wrap them."""
    from typing import get_args, get_origin

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation], depth
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin in (tuple, list, dict):
        inner = args[-1] if origin is dict else args[0]
        return _models_in(inner, depth + 1)
    found: list[type[BaseModel]] = []
    best = depth
    for arg in args:
        models, level = _models_in(arg, depth)
        if models:
            found += models
            best = level
    return found, best


_PATTERN_HINTS = {
    IDENTIFIER: "must be an identifier: lowercase letters, digits and '_', starting with a letter "
    "(a '-' would break steps.<id> in expressions)",
    DNS1123_LABEL: "must be a DNS-1123 label: lowercase letters, digits and '-', "
    "starting and ending with a letter or digit",
}


def _message(error: Mapping[str, Any], loc: Loc) -> tuple[str, bool]:
    """The human message for one pydantic error, and whether it belongs at the key."""
    kind = error["type"]
    where = _path_text(loc)
    last = loc[-1] if loc else ""
    if kind == "missing":
        return f"{_path_text(loc[:-1])}: missing required field {last!r}", False
    if kind == "extra_forbidden":
        valid = _fields_of(loc[:-1]) or []
        hint = ""
        close = difflib.get_close_matches(str(last), valid, n=1)
        if close:
            hint = f" (did you mean {close[0]!r}?)"
        listing = f"; valid fields: {', '.join(valid)}" if valid else ""
        return f"{_path_text(loc[:-1])}: unknown field {last!r}{hint}{listing}", True
    if kind == "string_pattern_mismatch":
        pattern = (error.get("ctx") or {}).get("pattern", "")
        hint = _PATTERN_HINTS.get(pattern, f"must match {pattern}")
        if last == "[key]":
            return f"{_path_text(loc[:-2])}: name {error['input']!r} {hint}", True
        return f"{where}: {error['input']!r} {hint}", False
    if kind == "too_short":
        least = (error.get("ctx") or {}).get("min_length", 1)
        return f"{where}: needs at least {least} item{'s' if least != 1 else ''}", False
    if kind == "literal_error" and last == "on_failure":
        return f"{where}: {error['input']!r} is not one of: abort, continue, goto: <step id>", False
    if kind == "literal_error" and last == "outcome":
        return (f"{where}: {error['input']!r} is not a run outcome; one of: "
                f"{', '.join(RUN_OUTCOMES)}"), False
    msg = str(error["msg"])
    msg = re.sub(r"^(Value|Assertion) error, ", "", msg)
    return f"{where}: {msg}", False


def _drop_union_tags(loc: Loc) -> Loc:
    """Remove the branch names pydantic inserts after a tagged union field (``on_failure``)."""
    out: list[str | int] = []
    for i, part in enumerate(loc):
        after_field = i > 0 and loc[i - 1] == "on_failure"
        # "keyword" is only ever a tag; "goto" is a tag unless it is the Goto model's own field
        if after_field and (part == "keyword" or (part == "goto" and i < len(loc) - 1)):
            continue
        out.append(part)
    return tuple(out)


def _pydantic_problems(e: ValidationError, sources: SourceMap) -> list[Problem]:
    errors = e.errors(include_url=False)
    locs = [tuple(err["loc"]) for err in errors]
    problems: list[Problem] = []
    for err, loc in zip(errors, locs, strict=True):
        # a list whose items failed is also reported "too short"; the item errors say more
        if err["type"] == "too_short" and any(o[: len(loc)] == loc and o != loc for o in locs):
            continue
        shown = _drop_union_tags(loc)
        clean: Loc = tuple(p for p in shown if p != "[key]")
        message, at_key = _message(err, tuple(shown))
        problems.append(sources.problem(clean, message, key=at_key))
    return problems


# -- public API --------------------------------------------------------------------------------


def load_text(text: str, *, file: str, catalog: Catalog | None) -> Runbook:
    """Parse and check one runbook; RunbookError lists every problem found.

    ``catalog`` is the action registry; None skips the checks that need it (e.g. for ``schema``).
    """
    runbook, _ = load_with_sources(text, file=file, catalog=catalog)
    return runbook


def load_with_sources(
    text: str, *, file: str, catalog: Catalog | None
) -> tuple[Runbook, SourceMap]:
    """Like ``load_text``, also returning the SourceMap, so callers can point at steps."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_FILE_BYTES:
        raise RunbookError([_too_big(file, size)])
    root = _parse(text, file)
    sources = SourceMap(file, root)
    if root is None:
        raise RunbookError([Problem(file, 1, 1, "the file is empty; a runbook is a YAML mapping")])
    if not isinstance(root, CommentedMap):
        line, col = _own_mark(root)
        kind = "a list" if isinstance(root, list) else f"a {type(root).__name__} value"
        raise RunbookError(
            [Problem(file, line, col, f"the top level must be a mapping (apiVersion, kind, "
                                      f"metadata, spec), not {kind}")]
        )
    try:
        data = _plain(root, budget=_Budget(), stack=set())
    except _TooLarge as e:
        raise RunbookError([Problem(file, 1, 1, str(e))]) from None
    except _Recursive:
        raise RunbookError(
            [Problem(file, 1, 1, "recursive YAML alias: a node contains itself")]
        ) from None
    try:
        runbook = Runbook.model_validate(data)
    except ValidationError as e:
        # the document checks too, on what the structure's problems leave standing (salvage.py)
        found = _pydantic_problems(e, sources) + problems_despite(
            data, e.errors(), catalog=catalog, locate=sources.problem)
        raise RunbookError(sorted(found, key=lambda p: (p.line, p.col))) from None
    problems = validate(runbook, catalog=catalog, locate=sources.problem)
    if problems:
        raise RunbookError(problems)
    return runbook, sources


def _too_big(file: str, size: int) -> Problem:
    return Problem(file, 1, 1, f"the file is {size} bytes; a runbook may be at most "
                               f"{MAX_FILE_BYTES} bytes (split it, or move data out of it)")


def read_runbook_text(path: str | Path) -> str:
    """A runbook file's text; a file over ``MAX_FILE_BYTES`` is refused before it is read."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise RunbookError([_too_big(str(path), size)])
        with path.open("rb") as f:  # read no more than the limit, whatever the file became since
            data = f.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise RunbookError([_too_big(str(path), len(data))])
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        raise RunbookError([Problem(str(path), 1, 1, f"cannot read the file: {reason}")]) from None


def load_runbook(path: str | Path, *, catalog: Catalog | None) -> Runbook:
    """Load one runbook file."""
    return load_text(read_runbook_text(path), file=str(Path(path)), catalog=catalog)


def runbook_files(directory: str | Path) -> list[Path]:
    """The runbook files in a directory: ``*.yaml`` and ``*.yml``, sorted."""
    base = Path(directory)
    return sorted(p for p in base.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


def load_runbooks(directory: str | Path, *, catalog: Catalog | None) -> dict[str, Runbook]:
    """Every runbook in a directory, by name; RunbookError lists the problems of all files."""
    base = Path(directory)
    if not base.is_dir():
        raise RunbookError([Problem(str(base), 1, 1, "not a directory of runbooks")])
    problems: list[Problem] = []
    found: dict[str, Runbook] = {}
    where: dict[str, Path] = {}
    for path in runbook_files(base):
        try:
            runbook = load_runbook(path, catalog=catalog)
        except RunbookError as e:
            problems += e.problems
            continue
        if runbook.name in found:
            problems.append(Problem(str(path), 1, 1, f"runbook name {runbook.name!r} is also used "
                                                     f"by {where[runbook.name]}"))
            continue
        found[runbook.name] = runbook
        where[runbook.name] = path
    if problems:
        raise RunbookError(problems)
    return found


def locate(text: str, *, file: str, step_id: str) -> tuple[int, int]:
    """Line and column of a step's ``id`` in runbook text; (1, 1) when it is not there."""
    try:
        root = _parse(text, file)
    except RunbookError:
        return 1, 1
    sources = SourceMap(file, root)
    try:
        steps = root["spec"]["steps"]
        for index, step in enumerate(steps):
            if isinstance(step, Mapping) and step.get("id") == step_id:
                return sources.locate(("spec", "steps", index, "id"))
    except (KeyError, TypeError, IndexError):
        pass
    return 1, 1
