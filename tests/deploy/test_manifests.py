"""deploy/kubernetes renders with ``kubectl kustomize`` and every object is valid Kubernetes.

Each rendered object is validated offline against the Kubernetes OpenAPI schemas (strict: an
unknown field is an error) with ``kubernetes-validate``; then the properties the deployment guide
promises are checked on the rendered objects, for both the HTTP and the Socket Mode variants.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

ROOT = Path(__file__).parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
VARIANTS = {"http": KUBERNETES, "socket-mode": KUBERNETES / "socket-mode"}
SCHEMA_VERSION = "1.32.0"  # the oldest Kubernetes release EKS supports in standard support

pytestmark = pytest.mark.kubectl


def render(path: Path) -> list[dict[str, Any]]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed (kubectl kustomize renders deploy/kubernetes)")
    out = subprocess.run(["kubectl", "kustomize", str(path)], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in YAML(typ="safe").load_all(out.stdout) if d]


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def variant(request: pytest.FixtureRequest) -> tuple[str, dict[tuple[str, str], dict[str, Any]]]:
    objects = render(VARIANTS[request.param])
    # a generated ConfigMap's name ends in a hash of its content: keyed without it
    by_kind = {(o["kind"], o["metadata"]["name"].rsplit("-", 1)[0] if o["kind"] == "ConfigMap"
                else o["metadata"]["name"]): o for o in objects}
    assert len(by_kind) == len(objects), "two objects of one kind and name"
    return request.param, by_kind


def test_every_rendered_object_is_valid_against_the_kubernetes_schemas(variant: Any) -> None:
    import kubernetes_validate

    _, objects = variant
    problems = []
    for (kind, name), obj in objects.items():
        try:
            kubernetes_validate.validate(json.loads(json.dumps(obj)), SCHEMA_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            problems.append(f"{kind}/{name}: {e.message} at {list(e.path)}")
    assert not problems


def test_a_broken_object_is_caught_by_the_validation() -> None:
    import kubernetes_validate

    deployment = next(o for o in render(KUBERNETES) if o["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFS"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, SCHEMA_VERSION, strict=True)


def container(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    (c,) = objects[("Deployment", "runbook-bot")]["spec"]["template"]["spec"]["containers"]
    return c


def test_the_deployment_runs_two_hardened_replicas_with_requests(variant: Any) -> None:
    _, objects = variant
    d = objects[("Deployment", "runbook-bot")]
    pod = d["spec"]["template"]["spec"]
    c = container(objects)
    assert d["metadata"]["namespace"] == "runbook-bot" and d["spec"]["replicas"] == 2
    assert pod["serviceAccountName"] == "runbook-bot"
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    sc = c["securityContext"]
    assert (sc["readOnlyRootFilesystem"], sc["allowPrivilegeEscalation"], sc["capabilities"]) == (
        True, False, {"drop": ["ALL"]})
    assert set(c["resources"]["requests"]) == {"cpu", "memory"} and "memory" in c["resources"]["limits"]
    assert c["image"] != "runbook-bot" and ":" in c["image"]  # the images transformer applied


def test_secrets_come_from_secret_references_and_the_config_from_the_configmap(variant: Any) -> None:
    _, objects = variant
    c = container(objects)
    env = {e["name"]: e for e in c["env"]}
    for name in ("RUNBOOK_BOT_DATABASE_URL", "RUNBOOK_BOT_AUDIT_KEY", "SLACK_BOT_TOKEN",
                 "SLACK_SIGNING_SECRET"):
        assert "value" not in env[name] and env[name]["valueFrom"]["secretKeyRef"]["name"]
    config = objects[("ConfigMap", "runbook-bot-config")]
    volumes = {v["name"]: v for v in objects[("Deployment", "runbook-bot")]["spec"]["template"]["spec"]
               ["volumes"]}
    assert volumes["config"]["configMap"]["name"] == config["metadata"]["name"]
    assert env["RUNBOOK_BOT_CONFIG"]["value"] == "/etc/runbook-bot/runbook-bot.yaml"
    assert list(config["data"]) == ["runbook-bot.yaml"]


def test_the_config_in_the_configmap_loads(variant: Any) -> None:
    from bot.config import settings_from_mapping

    _, objects = variant
    text = objects[("ConfigMap", "runbook-bot-config")]["data"]["runbook-bot.yaml"]
    s = settings_from_mapping(YAML(typ="safe").load(text), {}, source="configmap")
    assert s.policy.approvals_from == ("slack",) and s.cluster(None).kubeconfig is None


def test_the_service_account_is_bound_to_the_cluster_role_of_deploy_rbac_yaml(variant: Any) -> None:
    _, objects = variant
    sa = objects[("ServiceAccount", "runbook-bot")]
    assert sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam::")
    binding = objects[("ClusterRoleBinding", "runbook-bot")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "runbook-bot",
                                    "namespace": sa["metadata"]["namespace"]}]
    assert ("Namespace", sa["metadata"]["namespace"]) in objects
    shipped = [d for d in YAML(typ="safe").load_all((ROOT / "deploy" / "rbac.yaml").read_text())
               if d and d["kind"] == "ClusterRole"]
    assert objects[("ClusterRole", "runbook-bot")]["rules"] == shipped[0]["rules"]


def test_probes_service_and_ingress_rules_follow_the_slack_mode(variant: Any) -> None:
    mode, objects = variant
    c = container(objects)
    policy = objects[("NetworkPolicy", "runbook-bot")]["spec"]
    pdb = objects[("PodDisruptionBudget", "runbook-bot")]["spec"]
    assert pdb["minAvailable"] == 1
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"}
    # the probes ask the ops port in both modes, never the Slack port
    assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "ops"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "ops"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "ops"}
    service = objects[("Service", "runbook-bot")]
    assert service["spec"]["selector"] == objects[("Deployment", "runbook-bot")]["spec"][
        "selector"]["matchLabels"]
    assert "ops" not in {p["targetPort"] for p in service["spec"]["ports"]}  # scraped per pod
    if mode == "http":
        assert c["args"] == ["slack", "serve"]
        assert [p["targetPort"] for p in service["spec"]["ports"]] == ["slack", "alerts", "api"]
    else:
        assert c["args"] == ["slack", "serve", "--socket-mode"]
        assert not [k for k in objects if k[0] == "Ingress"]
        assert [p["targetPort"] for p in service["spec"]["ports"]] == ["alerts", "api"]
        app_token = next(e for e in c["env"] if e["name"] == "SLACK_APP_TOKEN")
        assert app_token["valueFrom"]["secretKeyRef"]["name"] == "runbook-bot-slack"


def test_the_ports_are_the_config_defaults_and_the_scrape_asks_the_ops_port(variant: Any) -> None:
    from bot.config import ListenConfig

    mode, objects = variant
    listen = ListenConfig()
    wanted = {"ops": listen.ops_port, "alerts": listen.alerts_port, "api": listen.api_port}
    if mode == "http":
        wanted["slack"] = listen.slack_port  # Socket Mode listens for no Slack request
    c = container(objects)
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == wanted
    assert "--port" not in c["args"] and "--metrics-port" not in c["args"]  # the defaults, as set
    pod = objects[("Deployment", "runbook-bot")]["spec"]["template"]["metadata"]["annotations"]
    assert (pod["prometheus.io/scrape"], pod["prometheus.io/port"], pod["prometheus.io/path"]) == (
        "true", str(listen.ops_port), "/metrics")


def test_the_network_policy_lets_each_port_in_only_from_where_it_should(variant: Any) -> None:
    """Slack's port from anywhere (the load balancer is not a pod); the ops, alerts and api ports
    from the cluster's pods only; nothing else, and no rule without a port."""
    from bot.config import ListenConfig

    mode, objects = variant
    listen = ListenConfig()
    rules = objects[("NetworkPolicy", "runbook-bot")]["spec"]["ingress"]
    sources: dict[int, list[Any]] = {}
    for rule in rules:
        assert rule.get("ports"), f"a rule lets every port in: {rule}"
        for port in rule["ports"]:
            assert port["protocol"] == "TCP"
            sources.setdefault(port["port"], []).append(rule.get("from"))
    in_cluster = [[{"namespaceSelector": {}}]]
    wanted = {listen.ops_port: in_cluster, listen.alerts_port: in_cluster,
              listen.api_port: in_cluster}
    if mode == "http":
        wanted[listen.slack_port] = [None]  # from anywhere: the only public port
    assert sources == wanted
    assert set(sources) == {p["containerPort"] for p in container(objects)["ports"]}


