"""Read-only actions that diagnose rather than change: a VolumeAttachment audit, and rendered reports.

- ``k8s.volumeattachments.audit`` classifies every VolumeAttachment that is ``attached: true``
  against the live cluster in three reads (attachments, nodes, pods, plus PVs for the claims):
  on a node that no longer exists, on a node that is NotReady, or for a PV that no running pod
  uses. Each finding names the runbook to run next, so a person is never left with a list and
  no idea what to do with it. The rules live here, in Python, where they are tested, rather than
  in a runbook expression.
- ``report.render`` renders a shipped template from ``templates/`` (a replacement StorageClass
  manifest, say) with values from the run. Templates are part of the product, not of a runbook,
  so a runbook can only name one; rendering is sandboxed and StrictUndefined all the same.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path
from typing import Annotated, Any

from jinja2 import FileSystemLoader, StrictUndefined, TemplateNotFound
from jinja2.sandbox import ImmutableSandboxedEnvironment
from pydantic import BaseModel, ConfigDict, Field

from bot.actions.env import Env
from bot.actions.objects import Obj, meta, ready_condition, terminating
from bot.actions.registry import ActionSpec, action
from bot.engine.plan import Plan, Result
from bot.errors import ParamError


def _templates_dir() -> Path:
    """``templates/reports`` in a source checkout, else where a wheel installs it."""
    checkout = Path(__file__).resolve().parents[2] / "templates" / "reports"
    if checkout.is_dir():
        return checkout
    for base in dict.fromkeys((sysconfig.get_path("data"), sys.prefix)):
        installed = Path(base) / "share" / "runbook-bot" / "templates" / "reports"
        if installed.is_dir():
            return installed
    return checkout


TEMPLATES = _templates_dir()


class AuditParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    cluster: str | None = Field(default=None, description="Configured cluster name.")


class RenderParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    template: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*\.[a-z0-9.]+\.j2$",
                                   description="A template file in templates/reports, "
                                               "e.g. storageclass-wffc.yaml.j2")]
    values: dict[str, Any] = Field(default_factory=dict)


def classify(vas: list[Obj], nodes: list[Obj], pods: list[Obj], pvs: list[Obj]) -> list[Obj]:
    """The zombie VolumeAttachments among ``vas``, each with why and what to run next."""
    by_node = {meta(n).get("name"): n for n in nodes}
    claims = {}
    for volume in pvs:
        ref = (volume.get("spec") or {}).get("claimRef") or {}
        if ref.get("name"):
            claims[meta(volume).get("name")] = f"{ref.get('namespace') or 'default'}/{ref['name']}"
    running = set()
    for pod in pods:
        if (pod.get("status") or {}).get("phase") != "Running" or terminating(pod):
            continue
        ns = meta(pod).get("namespace") or "default"
        for v in (pod.get("spec") or {}).get("volumes") or ():
            if v.get("persistentVolumeClaim"):
                running.add(f"{ns}/{v['persistentVolumeClaim']['claimName']}")
    found = []
    for va in sorted(vas, key=lambda v: str(meta(v).get("name"))):
        spec: Obj = va.get("spec") or {}
        status: Obj = va.get("status") or {}
        if not status.get("attached"):
            continue
        node_name = spec.get("nodeName")
        pv = (spec.get("source") or {}).get("persistentVolumeName")
        node = by_node.get(node_name)
        item: Obj = {"name": meta(va).get("name"), "node": node_name, "pv": pv,
                     "claim": claims.get(pv)}
        if node is None:
            item |= {"reason": f"node {node_name} no longer exists",
                     "next": "stuck-terminating-volume" if pv else "none: delete the attachment",
                     "next_params": {"pv": pv} if pv else {}}
        elif ready_condition(node)[0] != "True":
            item |= {"reason": f"node {node_name} is NotReady",
                     "next": "node-dead-ngns", "next_params": {"node": node_name}}
        elif pv and claims.get(pv) not in running:
            item |= {"reason": f"no running pod uses {claims.get(pv) or pv}",
                     "next": "multi-attach-triage" if claims.get(pv) else "stuck-terminating-volume",
                     "next_params": {"pv": pv}}
        else:
            continue
        found.append(item)
    return found


def plan_audit(p: AuditParams, env: Env) -> Plan:
    return Plan(action="k8s.volumeattachments.audit", params={})


def apply_audit(plan: Plan, p: AuditParams, env: Env) -> Result:
    k = env.kube
    vas = k.list_volume_attachments()
    items = classify(vas, k.list_nodes(), k.list_pods(), k.list_pvs())
    lines = [f"{i['name']} ({i['pv'] or 'no PV'} on {i['node']}): {i['reason']}; next: {i['next']}"
             for i in items]
    return Result(data={"items": items, "count": len(items), "checked": len(vas),
                        "lines": lines})


def _env() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(loader=FileSystemLoader(str(TEMPLATES)),
                                        undefined=StrictUndefined, autoescape=False,
                                        keep_trailing_newline=True)
    return env


def plan_render(p: RenderParams, env: Env) -> Plan:
    if not (TEMPLATES / p.template).is_file():
        known = ", ".join(sorted(x.name for x in TEMPLATES.glob("*.j2"))) or "none"
        raise ParamError(f"report.render: template: no {p.template!r} in templates/reports; "
                         f"known: {known}")
    return Plan(action="report.render", params={})


def apply_render(plan: Plan, p: RenderParams, env: Env) -> Result:
    try:
        text = _env().get_template(p.template).render(**p.values)
    except TemplateNotFound:
        raise ParamError(f"report.render: template: no {p.template!r} in templates/reports") from None
    return Result(data={"text": text, "template": p.template}, message=text)


# -- the actions ------------------------------------------------------------------------------

VOLUMEATTACHMENTS_AUDIT = action(
    "k8s.volumeattachments.audit", AuditParams, destructive=False,
    summary="Audit VolumeAttachments",
    description="Attached VolumeAttachments on gone or NotReady nodes, or with no running consumer, "
                "each with the runbook to run next.",
    plan=plan_audit, apply=apply_audit)
REPORT_RENDER = action(
    "report.render", RenderParams, destructive=False,
    summary="Render {{ template }}",
    description="Render a shipped report or manifest template with run values.",
    plan=plan_render, apply=apply_render)

ACTIONS: tuple[ActionSpec[Any], ...] = (VOLUMEATTACHMENTS_AUDIT, REPORT_RENDER)
