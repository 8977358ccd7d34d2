"""Read-only actions that diagnose rather than change: a VolumeAttachment audit, and rendered reports.

- ``k8s.volumeattachments.audit`` classifies every VolumeAttachment that is ``attached: true``
  against the live cluster in three reads (attachments, nodes, pods, plus PVs for the claims):
  on a node that no longer exists, on a node that is NotReady, or for a PV that no pod on its node
  uses. Each finding names the runbook to run next with exactly the params that runbook takes
  (``next_params``), so a person is never left with a list and no idea what to do with it. Normal
  and transient states are not findings: a consumer still starting (Pending) on the node, a
  finished Job's pod, a consumer not scheduled yet. The rules live here, in Python, where they are
  tested, rather than in a runbook expression.
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

from bot.actions.authoring import (
    ActionSpec,
    Env,
    Obj,
    ParamError,
    Plan,
    Result,
    action,
    meta,
    pod_claims,
    ready_condition,
    terminating,
)


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


def _consumers(pods: list[Obj]) -> dict[str, list[Obj]]:
    """claim (``namespace/name``) -> the pods that mount it and are not being deleted."""
    out: dict[str, list[Obj]] = {}
    for pod in pods:
        if terminating(pod):
            continue
        for claim in pod_claims(pod):
            out.setdefault(claim, []).append(pod)
    return out


def _waiting_elsewhere(users: list[Obj], node: str | None) -> Obj | None:
    """A pod scheduled on another node that has not started: it waits for this volume."""
    return next((p for p in users if ((p.get("spec") or {}).get("nodeName") or None) not in (None, node)
                 and (p.get("status") or {}).get("phase") == "Pending"), None)


def _handoff(pod: Obj) -> Obj:
    return {"next": "multi-attach-triage",
            "next_params": {"pod": meta(pod).get("name"),
                            "namespace": meta(pod).get("namespace") or "default"}}


def _finding(va: Obj, node: Obj | None, pv: Obj | None, claim: str | None,
             users: list[Obj]) -> Obj | None:
    """Why this attached VolumeAttachment is a zombie, and the runbook (with exactly the params it
    takes) to run next; None when it is a normal state or a transient one."""
    spec: Obj = va.get("spec") or {}
    node_name, pv_name = spec.get("nodeName"), (spec.get("source") or {}).get("persistentVolumeName")
    waiting = _waiting_elsewhere(users, node_name)
    pv_deleting = pv is not None and terminating(pv)
    if node is None:
        why = f"node {node_name} no longer exists"
    elif ready_condition(node)[0] != "True":
        return {"reason": f"node {node_name} is NotReady", "next": "node-dead-ngns",
                "next_params": {"node": node_name}}
    elif any((p.get("spec") or {}).get("nodeName") == node_name for p in users):
        return None  # a consumer on this node: running, starting (Pending) or a finished Job
    elif users and waiting is None:
        return None  # its consumer is not scheduled yet, or is moving: the controller follows
    else:
        why = f"no running pod uses {claim or pv_name} on {node_name}"
    if waiting is not None:
        return {"reason": f"{why}; pod {meta(waiting).get('namespace')}/{meta(waiting).get('name')} "
                          "waits for the volume", **_handoff(waiting)}
    if pv_deleting and pv_name:
        return {"reason": f"{why}; PV {pv_name} is being deleted",
                "next": "stuck-terminating-volume", "next_params": {"pv": pv_name}}
    return {"reason": f"{why}, and no pod waits for it",
            "next": "none: nothing waits for the volume; find who attached it before clearing "
                    "the attachment", "next_params": {}}


def classify(vas: list[Obj], nodes: list[Obj], pods: list[Obj], pvs: list[Obj]) -> list[Obj]:
    """The zombie VolumeAttachments among ``vas``, each with why and what to run next."""
    by_node = {meta(n).get("name"): n for n in nodes}
    by_pv = {meta(v).get("name"): v for v in pvs}
    consumers = _consumers(pods)
    found = []
    for va in sorted(vas, key=lambda v: str(meta(v).get("name"))):
        spec: Obj = va.get("spec") or {}
        if not (va.get("status") or {}).get("attached"):
            continue
        node_name = spec.get("nodeName")
        pv_name = (spec.get("source") or {}).get("persistentVolumeName")
        pv = by_pv.get(pv_name)
        ref = ((pv or {}).get("spec") or {}).get("claimRef") or {}
        claim = f"{ref.get('namespace') or 'default'}/{ref['name']}" if ref.get("name") else None
        finding = _finding(va, by_node.get(node_name), pv, claim, consumers.get(claim or "", []))
        if finding is not None:
            found.append({"name": meta(va).get("name"), "node": node_name, "pv": pv_name,
                          "claim": claim, **finding})
    return found


def plan_audit(p: AuditParams, env: Env) -> Plan:
    return Plan(action="k8s.volumeattachments.audit", params={})


def apply_audit(plan: Plan, p: AuditParams, env: Env) -> Result:
    k = env.kube
    vas = k.list_volume_attachments()
    items = classify(vas, k.list_nodes(), k.list_pods(), k.list_pvs())
    lines = [f"{i['name']} ({i['pv'] or 'no PV'} on {i['node']}): {i['reason']}; next: {i['next']}"
             + "".join(f" -p {k}={v}" for k, v in sorted(i["next_params"].items()))
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
