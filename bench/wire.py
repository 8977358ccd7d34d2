"""A proxy that counts API requests on the wire, in front of a sandbox's API server and EC2 endpoint.

The audit records the calls an action's apply made, not the reads of its plan, nor what kubectl
or the AWS CLI send. A benchmark that compares the bot with a person's commands therefore counts
where both are seen alike: every HTTP request that reaches the Kubernetes API server (served here
with the sandbox's own certificate, so clients keep verifying TLS) and every EC2 query (by its
``Action``). ``WireProxy.kubeconfig`` is a copy of the sandbox's kubeconfig pointing at the proxy;
``WireProxy.ec2_endpoint`` replaces ``AWS_ENDPOINT_URL_EC2``.

    with WireProxy(sb) as wire:
        ...  # clients pointed at wire.kubeconfig / wire.ec2_endpoint
        print(wire.counts())  # {'kubernetes GET': 12, 'ec2 DescribeInstances': 3, ...}
"""

from __future__ import annotations

import json
import ssl
import threading
from collections import Counter
from http.client import HTTPConnection, HTTPSConnection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade", "te",
       "trailer"}


class WireProxy:
    """Counts requests to one sandbox; thread-safe; ``reset()`` starts a new count."""

    def __init__(self, sb: Any) -> None:
        self.sb = sb
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str, str]] = []  # (service, verb or action, path)
        self.servers: list[ThreadingHTTPServer] = []

    def __enter__(self) -> WireProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        k8s = urlsplit(self.sb.k8s_url)
        ec2 = urlsplit(self.sb.ec2.endpoint)
        pki = Path(self.sb.ca_path).parent
        k_srv = self._serve("kubernetes", lambda: HTTPSConnection(
            k8s.hostname or "127.0.0.1", k8s.port, context=self.sb.tls_context(), timeout=120))
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(pki / "apiserver.crt", pki / "apiserver.key")
        k_srv.socket = tls.wrap_socket(k_srv.socket, server_side=True)
        e_srv = self._serve("ec2", lambda: HTTPConnection(ec2.hostname or "127.0.0.1", ec2.port,
                                                          timeout=120))
        self.k8s_url = f"https://127.0.0.1:{k_srv.server_address[1]}"
        self.ec2_endpoint = f"http://127.0.0.1:{e_srv.server_address[1]}"
        config = json.loads(Path(self.sb.kubeconfig_path).read_text())
        for c in config["clusters"]:
            c["cluster"]["server"] = self.k8s_url
        self.kubeconfig = str(Path(self.sb.kubeconfig_path).with_name("kubeconfig-wire"))
        Path(self.kubeconfig).write_text(json.dumps(config))

    def stop(self) -> None:
        for srv in self.servers:
            srv.shutdown()
            srv.server_close()

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()

    def counts(self) -> Counter[str]:
        with self.lock:
            return Counter(f"{s} {v}" for s, v, _ in self.requests)

    def total(self, *, reads: bool | None = None) -> int:
        """Requests so far; ``reads=True`` only reads (GET, Describe*), ``False`` only writes."""
        with self.lock:
            rows = list(self.requests)
        if reads is None:
            return len(rows)
        return sum(1 for _, v, _ in rows if (v in ("GET", "HEAD") or v.startswith("Describe")) == reads)

    def _serve(self, service: str, connect: Any) -> ThreadingHTTPServer:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _relay(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(size) if size else b""
                verb = self.command
                if service == "ec2":
                    form = parse_qs(body.decode(errors="replace"))
                    verb = (form.get("Action") or ["?"])[0]
                with proxy.lock:
                    proxy.requests.append((service, verb, self.path))
                conn = connect()
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _relay

        srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.servers.append(srv)
        return srv
