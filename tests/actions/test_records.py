"""What lands in a step's audit event: one ApiCall per request, and never a credential."""

from __future__ import annotations

import pytest

from bot.errors import PermanentError

TOKEN = "FQoGZXIvYXdzEJr//////////wEaDOx3f5S3cr3tSecretSessionToken"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def test_an_ec2_error_quoting_credentials_is_redacted_in_the_error_and_the_record(world):
    iid = world.instance()
    world.proxy.fail_next.append((
        403, "SignatureDoesNotMatch",
        "The request signature we calculated does not match the signature you provided. The "
        f"canonical string was 'POST\n/\nx-amz-security-token:{TOKEN}\n' with "
        f"aws_secret_access_key={SECRET} and AKIAIOSFODNN7EXAMPLE"))
    ctx = world.ctx()
    with pytest.raises(PermanentError) as e:
        world.catalog.plan("aws.ec2.instance.stop", {"instance_id": iid}, ctx)
    text = str(e.value)
    assert "SignatureDoesNotMatch" in text and "[REDACTED]" in text
    for secret in (TOKEN, SECRET, "AKIAIOSFODNN7EXAMPLE"):
        assert secret not in text and all(secret not in str(c) for c in ctx.calls)
    assert [(c.operation, c.outcome) for c in ctx.calls] == [
        ("DescribeInstanceStatus", "SignatureDoesNotMatch")]
    assert ctx.calls[0].request_id.startswith("failed-")  # the AWS request id, for support cases


def test_a_kubernetes_error_echoing_the_bearer_token_is_redacted(world):
    world.kube.fault = lambda method, path, query: (
        401, "Unauthorized", "invalid bearer token: Authorization: Bearer sandbox-token-0123456789")
    ctx = world.ctx()
    with pytest.raises(PermanentError) as e:
        world.catalog.plan("k8s.node.taint", {"node": "n1"}, ctx)
    assert e.value.code == "Unauthorized" and "sandbox-token-0123456789" not in str(e.value)
    assert "[REDACTED]" in str(e.value)
    assert [(c.operation, c.outcome) for c in ctx.calls] == [("list_node", "Unauthorized")]
    assert ctx.calls[0].request_id  # the API server's Audit-Id, even on an error


def test_a_list_records_what_it_listed_and_each_page(world):
    for i in range(3):
        world.pod(f"es-{i}", node="n1", namespace="search", labels={"app": "es"})
    ctx = world.ctx()
    env = world.catalog._env(world.catalog.validate("k8s.node.get", {"node": "n1"}), ctx)
    kube = env.kube
    kube.page_size = 2
    pods = kube.list_pods(node="n1", namespace="search", label_selector="app=es")
    assert len(pods) == 3
    assert [(c.operation, c.targets) for c in ctx.calls] == [
        ("list_namespaced_pod", ("search", "spec.nodeName=n1", "app=es"))] * 2
    assert len({c.request_id for c in ctx.calls}) == 2  # one Audit-Id per page
