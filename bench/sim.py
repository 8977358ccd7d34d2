"""How fast the sandbox is ready with a big outage, and how many GETs its API server answers.

A game day on a 100-node AZ outage must not start with a long wait, and a bot polling hundreds of
nodes and VolumeAttachments must not be slowed by the fake API server. Targets on a 2-core machine:
``az-outage`` with 100 nodes and 500 volumes ready in at most 10 s; at least 500 GETs/s over one
keep-alive connection (the way the kubernetes client talks), and the typed kubernetes client's own
rate printed for comparison.

Run: ``.venv/bin/python bench/sim.py`` (or ``make bench``).
"""

from __future__ import annotations

import sys
import time
from http.client import HTTPSConnection
from urllib.parse import urlsplit

from bot.sim.authz import ADMIN_TOKEN
from bot.sim.sandbox import Sandbox

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

READY_TARGET_S = 10.0
GETS_TARGET = 500.0
GETS = 1000


def gets_per_second(sb: Sandbox, paths: list[str]) -> float:
    parts = urlsplit(sb.k8s_url)
    conn = HTTPSConnection(parts.hostname or "127.0.0.1", parts.port, timeout=10,
                           context=sb.tls_context())
    try:
        for path in paths[:20]:  # warm up
            conn.request("GET", path, headers=AUTH)
            conn.getresponse().read()
        start = time.perf_counter()
        for i in range(GETS):
            conn.request("GET", paths[i % len(paths)], headers={"Accept": "application/json", **AUTH})
            resp = conn.getresponse()
            body = resp.read()
            assert resp.status == 200, body[:200]
        return GETS / (time.perf_counter() - start)
    finally:
        conn.close()


def client_gets_per_second(sb: Sandbox, nodes: list[str]) -> float:
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(sb.kubeconfig_path))
    core = client.CoreV1Api(api)
    try:
        n = 300
        start = time.perf_counter()
        for i in range(n):
            core.read_node(nodes[i % len(nodes)])
        return n / (time.perf_counter() - start)
    finally:
        api.close()


def main() -> int:
    start = time.perf_counter()
    sb = Sandbox("az-outage", options={"nodes": 100, "volumes_per_node": 5})
    sb.start()
    ready_s = time.perf_counter() - start
    try:
        nodes = [n["metadata"]["name"] for n in sb.list("Node")]
        volumes = len(sb.list("PersistentVolume"))
        attachments = len(sb.list("VolumeAttachment"))
        not_ready = sum(1 for n in sb.list("Node") if not any(
            c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"]))
        print(f"az-outage: {len(nodes)} nodes ({not_ready} NotReady), {volumes} volumes, "
              f"{attachments} VolumeAttachments ready in {ready_s:.2f} s (target <= {READY_TARGET_S:.0f} s)")
        one = [f"/api/v1/nodes/{n}" for n in nodes]
        rate = gets_per_second(sb, one)
        print(f"API server: {rate:.0f} GETs/s of single nodes over one keep-alive connection "
              f"({GETS} requests; target >= {GETS_TARGET:.0f})")
        vas = [f"/apis/storage.k8s.io/v1/volumeattachments?limit=50&fieldSelector=metadata.name%3D{v}"
               for v in [va["metadata"]["name"] for va in sb.list("VolumeAttachment")][:50]]
        print(f"API server: {gets_per_second(sb, vas):.0f} GETs/s of filtered VolumeAttachment lists "
              f"(each scans {attachments})")
        typed = client_gets_per_second(sb, nodes)
        print(f"kubernetes client: {typed:.0f} read_node calls/s (client-side deserialisation included)")
        start = time.perf_counter()
        sb.advance(60)
        print(f"controllers: one simulated minute of the outage in {time.perf_counter() - start:.2f} s")
    finally:
        sb.stop()
    ok = ready_s <= READY_TARGET_S and rate >= GETS_TARGET
    print("OK" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
