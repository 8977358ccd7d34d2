"""Count a client's API requests on the wire: proxies in front of the sandbox's endpoints.

A benchmark that compares the bot with a person typing kubectl and AWS CLI commands needs one
count that both sides are held to, and that neither side's own bookkeeping can flatter. The
audit does not record every read a step makes before approval, and kubectl keeps no record at
all, so the count is taken between the client and the server: ``Wire`` starts two reverse
proxies, one in front of the sandbox's Kubernetes API server (HTTPS, with the sandbox's own
serving certificate, so the kubeconfig's CA still verifies it) and one in front of its EC2/STS
endpoint, and records every request that crosses them: method, path, watch or not, and the
EC2/STS ``Action``.

Why proxies rather than the sandbox's own request counters: the sandbox's controllers (the
attach/detach controller, the CSI sidecars, the kubelets) make their own EC2 calls through the
same endpoint once the sandbox is ready, and the API server's counter is one number for every
client. A proxy sees only the client pointed at it, request by request, including each page of a
list, each retry and each watch, whatever that client believes it sent.

    with Wire(sandbox) as wire:
        env = wire.env                      # KUBECONFIG and AWS_ENDPOINT_URL_* for subprocesses
        wire.kubeconfig_path                # for KubeClient.from_config / kubectl --kubeconfig
        wire.ec2_endpoint                   # for Ec2Client.from_cluster(endpoint_url=...)
        ...
        print(wire.table())                 # calls by verb and resource / Action
        wire.reset()

Discovery requests (``/api``, ``/apis``, ``/openapi``, ``/version``) are counted apart
(``discovery``): kubectl reads them once and caches them on disk; the comparison leaves them out
(``api_calls``) and the table shows them.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import ssl
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from bot.sim.net import Handler, serve_tls
from bot.sim.tls import server_context

HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
       "upgrade", "content-length", "host"}
DISCOVERY = ("/api", "/apis", "/openapi", "/version", "/healthz", "/readyz", "/livez")
KUBE_VERBS = {"PUT": "update", "PATCH": "patch", "POST": "create", "DELETE": "delete"}


@dataclass(frozen=True)
class Request:
    """One request seen on the wire."""

    service: str  # "kubernetes", "ec2" or "sts"
    method: str
    path: str
    query: str
    action: str  # the EC2/STS Action, "" for Kubernetes

    @property
    def discovery(self) -> bool:
        p = self.path.rstrip("/") or "/"
        if self.service != "kubernetes":
            return False
        if p.startswith("/openapi") or p in DISCOVERY:
            return True
        parts = [x for x in p.split("/") if x]
        return (parts[:1] == ["apis"] and len(parts) <= 3) or (parts == ["api", "v1"])

    @property
    def watch(self) -> bool:
        q = parse_qs(self.query)
        return (q.get("watch") or [""])[-1].lower() in ("1", "true")

    @property
    def key(self) -> str:
        """``verb resource`` as Kubernetes' audit log names it, or ``ec2:Action``."""
        if self.service != "kubernetes":
            return f"{self.service}:{self.action or '?'}"
        if self.discovery:
            return f"discovery {self.path}"
        parts = [x for x in self.path.split("/") if x]
        rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
        if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
            rest = rest[2:]
        resource = rest[0] if rest else "?"
        named = len(rest) >= 2
        sub = f"/{rest[2]}" if len(rest) >= 3 else ""
        if self.method == "GET":
            verb = "watch" if self.watch else ("get" if named else "list")
        else:
            verb = KUBE_VERBS.get(self.method, self.method.lower())
        return f"{verb} {resource}{sub}"

    @property
    def write(self) -> bool:
        if self.service == "kubernetes":
            return self.method not in ("GET", "HEAD")
        return not self.action.startswith(("Describe", "Get", "List"))


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up is not the count's concern


