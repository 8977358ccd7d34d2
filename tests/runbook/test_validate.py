"""What the validator accepts, and the checks that need a particular document shape to show."""

from __future__ import annotations

import pytest

from bot.actions.registry import Registry
from bot.errors import RunbookError
from bot.runbook.loader import load_runbooks, load_text, locate

STEP_TAIL = """\
    - id: extra
      title: Extra
      action: {action}
      with:
{with_}
{extra}
"""


def with_extra(minimal: str, *, action: str, with_: str, extra: str = "") -> str:
    return minimal + STEP_TAIL.format(action=action, with_=with_, extra=extra)


def messages(text: str, catalog: Registry) -> list[str]:
    try:
        load_text(text, file="rb.yaml", catalog=catalog)
    except RunbookError as e:
        return [f"{p.line}:{p.message}" for p in e.problems]
    return []


def test_the_minimal_runbook_is_valid(minimal: str, catalog: Registry) -> None:
    runbook = load_text(minimal, file="rb.yaml", catalog=catalog)
    assert [s.id for s in runbook.spec.steps] == ["read", "tell"]
    assert runbook.spec.steps[0].with_ == {"node": "{{ params.node }}"}


@pytest.mark.parametrize(
    "extra",
    [
        # loop variables and set variables are local names, not context roots
        '      when: "steps.read.result.taints | selectattr(\'key\', \'eq\', \'x\') | list"',
        "      outputs:\n        n: result['items'] | length",
        "      wait_until:\n        expr: result.count == 0\n        interval: 5s",
        "      guards:\n        - expr: plan.changes | length > 0\n"
        "          message: \"{% for t in steps.read.result.taints %}{{ t.key }}{% endfor %}\"",
        "      on_failure:\n        goto: read",
        "      on_failure: continue",
        "      retries:\n        count: 3\n        backoff: 10s",
        "      timeout: 1h30m",
    ],
)
def test_well_formed_step_features_are_accepted(minimal: str, catalog: Registry, extra: str) -> None:
    text = with_extra(minimal, action="k8s.pods.list", with_='        node: "{{ params.node }}"',
                      extra=extra)
    assert messages(text, catalog) == []


def test_item_is_allowed_in_a_foreach_step_outside_its_when_and_foreach(
    minimal: str, catalog: Registry
) -> None:
    text = minimal + """\
    - id: each
      title: "Volume {{ item }}"
      action: aws.ec2.volume.get
      foreach: "['vol-0123456789abcdef0']"
      with:
        volume_id: "{{ item }}"
      guards:
        - expr: item != ''
          message: "{{ item }} is empty"
      outputs:
        state: item ~ result.state
"""
    assert messages(text, catalog) == []


def test_item_in_the_when_of_a_foreach_step_is_reported(minimal: str, catalog: Registry) -> None:
    text = with_extra(
        minimal, action="aws.ec2.volume.get", with_='        volume_id: "{{ item }}"',
        extra="      foreach: \"['vol-0123456789abcdef0']\"\n      when: item",
    )
    assert messages(text, catalog) == [
        "30:'item' exists only in a step with 'foreach'; here you can use: params, steps, run "
        "[in 'item']"
    ]


def test_a_destructive_step_may_ask_for_more_than_the_floor(minimal: str, catalog: Registry) -> None:
    text = minimal.replace("  steps:\n", "  approvals:\n    min_approvers: 1\n    groups: [sre, dba]\n"
                           "  steps:\n")
    text = with_extra(text, action="k8s.node.taint", with_='        node: "{{ params.node }}"',
                      extra="      approval:\n        min_approvers: 3\n        groups: [sre]")
    assert messages(text, catalog) == []


def test_a_templated_with_value_is_not_type_checked_but_a_literal_one_is(
    minimal: str, catalog: Registry
) -> None:
    text = with_extra(
        minimal, action="aws.ec2.instance.stop",
        with_='        instance_id: "{{ params.node }}"\n        force: "{{ params.node }}"',
    )
    assert messages(text, catalog) == []


def test_the_same_name_in_two_files_is_reported(tmp_path, minimal: str, catalog: Registry) -> None:
    (tmp_path / "a.yaml").write_text(minimal)
    (tmp_path / "b.yaml").write_text(minimal)
    with pytest.raises(RunbookError) as caught:
        load_runbooks(tmp_path, catalog=catalog)
    assert [str(p) for p in caught.value.problems] == [
        f"{tmp_path / 'b.yaml'}:1:1: runbook name 'minimal' is also used by {tmp_path / 'a.yaml'}"
    ]


def test_problems_of_every_file_are_reported_together(tmp_path, minimal: str, catalog: Registry) -> None:
    (tmp_path / "a.yaml").write_text(minimal.replace("k8s.node.get", "k8s.node.nope"))
    (tmp_path / "b.yaml").write_text(minimal.replace("name: minimal", "name: other")
                                     .replace("params.node", "params.nod"))
    with pytest.raises(RunbookError) as caught:
        load_runbooks(tmp_path, catalog=catalog)
    assert [(p.file.rsplit("/", 1)[-1], p.line) for p in caught.value.problems] == [
        ("a.yaml", 14), ("b.yaml", 13), ("b.yaml", 16)
    ]


def test_locate_finds_the_line_of_a_step(minimal: str) -> None:
    assert locate(minimal, file="rb.yaml", step_id="tell") == (19, 11)
    assert locate(minimal, file="rb.yaml", step_id="missing") == (1, 1)


def test_without_a_catalog_only_the_language_is_checked(minimal: str) -> None:
    runbook = load_text(minimal.replace("k8s.node.get", "k8s.node.nope"), file="rb.yaml",
                        catalog=None)
    assert runbook.spec.steps[0].action == "k8s.node.nope"


def test_the_first_example_of_the_language_reference_is_valid(catalog: Registry) -> None:
    import re
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "runbook-language.md").read_text(encoding="utf-8")
    example = re.findall(r"```yaml\n(.*?)```", doc, re.DOTALL)[0]
    assert load_text(example, file="doc.yaml", catalog=catalog).name == "cordon-node"
