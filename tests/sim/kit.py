"""Helpers shared by the sandbox tests.

``Pool`` keeps one running sandbox at a time (moto's state is process-wide): it hands out the
running one when a test asks for the same scenario again, so tests that only read share it, and
``fresh`` always starts a new one for tests that change the world. A test outside the pool that
needs the process's one sandbox gets the pool's stopped first (``Pool.close_all``, called from
tests/conftest.py), so the order files run in does not matter. The clients are the real ones: the
kubernetes Python client, kubectl, plain HTTP, and boto3.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from http.client import HTTPSConnection
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import pytest

from bot.engine.ports import ManualClock
from bot.sim.authz import ADMIN_TOKEN
from bot.sim.sandbox import Sandbox

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed on this machine")


class Pool:
    opened: ClassVar[list[Pool]] = []  # every pool of this process, for close_all

    def __init__(self, root: Path) -> None:
        self.root = root
        self.current: Any = None
        self._key: tuple[Any, ...] | None = None
        self._n = 0
        Pool.opened.append(self)

    @classmethod
    def close_all(cls) -> None:
        """Stop every pool's running sandbox: the next test that asks a pool gets a new one."""
        for pool in cls.opened:
            pool.close()

    def get(self, scenario: str, *, seed: int | None = None, **options: Any) -> Any:
        """The running sandbox for this scenario if a reading test left it; else a new one."""
        key = (scenario, seed, tuple(sorted(options.items())))
        if self.current is not None and self._key == key:
            return self.current
        sb = self.fresh(scenario, seed=seed, **options)
        self._key = key
        return sb

    def fresh(self, scenario: str, *, seed: int | None = None, **options: Any) -> Any:
        self.close()
        self._n += 1
        sb = Sandbox(scenario, seed=seed, workdir=self.root / f"{self._n}-{scenario}",
                             clock=ManualClock(), options=options)
        sb.start()
        self.current, self._key = sb, None
        return sb

    def close(self) -> None:
        if self.current is not None:
            self.current.stop()
            self.current, self._key = None, None


class Api:
    """Plain HTTP to the fake API server: for the exact status codes, bodies and content types."""

    def __init__(self, url: str, token: str | None = ADMIN_TOKEN, *, context: Any = None) -> None:
        parts = urlsplit(url)
        self.conn = HTTPSConnection(parts.hostname or "127.0.0.1", parts.port, timeout=10,
                                    context=context)
        self.token = token

    def __call__(self, method: str, path: str, body: Any = None, *,
                 content_type: str = "application/json") -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        self.conn.request(method, path, body=data, headers=headers)
        resp = self.conn.getresponse()
        raw = resp.read()
        try:
            return resp.status, json.loads(raw)
        except ValueError:
            return resp.status, raw.decode()

    def close(self) -> None:
        self.conn.close()


def api_for(sb: Any, token: str | None = ADMIN_TOKEN) -> Api:
    return Api(sb.k8s_url, token, context=sb.tls_context())


def kube_for(sb: Any, context: str | None = None) -> Any:
    """The kubernetes Python client's ApiClient, configured from the sandbox's kubeconfig."""
    from kubernetes import config

    return config.new_client_from_config(config_file=str(sb.kubeconfig_path), context=context)


def kubectl(sb: Any, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    cmd = [KUBECTL, "--kubeconfig", str(sb.kubeconfig_path), "--cache-dir",
           str(sb.workdir / "kubectl-cache"), "--request-timeout", "10s", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({done.returncode}): {done.stderr}")
    return done


def node_of(sb: Any, namespace: str, pod: str) -> str:
    return str(sb.get("Pod", namespace, pod)["spec"].get("nodeName") or "")


def taint_keys(sb: Any, node: str) -> list[tuple[str, str]]:
    return [(t["key"], t["effect"]) for t in sb.get("Node", None, node)["spec"].get("taints") or []]


def ready(sb: Any, node: str) -> str:
    conds = sb.get("Node", None, node)["status"].get("conditions") or []
    return next(c["status"] for c in conds if c["type"] == "Ready")


def vas_on(sb: Any, node: str) -> list[dict[str, Any]]:
    return [v for v in sb.list("VolumeAttachment") if v["spec"]["nodeName"] == node]


def ec2_attachments(sb: Any, volume_id: str) -> list[tuple[str, str]]:
    return sb.ec2.attachments().get(volume_id, [])


def events(sb: Any, *, reason: str | None = None, obj: str | None = None) -> list[Any]:
    return [e for e in sb.events if (reason is None or e.reason == reason)
            and (obj is None or e.object == obj)]