class CountingProxy:
    """A reverse proxy to ``upstream`` (``http(s)://host:port``) that records every request."""

    def __init__(self, upstream: str, *, service: str, server_tls: ssl.SSLContext | None = None,
                 upstream_tls: ssl.SSLContext | None = None) -> None:
        parts = urlsplit(upstream)
        self.upstream_host, self.upstream_port = parts.hostname or "127.0.0.1", parts.port or 80
        self.upstream_https = parts.scheme == "https"
        self.upstream_tls = upstream_tls
        self.service = service
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.https = server_tls is not None
        if server_tls is not None:
            serve_tls(self.server, server_tls)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       name=f"wire-{service}", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"{'https' if self.https else 'http'}://{host!s}:{port}"

    def connect(self) -> http.client.HTTPConnection:
        if self.upstream_https:
            return http.client.HTTPSConnection(self.upstream_host, self.upstream_port,
                                               context=self.upstream_tls, timeout=60)
        return http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=60)

    def record(self, req: Request) -> None:
        with self._lock:
            self.requests.append(req)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Handler(Handler):
    owner: CountingProxy

    def setup(self) -> None:
        super().setup()
        self._upstream: http.client.HTTPConnection | None = None

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        action = ""
        service = self.owner.service
        if service != "kubernetes":
            form = {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
            form.update({k: v[-1] for k, v in parse_qs(parts.query).items()})
            action = form.get("Action", "")
            if "/sts/aws4_request" in (self.headers.get("Authorization") or ""):
                service = "sts"
        self.owner.record(Request(service=service, method=self.command, path=parts.path,
                                  query=parts.query, action=action))
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        if self._upstream is None:
            self._upstream = self.owner.connect()
        try:
            self._upstream.request(self.command, self.path, body=body or None, headers=headers)
            resp = self._upstream.getresponse()
        except (OSError, http.client.HTTPException):
            self._upstream.close()  # a kept-alive connection the server closed: once more, fresh
            self._upstream = self.owner.connect()
            self._upstream.request(self.command, self.path, body=body or None, headers=headers)
            resp = self._upstream.getresponse()
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in HOP:
                self.send_header(k, v)
        if resp.chunked:  # a watch: pass each event on as it arrives
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                while data := resp.read1(65536):
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                self.close_connection = True
                self._upstream.close()
                self._upstream = None
            return
        data = resp.read()
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        if getattr(self, "_upstream", None) is not None:
            assert self._upstream is not None
            self._upstream.close()


class Wire:
    """Counting proxies in front of a running ``Sandbox``'s API server and EC2/STS endpoint."""

    def __init__(self, sandbox: Any, workdir: Path | None = None) -> None:
        self.sb = sandbox
        pki = Path(sandbox.workdir) / "pki"
        self.kube = CountingProxy(sandbox.k8s_url, service="kubernetes",
                                  server_tls=server_context(pki / "apiserver.crt",
                                                            pki / "apiserver.key"),
                                  upstream_tls=sandbox.tls_context())
        self.ec2 = CountingProxy(sandbox.ec2_endpoint, service="ec2")
        self.workdir = Path(workdir or sandbox.workdir) / "wire"
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig_path = self.workdir / "kubeconfig"
        config = json.loads(Path(sandbox.kubeconfig_path).read_text())
        for c in config["clusters"]:
            c["cluster"]["server"] = self.kube.url
        self.kubeconfig_path.write_text(json.dumps(config, indent=2) + "\n")

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.kube.close()
        self.ec2.close()

    @property
    def ec2_endpoint(self) -> str:
        return self.ec2.url

    @property
    def env(self) -> dict[str, str]:
        """The sandbox's client environment, pointed at the proxies."""
        return {**self.sb.env, "KUBECONFIG": str(self.kubeconfig_path),
                "AWS_ENDPOINT_URL_EC2": self.ec2.url, "AWS_ENDPOINT_URL_STS": self.ec2.url}

    @property
    def requests(self) -> list[Request]:
        return [*self.kube.requests, *self.ec2.requests]

    def reset(self) -> None:
        for p in (self.kube, self.ec2):
            with p._lock:
                p.requests.clear()

    @contextlib.contextmanager
    def counting(self) -> Iterator[list[Request]]:
        """The requests made inside the block (the list is filled when the block ends)."""
        before = len(self.kube.requests), len(self.ec2.requests)
        seen: list[Request] = []
        try:
            yield seen
        finally:
            seen.extend(self.kube.requests[before[0]:] + self.ec2.requests[before[1]:])

    def api_calls(self, requests: list[Request] | None = None) -> list[Request]:
        """Requests on objects and EC2/STS: discovery left out."""
        return [r for r in (self.requests if requests is None else requests) if not r.discovery]

    def total(self, *, reads: bool | None = None) -> int:
        """API calls so far (discovery left out); ``reads=True`` only reads, ``False`` only writes."""
        calls = self.api_calls()
        return len(calls) if reads is None else sum(1 for r in calls if r.write != reads)

    def counts(self, requests: list[Request] | None = None) -> Counter[str]:
        return Counter(r.key for r in (self.requests if requests is None else requests))

    def table(self, requests: list[Request] | None = None) -> str:
        return self.table_of(self.requests if requests is None else requests)

    @staticmethod
    def table_of(requests: list[Request]) -> str:
        """One line per kind of request, the most frequent first."""
        counts = Counter(r.key for r in requests)
        return "\n".join(f"  {n:>4}  {key}" for key, n in sorted(counts.items(),
                                                                 key=lambda kv: (-kv[1], kv[0])))

