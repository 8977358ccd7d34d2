"""One bot, two EKS clusters: EKS tokens made in process, checked by each cluster's API server
against its own STS, a node recovered in each cluster at once, and nothing crossing between them.

The two clusters are two sandboxes of one process in two AWS accounts (``bot.sim.two_clusters``),
each with its own API server, EC2 and STS endpoint; the bot reaches each with ``auth: eks`` and the
cluster's ``role_arn``, with the grants and access entry ``deploy/second-cluster/`` ships.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.clients.aws import EKS_TOKEN_PREFIX, EksTokens
from bot.clients.cluster import eks_tokens
from bot.present.blockkit import approval_message, run_card
from bot.present.transcript import export
from bot.present.views import run_view, step_view
from bot.sim.eks_auth import EksTokenReview, TokenRefused
from bot.sim.iam import ADMIN_KEY, CREDENTIALS
from bot.sim.two_clusters import ACCOUNTS, USER, TwoClusters, role_arn

OOS = "node.kubernetes.io/out-of-service"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TwoClusters, dict[str, Any]]]:
    # a cap of one node out of service: counted per cluster, both recoveries may taint theirs
    tc = TwoClusters(workdir=tmp_path_factory.mktemp("two"), policy={"max_out_of_service_nodes": 1})
    with tc:
        runs = {name: tc.start_run("node-dead-ngns", cluster=name, node=sb.facts["node"])
                for name, sb in tc.sandboxes.items()}
        states = tc.play(list(runs.values()))
        yield tc, {name: states[rid] for name, rid in runs.items()}


def _https(sb: Any, path: str, token: str) -> int:
    req = urllib.request.Request(sb.k8s_url + path, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, context=ssl.create_default_context(cafile=str(sb.ca_path)),
                                    timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_one_bot_recovers_a_node_in_each_cluster_and_nothing_crosses(fleet: Any) -> None:
    tc, states = fleet
    for name, st in states.items():
        sb, other = tc.sandboxes[name], tc.sandboxes["west" if name == "east" else "east"]
        assert st.status == "succeeded", (name, st.outcome)
        f = sb.facts
        pod = sb.get("Pod", f["namespace"], f["pod"])
        assert pod["status"]["phase"] == "Running" and pod["spec"]["nodeName"] != f["dead_node"]
        assert OOS in [t["key"] for t in sb.get("Node", None, f["dead_node"])["spec"]["taints"]]
        assert sb.violations == [] and sb.ec2.refused == []
        # the cluster's API server took tokens of its own role only, checked by its own STS
        assert set(sb.api.authorizer.eks.accepted) == {role_arn(ACCOUNTS[name])}
        assert sb.api.authorizer.refused == []
        # every EC2 call it saw was signed by a session its own STS issued, for its own role
        issued = {c.issued_key: c.role_arn for c in sb.ec2.sts.calls if c.issued_key}
        bots = [c for c in sb.ec2.wire if c.access_key != ADMIN_KEY]  # not the sandbox's own
        assert bots and {issued.get(c.access_key) for c in bots} == {role_arn(ACCOUNTS[name])}
        # each instance the run touched is in its cluster's account, and not in the other's
        record = json.dumps([e.payload for e in tc.store.events(st.run_id)])
        touched = set(re.findall(r"\bi-[0-9a-f]{8,17}\b", record))
        assert touched and all(sb.ec2.instance(i) for i in touched), touched
        assert not any(other.ec2.instance(i) for i in touched)


def test_the_out_of_service_cap_counts_the_nodes_of_the_cluster_acted_on(fleet: Any) -> None:
    """A cap of one: both recoveries tainted their node, two in all, since each counted its own
    cluster's tainted nodes (none besides its own) and not the other cluster's."""
    tc, states = fleet
    assert tc.settings.policy.max_out_of_service_nodes == 1
    tainted = {name: [n["metadata"]["name"] for n in sb.list("Node")
                      if OOS in [t["key"] for t in (n.get("spec") or {}).get("taints") or []]]
               for name, sb in tc.sandboxes.items()}
    assert {name: len(nodes) for name, nodes in tainted.items()} == {"east": 1, "west": 1}
    for name, st in states.items():
        counted = [f for e in tc.store.events(st.run_id) if e.type == "step.planned"
                   for f in (e.payload.get("plan") or {}).get("facts") or []
                   if f.get("name") == "out_of_service_nodes"]
        assert counted and {f["subject"] for f in counted} == {f"cluster {name}"}, counted
        assert all(f["value"] == [] for f in counted)


def test_the_cluster_is_named_in_the_card_the_plan_and_the_transcript(fleet: Any) -> None:
    tc, states = fleet
    for name, st in states.items():
        view = run_view(st)
        card = json.dumps(run_card(view))
        assert f"cluster={name}" in card
        taint = step_view(st.steps["taint"])
        plan = json.dumps(approval_message(view, taint, destructive=True, now=None))
        assert f"cluster `{name}`" in plan
        md = export(tc.store, st.run_id, fmt="md", exported_at=tc.clock.now())
        assert f"cluster `{name}`" in md


def test_a_token_is_good_for_its_own_cluster_only_and_not_for_long(fleet: Any) -> None:
    tc, _ = fleet
    east, west = tc.sandboxes["east"], tc.sandboxes["west"]
    cfg = tc.settings.clusters["east"]
    token = eks_tokens(cfg, sts_endpoint_url=east.ec2.endpoint, credentials=CREDENTIALS)()
    assert _https(east, "/api/v1/nodes", token) == 200
    refused = len(west.api.authorizer.refused)
    assert _https(west, "/api/v1/nodes", token) == 401  # east's STS is not west's
    assert "not this cluster's STS endpoint" in west.api.authorizer.refused[refused]
    # the token's shape: k8s-aws-v1. + unpadded base64url of a 60 s presigned GetCallerIdentity
    # whose signature covers the cluster's name
    assert token.startswith(EKS_TOKEN_PREFIX) and not token.endswith("=")
    url = base64.urlsafe_b64decode(token[len(EKS_TOKEN_PREFIX):] + "==").decode()
    assert "Action=GetCallerIdentity" in url and "X-Amz-Expires=60" in url
    assert "X-Amz-SignedHeaders=host%3Bx-k8s-aws-id" in url
    # 15 minutes after its signing, EKS no longer takes it
    late = EksTokenReview(cluster="east", sts_url=east.ec2.endpoint, send=east.ec2.send,
                          now=lambda: datetime.now(UTC) + timedelta(minutes=16),
                          access={role_arn(ACCOUNTS["east"]): USER})
    with pytest.raises(TokenRefused, match="expired"):
        late.identify(token)
    unsigned = EKS_TOKEN_PREFIX + base64.urlsafe_b64encode(
        url.replace("host%3Bx-k8s-aws-id", "host").encode()).decode().rstrip("=")
    with pytest.raises(TokenRefused, match="x-k8s-aws-id"):
        late.identify(unsigned)


def test_tokens_are_renewed_before_eks_stops_taking_them(fleet: Any) -> None:
    tc, _ = fleet
    now = [1000.0]
    tokens: EksTokens = eks_tokens(tc.settings.clusters["west"],
                                   sts_endpoint_url=tc.sandboxes["west"].ec2.endpoint,
                                   credentials=CREDENTIALS, now=lambda: now[0])
    first = tokens()
    now[0] += 300
    assert tokens() == first and tokens.minted == 1
    now[0] += 301  # past 10 minutes: a new one, well inside the 15 minutes EKS allows
    assert tokens.minted == 1 and tokens().startswith(EKS_TOKEN_PREFIX) and tokens.minted == 2
    # (botocore signs on the machine's clock, to the second: the text may be the same as before)


def test_config_check_reaches_each_cluster_with_eks_tokens(
        fleet: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Each cluster's STS through its own AWS profile (the config file's ``services`` endpoints),
    as a cluster in another region or partition would have."""
    from bot.cli import main

    tc, _ = fleet
    aws, clusters = [], []
    for name, sb in tc.sandboxes.items():
        aws.append(f"[profile {name}]\naws_access_key_id = testing\naws_secret_access_key = testing\n"
                   f"services = {name}\n[services {name}]\nsts =\n  endpoint_url = {sb.ec2.endpoint}\n"
                   f"ec2 =\n  endpoint_url = {sb.ec2.endpoint}\n")
        c = tc.settings.clusters[name]
        clusters.append(f"  {name}: {{auth: eks, server: '{c.server}', certificate_authority: "
                        f"'{c.certificate_authority}', region: {c.region}, role_arn: '{c.role_arn}', "
                        f"profile: {name}}}\n")
    (tmp_path / "aws-config").write_text("".join(aws))
    (tmp_path / "runbook-bot.yaml").write_text(
        f"database_url: sqlite:///{tmp_path}/state.db\nclusters:\n" + "".join(clusters))
    for var in ("RUNBOOK_BOT_CONFIG", "RUNBOOK_BOT_RUNBOOKS_DIR", "RUNBOOK_BOT_DATABASE_URL",
                "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL_EC2", "KUBECONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    code = main(["config", "check"])
    out = capsys.readouterr().out
    assert code == 0, out
    for name, sb in tc.sandboxes.items():
        nodes = len(sb.list("Node"))
        assert f"ok    cluster {name} kubernetes: {sb.k8s_url} (EKS tokens for {name}), {nodes} nodes" \
            in out, out
        assert f"ok    cluster {name} aws: account {ACCOUNTS[name]}" in out, out
    # the API's identity cluster is any of them: its TokenReviews go to that cluster, with EKS tokens
    from bot.config import load_settings
    from bot.frontends.api.auth import kube_token_reviewer

    settings = load_settings()
    robot = tc.sandboxes["west"].api.authorizer.issue_token("ops", "robot")
    west = kube_token_reviewer(settings, "west")(robot, [])
    assert west["authenticated"] and west["user"]["username"] == "system:serviceaccount:ops:robot"
    assert not kube_token_reviewer(settings, "east")(robot, [])["authenticated"]


def test_the_node_watcher_runs_one_watch_set_per_cluster(fleet: Any) -> None:
    """One watcher per configured cluster, each reading its own API server with its own tokens
    and triaging with its own account's EC2: each notices its own dead node and nothing else."""
    from bot.cli.wiring import NodeWatchers

    tc, _ = fleet
    watchers = NodeWatchers(tc.settings, tc.store, lambda notice: None, clock=tc.clock,
                            clients_factory=lambda cfg: tc.clients[cfg.name])
    assert [w.cluster for w in watchers.watchers] == ["east", "west"]
    for w in watchers.watchers:
        sb = tc.sandboxes[w.cluster]
        other = tc.sandboxes["west" if w.cluster == "east" else "east"]
        theirs = len(other.ec2.wire)
        notices = w.step(tc.clock.now())
        assert [(n.cluster, n.node, n.verdict) for n in notices] == [
            (w.cluster, sb.facts["dead_node"], "dead")]
        # what it watched is its cluster's nodes (their instances are in its account), and its
        # triage read its own account's EC2 only
        instances = {o["spec"]["providerID"].rsplit("/", 1)[1] for o in w.nodes.items.values()}
        assert instances == {o["spec"]["providerID"].rsplit("/", 1)[1] for o in sb.list("Node")}
        assert sb.facts["instance_id"] in instances and other.facts["instance_id"] not in instances
        assert len(other.ec2.wire) == theirs


def test_a_token_made_for_one_cluster_is_refused_by_another_behind_the_same_sts(
        fleet: Any) -> None:
    """In a region every EKS cluster asks the same STS: what keeps a token to its cluster is the
    signature over ``x-k8s-aws-id``, which the API server replays as its own name. A cluster named
    otherwise, behind east's STS, with the same access entry, refuses east's token; so does
    east itself for a token whose signature was tampered with."""
    tc, _ = fleet
    east = tc.sandboxes["east"]
    token = eks_tokens(tc.settings.clusters["east"], sts_endpoint_url=east.ec2.endpoint,
                       credentials=CREDENTIALS)()
    access = {role_arn(ACCOUNTS["east"]): USER}

    def review(cluster: str) -> EksTokenReview:
        return EksTokenReview(cluster=cluster, sts_url=east.ec2.endpoint, send=east.ec2.send,
                              now=lambda: datetime.now(UTC), access=access)
    assert review("east").identify(token) == USER
    with pytest.raises(TokenRefused, match="STS refused"):
        review("east-2").identify(token)
    url = base64.urlsafe_b64decode(token[len(EKS_TOKEN_PREFIX):] + "==").decode()
    sig = re.search(r"X-Amz-Signature=([0-9a-f]+)", url)
    assert sig is not None
    forged = url.replace(sig[1], ("0" if sig[1][0] != "0" else "1") + sig[1][1:])
    with pytest.raises(TokenRefused, match="STS refused"):
        review("east").identify(
            EKS_TOKEN_PREFIX + base64.urlsafe_b64encode(forged.encode()).decode().rstrip("="))
