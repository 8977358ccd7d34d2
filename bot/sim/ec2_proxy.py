"""The EC2 proxy's request handler: what crosses the sandbox's EC2 endpoint, on its socket server
or the in-process transport. It records each request (``WireCall``), has the sandbox answer what it
models itself (IAM, throttling, stuck detaches, STS), and forwards the rest to moto, whose answer
the sandbox rewrites (hung guests, stopping instances) before the caller hears it.

A module apart from ``bot/sim/ec2.py`` (the ``Ec2Sim`` the handler serves) to keep that one within
the size budget.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

from bot.sim.ec2_instances import Ec2Refusal
from bot.sim.iam import access_key
from bot.sim.net import no_delay
from bot.sim.sts import error_xml as sts_error_xml
from bot.sim.sts import is_sts

log = logging.getLogger("bot.sim.ec2")
Ec2Error = Ec2Refusal


def error_xml(code: str, message: str) -> bytes:
    rid = str(uuid.uuid4())
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{escape(code)}'
            f"</Code><Message>{escape(message)}</Message></Error></Errors>"
            f"<RequestID>{rid}</RequestID></Response>").encode()


@dataclass(frozen=True)
class WireCall:
    """One EC2 request as it crossed the endpoint: the action and the access key that signed it."""

    action: str
    access_key: str
    dry_run: bool = False


WRITES = {"DetachVolume", "AttachVolume", "StartInstances", "StopInstances", "TerminateInstances",
          "RebootInstances", "DeleteVolume", "CreateVolume"}


class ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    ec2: Any  # the Ec2Sim served (bot.sim.ec2)

    def setup(self) -> None:
        super().setup()
        no_delay(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("ec2: " + format, *args)

    def _reply(self, status: int, body: bytes, ctype: str = "text/xml") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _serve(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        query = self.path.split("?", 1)[1] if "?" in self.path else ""
        params = {k: v[-1] for k, v in parse_qs(raw.decode() or query).items()}
        action = params.get("Action", "")
        auth = self.headers.get("Authorization") or ""
        key = access_key(auth) or params.get("X-Amz-Credential", "").split("/", 1)[0]  # presigned
        scope = auth.split("Credential=", 1)[-1].split(",", 1)[0].split("/")
        if is_sts(params, scope[3] if len(scope) > 3 else ""):
            denied = self.ec2.authorize_sts(params, key)
            if denied:
                self.ec2.sts.record(params, access_key=key)
                self._reply(403, sts_error_xml("AccessDenied", denied))
                return
            self._forward(method, raw, action, before_reply=lambda data: self.ec2.sts.record(
                params, access_key=key, answer=data))
            return
        call = WireCall(action=action, access_key=key,
                        dry_run=params.get("DryRun", "").lower() == "true")
        self.ec2.wire.append(call)
        try:
            answer = self.ec2.handle(params, key=key)
        except Ec2Error as e:
            self.ec2.answered_error.append(call)
            self._reply(e.status, error_xml(e.code, e.message))
            return
        if answer is not None:
            self._reply(200, answer)
            return
        if params.get("Action") == "DetachVolume" and "InstanceId=" not in raw.decode():
            raw = (raw.decode() + "&InstanceId=" + params["InstanceId"]).encode()
        self._forward(method, raw, action)

    def _forward(self, method: str, raw: bytes, action: str,
                 before_reply: Callable[[bytes], object] | None = None) -> bytes:
        """Moto's answer, rewritten; ``before_reply`` sees it before the caller does, so what it
        records is there once the caller has its answer."""
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("content-length", "host")}
        headers["Host"] = f"{self.ec2._moto_addr[0]}:{self.ec2._moto_addr[1]}"
        if "Authorization" not in headers and "X-Amz-Credential=" in self.path:  # presigned: moto
            query = parse_qs(self.path.split("?", 1)[-1])  # reads the key from the header only
            headers["Authorization"] = f"AWS4-HMAC-SHA256 Credential={query['X-Amz-Credential'][0]}"
        status, resp_headers, data = self.ec2.forward(method, self.path, headers, raw)
        data = self.ec2.rewrite(action, data)
        # the controllers react before the caller hears back, as with the fake API server: once a
        # write returns, the cluster has followed and any invariant it broke is on record
        if action in WRITES and status < 300:
            self.ec2.on_change()
        if before_reply is not None:
            before_reply(data)
        self._reply(status, data, resp_headers.get("Content-Type", "text/xml"))
        return data

    def do_POST(self) -> None:
        self._serve("POST")

    def do_GET(self) -> None:
        self._serve("GET")
