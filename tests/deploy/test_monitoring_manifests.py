"""The Prometheus Operator components, Pod Security and the egress for AWS credentials, rendered.

``deploy/kubernetes/components/monitoring`` (a PodMonitor) and ``.../monitoring-service`` (a
headless Service and a ServiceMonitor) are added to an overlay as docs/deploy.md says, rendered
with ``kubectl kustomize`` and checked on the rendered objects: the built-in kinds against the
Kubernetes schemas offline (``kubernetes-validate``, strict), the Operator's kinds field by field
(their CRDs are not in those schemas). The base's Namespace enforces Pod Security "restricted",
and its NetworkPolicy lets the pods reach STS (IRSA) and the EKS Pod Identity agent.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.test_manifests import KUBERNETES, SCHEMA_VERSION, VARIANTS, render

COMPONENTS = KUBERNETES / "components"
POD_IDENTITY_AGENT = "169.254.170.23/32"
# the fields of the Operator's monitoring.coreos.com/v1 kinds these components may use
MONITOR_SPEC = {"PodMonitor": {"selector", "podMetricsEndpoints", "namespaceSelector", "jobLabel"},
                "ServiceMonitor": {"selector", "endpoints", "namespaceSelector", "jobLabel"}}
ENDPOINT = {"port", "path", "interval", "scrapeTimeout", "scheme"}

pytestmark = pytest.mark.kubectl


def overlay(tmp_path: Path, component: str) -> dict[tuple[str, str], dict[str, Any]]:
    """An overlay of the HTTP variant with ``component``, as docs/deploy.md writes it."""
    up = os.path.relpath(KUBERNETES, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n  - {up}\ncomponents:\n  - {up}/components/{component}\n")
    objects = render(tmp_path)
    by_kind = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    assert len(by_kind) == len(objects)
    return by_kind


def validate_built_in(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    """The built-in objects a component adds or patches (tests/deploy/test_manifests.py
    validates the rest)."""
    import kubernetes_validate

    for key in [("Deployment", "runbook-bot"), ("Service", "runbook-bot-metrics")]:
        if key in objects:
            kubernetes_validate.validate(json.loads(json.dumps(objects[key])), SCHEMA_VERSION,
                                         strict=True)


def pod_template(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    template: dict[str, Any] = objects[("Deployment", "runbook-bot")]["spec"]["template"]
    return template


def check_endpoint(endpoint: dict[str, Any], objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    assert set(endpoint) <= ENDPOINT
    (c,) = pod_template(objects)["spec"]["containers"]
    ops = {p["name"]: p["containerPort"] for p in c["ports"]}["ops"]
    assert (endpoint["port"], endpoint["path"]) == ("ops", "/metrics") and ops == 9464


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) == {"matchLabels"}
    return bool(selector["matchLabels"].items() <= labels.items())


def test_the_pod_monitor_scrapes_each_pods_ops_port_instead_of_the_annotations(tmp_path: Path) -> None:
    objects = overlay(tmp_path, "monitoring")
    validate_built_in(objects)
    monitor = objects[("PodMonitor", "runbook-bot")]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == "runbook-bot"
    assert set(monitor["spec"]) <= MONITOR_SPEC["PodMonitor"]
    assert selects(monitor["spec"]["selector"], pod_template(objects)["metadata"]["labels"])
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    check_endpoint(endpoint, objects)
    # scraped once: annotation-based discovery is told to leave the pods alone
    assert pod_template(objects)["metadata"]["annotations"]["prometheus.io/scrape"] == "false"
    assert not [k for k in objects if k[0] == "ServiceMonitor"]


def test_the_service_monitor_scrapes_each_pod_through_a_headless_service_of_its_own(
        tmp_path: Path) -> None:
    objects = overlay(tmp_path, "monitoring-service")
    validate_built_in(objects)
    service = objects[("Service", "runbook-bot-metrics")]["spec"]
    pod_labels = pod_template(objects)["metadata"]["labels"]
    assert service["clusterIP"] == "None" and service["selector"].items() <= pod_labels.items()
    assert service["ports"] == [{"name": "ops", "port": 9464, "targetPort": "ops"}]
    monitor = objects[("ServiceMonitor", "runbook-bot")]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(monitor["spec"]) <= MONITOR_SPEC["ServiceMonitor"]
    (endpoint,) = monitor["spec"]["endpoints"]
    check_endpoint(endpoint, objects)
    # it selects the metrics Service only: the Ingress's Service still carries no ops port
    picked = [name for (kind, name), o in objects.items()
              if kind == "Service" and selects(monitor["spec"]["selector"], o["metadata"]["labels"])]
    assert picked == ["runbook-bot-metrics"]
    assert "ops" not in {p["name"] for p in objects[("Service", "runbook-bot")]["spec"]["ports"]}
    assert pod_template(objects)["metadata"]["annotations"]["prometheus.io/scrape"] == "false"


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def variant(request: pytest.FixtureRequest) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in render(VARIANTS[request.param])}


def test_the_namespace_enforces_pod_security_restricted_and_the_pods_meet_it(
        variant: dict[tuple[str, str], dict[str, Any]]) -> None:
    objects = variant
    labels = objects[("Namespace", "runbook-bot")]["metadata"]["labels"]
    for mode_label in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode_label}"] == "restricted"
    # what "restricted" asks of the pods (kubernetes.io/docs/concepts/security/pod-security-standards)
    pod = pod_template(objects)["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] in ("RuntimeDefault", "Localhost")
    for c in pod["containers"] + pod.get("initContainers", []):
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
        assert not c.get("ports") or all("hostPort" not in p for p in c["ports"])
    assert all(set(v) - {"name"} <= {"configMap", "secret", "emptyDir", "projected",
                                      "persistentVolumeClaim", "downwardAPI"}
               for v in pod.get("volumes", []))
    assert not {"hostNetwork", "hostPID", "hostIPC"} & set(pod)


def test_the_egress_reaches_sts_for_irsa_and_the_pod_identity_agent(
        variant: dict[tuple[str, str], dict[str, Any]]) -> None:
    egress = variant[("NetworkPolicy", "runbook-bot")]["spec"]["egress"]
    # IRSA: STS's regional endpoint over HTTPS, wherever it resolves
    assert any(not rule.get("to") and {"protocol": "TCP", "port": 443} in rule["ports"]
               for rule in egress)
    # EKS Pod Identity: the node's agent on its link-local address, HTTP, and nothing more there
    (agent,) = [rule for rule in egress
                if {"ipBlock": {"cidr": POD_IDENTITY_AGENT}} in rule.get("to", [])]
    assert agent["ports"] == [{"protocol": "TCP", "port": 80}]
    assert {"ipBlock": {"cidr": "fd00:ec2::23/128"}} in agent["to"]
    assert all(set(peer) == {"ipBlock"} and peer["ipBlock"]["cidr"].endswith(("/32", "/128"))
               for peer in agent["to"])