def test_the_overlay_in_the_deployment_guide_renders_valid_objects(tmp_path: Path) -> None:
    """docs/deploy.md step 6 and 7, as an SRE would type them, beside a copy of the checkout."""
    import kubernetes_validate

    guide = (ROOT / "docs" / "deploy.md").read_text()
    values = {"ACCOUNT_ID": "111122223333", "REGION": "eu-west-1", "CLUSTER": "prod",
              "VERSION": "0.1.0"}
    blocks = dict(re.findall(r"cat > ([\w.-]+) <<EOF\n(.*?)\nEOF\n", guide, re.S))
    (ingress,) = re.findall(r"```yaml\n(apiVersion: networking.k8s.io/v1\nkind: Ingress\n.*?)```",
                            guide, re.S)
    shutil.copytree(ROOT / "deploy", tmp_path / "runbook-bot" / "deploy", symlinks=True)
    mine = tmp_path / "my-runbook-bot"
    mine.mkdir()
    for name in ("kustomization.yaml", "runbook-bot.yaml"):
        text = blocks[name]
        for key, value in values.items():
            text = text.replace(f"${key}", value)
        (mine / name).write_text(text)
    (mine / "ingress.yaml").write_text(ingress)
    (api,) = re.findall(r"```yaml\n# ingress-api.yaml\n(apiVersion: .*?)```", guide, re.S)
    (mine / "ingress-api.yaml").write_text(api)
    objects = render(mine)
    for obj in objects:
        kubernetes_validate.validate(json.loads(json.dumps(obj)), SCHEMA_VERSION, strict=True)
    kinds = {o["kind"]: o for o in objects if o["metadata"]["name"] != "runbook-bot-api"}
    (c,) = kinds["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert c["image"] == "111122223333.dkr.ecr.eu-west-1.amazonaws.com/runbook-bot:0.1.0"
    assert kinds["ServiceAccount"]["metadata"]["annotations"]["eks.amazonaws.com/role-arn"] == \
        "arn:aws:iam::111122223333:role/runbook-bot"
    assert "region: eu-west-1" in kinds["ConfigMap"]["data"]["runbook-bot.yaml"]
    # the Ingress forwards Slack's one path to the Slack port, nothing else
    [path] = kinds["Ingress"]["spec"]["rules"][0]["http"]["paths"]
    assert (path["path"], path["pathType"]) == ("/slack/events", "Exact")
    assert path["backend"]["service"] == {"name": "runbook-bot", "port": {"name": "slack"}}
    # the API's Ingress: internal, HTTPS, to the api port only
    (api_ingress,) = [o for o in objects if o["metadata"]["name"] == "runbook-bot-api"]
    annotations = api_ingress["metadata"]["annotations"]
    assert annotations["alb.ingress.kubernetes.io/scheme"] == "internal"
    assert annotations["alb.ingress.kubernetes.io/listen-ports"] == '[{"HTTPS": 443}]'
    [path] = api_ingress["spec"]["rules"][0]["http"]["paths"]
    assert (path["path"], path["backend"]["service"]) == (
        "/api/v1/", {"name": "runbook-bot", "port": {"name": "api"}})


def test_only_the_bot_reaches_an_in_cluster_database(variant: Any) -> None:
    _, objects = variant
    policy = objects[("NetworkPolicy", "runbook-bot-database")]["spec"]
    assert policy["podSelector"] == {"matchLabels": {
        "app.kubernetes.io/name": "runbook-bot-database"}}
    assert policy["policyTypes"] == ["Ingress"]
    bot = objects[("Deployment", "runbook-bot")]["spec"]["template"]["metadata"]["labels"]
    (rule,) = policy["ingress"]
    (source,) = rule["from"]
    assert set(source) == {"podSelector"}  # this namespace's pods, not any namespace's
    assert source["podSelector"]["matchLabels"].items() <= bot.items()
    assert rule["ports"] == [{"protocol": "TCP", "port": 5432}]
