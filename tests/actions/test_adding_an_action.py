"""The worked example of docs/actions.md ("Adding an action") is run from the page itself: its
module is loaded, registered beside the shipped actions, checked at the catalog (a bad key is
refused naming the field, a dry run writes nothing), and its runbook rehearsed in the sandbox."""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.actions.builtin import BUILTIN, builtin_actions
from bot.actions.registry import Registry
from bot.errors import ParamError, PolicyError
from tests.actions.conftest import make_world

DOC = Path(__file__).resolve().parents[2] / "docs" / "actions.md"
MODULE = "bot.actions.node_annotations"
KEEP = "cluster-autoscaler.kubernetes.io/scale-down-disabled"


def _blocks() -> dict[str, str]:
    """The fenced blocks of the "Adding an action" section, by the tag after their language."""
    section = DOC.read_text().split("\n## Adding an action\n", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"^```(?:python|yaml) (\S+)\n(.*?)^```$", section, flags=re.M | re.S)
    return dict(found)


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The example's module, importable as ``bot.actions.node_annotations`` for the test."""
    module = types.ModuleType(MODULE)
    monkeypatch.setitem(sys.modules, MODULE, module)
    exec(compile(_blocks()["bot/actions/node_annotations.py"], f"{DOC}:node_annotations", "exec"),
         module.__dict__)
    return module


def test_the_page_shows_every_part_and_registers_the_module_it_defines():
    blocks = _blocks()
    assert set(blocks) == {"bot/actions/node_annotations.py", "bot/actions/builtin.py",
                           "runbooks/keep-node.yaml", "rehearsal"}
    # the registration shown is today's list of modules plus the new one
    shown = blocks["bot/actions/builtin.py"]
    listed = set(re.findall(r"\*(\w+)\.ACTIONS", shown))
    real = set(re.findall(r"\*(\w+)\.ACTIONS", Path(sys.modules["bot.actions.builtin"].__file__)
                          .read_text()))
    assert listed == real | {"node_annotations"}


def test_the_example_joins_the_shipped_actions_without_changing_them(example):
    actions = Registry((*BUILTIN, *example.ACTIONS))
    assert actions.names() == sorted([*builtin_actions().names(), "k8s.node.annotate"])
    spec = actions.get("k8s.node.annotate")
    assert spec.plan_fn is example.plan_annotate and spec.apply_fn is example.apply_annotate
    with pytest.raises(ValueError, match="declared twice"):
        Registry((*BUILTIN, *example.ACTIONS, *example.ACTIONS))


@pytest.fixture
def world(ec2_backend: Any, tmp_path: Path, example: Any) -> Iterator[Any]:
    """The action tests' fake cluster and EC2, the catalog serving the example too."""
    yield from make_world(backend=ec2_backend, tmp_path=tmp_path,
                          actions=Registry((*BUILTIN, *example.ACTIONS)))


def test_the_example_refuses_a_bad_key_and_writes_nothing_in_a_dry_run(world):
    world.node("n1")
    with pytest.raises(ParamError) as e:
        world.plan("k8s.node.annotate", node="n1", key="not a key!", value="true")
    assert "key: String should match pattern" in str(e.value)
    assert "expected an annotation key" in str(e.value)

    plan, _ = world.plan("k8s.node.annotate", dry_run=True, node="n1", key=KEEP, value="true")
    assert [c.summary() for c in plan.changes] == [f"annotate Node n1:  -> {KEEP}=true"]
    assert plan.summary == f"Annotate node n1 with {KEEP}=true"
    ctx = world.ctx(dry_run=True)
    with pytest.raises(PolicyError, match="apply refused in a dry run"):
        world.catalog.apply("k8s.node.annotate", plan, ctx)
    assert world.writes() == [] and KEEP not in (world.kube.get("nodes", "n1")["metadata"]
                                                 .get("annotations") or {})


@pytest.mark.slow
def test_the_example_runbook_is_rehearsed_in_the_sandbox(example, tmp_path):
    pytest.importorskip("moto", reason="rehearsals need the sandbox: pip install runbook-bot[sim]")
    blocks = _blocks()
    runbooks = tmp_path / "runbooks"
    runbooks.mkdir()
    (runbooks / "keep-node.yaml").write_text(blocks["runbooks/keep-node.yaml"])
    namespace: dict[str, Any] = {"__name__": "rehearsal"}
    exec(compile(blocks["rehearsal"], f"{DOC}:rehearsal", "exec"), namespace)
    namespace["rehearse"](runbooks, tmp_path / "sandbox")
