"""The loader never fails with anything but RunbookError, whatever text it is given."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.actions.registry import Registry
from bot.errors import RunbookError
from bot.runbook.loader import load_text
from bot.runbook.model import Runbook

FAST = settings(max_examples=200, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])

YAML_ALPHABET = "abc:-{}[]&*!|>'\"#%@`,?\t\n 0."
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                    st.text(max_size=20))
documents = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def outcome(text: str, catalog: Registry) -> None:
    try:
        result = load_text(text, file="fuzz.yaml", catalog=catalog)
    except RunbookError as e:
        assert e.problems, "a RunbookError always carries at least one problem"
        assert all(p.line >= 1 and p.col >= 1 for p in e.problems)
        return
    assert isinstance(result, Runbook)


@FAST
@given(st.text(alphabet=YAML_ALPHABET, max_size=120)
       | st.lists(st.sampled_from(["a", ": ", "\n", "\n  ", "- ", "[", "]", "{", "}", "&x", "*x",
                                   "!!str ", "'", '"', "\t", "? ", "|", "{{ x }}"]),
                  max_size=30).map("".join)
       | st.text(max_size=80))
def test_any_text_yields_a_runbook_or_located_problems(catalog: Registry, text: str) -> None:
    outcome(text, catalog)


@FAST
@given(data=st.data())
def test_any_mutation_of_a_valid_runbook_yields_a_runbook_or_located_problems(
    catalog: Registry, minimal: str, data: st.DataObject
) -> None:
    lines = minimal.splitlines()
    for _ in range(data.draw(st.integers(1, 3))):
        index = data.draw(st.integers(0, len(lines) - 1))
        kind = data.draw(st.sampled_from(["delete", "duplicate", "replace", "insert", "indent"]))
        if kind == "delete" and len(lines) > 1:
            del lines[index]
        elif kind == "duplicate":
            lines.insert(index, lines[index])
        elif kind == "replace":
            head = lines[index].split(":", 1)[0]
            lines[index] = head + ": " + data.draw(st.text(alphabet=YAML_ALPHABET, max_size=15))
        elif kind == "insert":
            lines.insert(index, data.draw(st.text(alphabet=YAML_ALPHABET, max_size=20)))
        else:
            lines[index] = data.draw(st.sampled_from(["", " ", "  ", "\t"])) + lines[index]
    outcome("\n".join(lines) + "\n", catalog)


@FAST
@given(documents)
def test_any_yaml_document_shape_yields_a_runbook_or_located_problems(catalog: Registry, doc: object) -> None:
    from io import StringIO

    from ruamel.yaml import YAML

    out = StringIO()
    YAML(typ="safe").dump(doc, out)
    outcome(out.getvalue(), catalog)


@pytest.mark.parametrize(
    "text",
    [
        "a: &a [*a]\n",
        "a: &x [1, 2]\n" + "".join(f"b{i}: &x{i} [*x, *x, *x, *x, *x, *x, *x, *x, *x]\n" for i in range(1))
        + "c: &y [" + ", ".join(["*x0"] * 9) + "]\n",
        "? [a, b]\n: c\n",
        "!!python/object:os.system {}\n",
        "%YAML 1.1\n---\n",
        "--- a\n--- b\n",
        "\ufeffapiVersion: 1\n",
        "x: 2026-01-01\n",
    ],
)
def test_awkward_yaml_is_a_runbook_error(catalog: Registry, text: str) -> None:
    with pytest.raises(RunbookError):
        load_text(text, file="odd.yaml", catalog=catalog)


def test_an_alias_bomb_is_refused_before_it_expands(catalog: Registry) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 8)]
    with pytest.raises(RunbookError) as caught:
        load_text("\n".join(lines) + "\n", file="bomb.yaml", catalog=catalog)
    assert "expands to more than" in str(caught.value)


def test_an_anchor_defined_twice_is_reported_at_its_second_definition(catalog: Registry) -> None:
    with pytest.raises(RunbookError) as caught:
        load_text("a: &x 1\nb: &x 2\n", file="anchors.yaml", catalog=catalog)
    assert str(caught.value) == "anchors.yaml:2:4: YAML problem: found duplicate anchor 'x'"
