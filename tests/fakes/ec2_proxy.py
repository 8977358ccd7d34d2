"""A proxy in front of moto's ``ThreadedMotoServer`` that injects EC2 faults over the wire.

It can answer ``RequestLimitExceeded`` for the next N requests or for chosen actions, or any EC2
error for the next request, so boto3's retry mode and the product's error handling are exercised
without patching anything.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from xml.sax.saxutils import escape


class ThrottlingProxy:
    """Forwards to moto; answers ``RequestLimitExceeded`` for the next ``throttle_next`` requests."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.throttle_next = 0
        self.throttle_actions: dict[str, int] = {}  # action -> throttle its next N requests
        self.fail_next: list[tuple[int, str, str]] = []  # (status, code, message) for next requests
        self.fail_actions: dict[str, list[tuple[int, str, str]]] = {}  # the same, per action
        self.requests: list[str] = []
        self.ignore_dry_run = False  # behave as an endpoint that performs DryRun calls for real
        # instances whose instance status check EC2 reports impaired (moto reports every one ok)
        self.impaired: set[str] = set()
        self.impaired_volumes: set[str] = set()  # volumes whose I/O EBS disabled
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def error(self, status: int, code: str, message: str, request_id: str) -> None:
                data = (f'<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error>'
                        f"<Code>{code}</Code><Message>{escape(message)}</Message></Error></Errors>"
                        f"<RequestID>{request_id}</RequestID></Response>").encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def reply(self, data: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/xml")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                action = dict(urllib.parse.parse_qsl(body.decode())).get("Action", "?")
                outer.requests.append(action)
                n = len(outer.requests)
                if outer.throttle_next > 0 or outer.throttle_actions.get(action, 0) > 0:
                    if outer.throttle_actions.get(action, 0) > 0:
                        outer.throttle_actions[action] -= 1
                    else:
                        outer.throttle_next -= 1
                    return self.error(503, "RequestLimitExceeded", "Request limit exceeded.",
                                      f"throttled-{n}")
                if outer.fail_next:
                    return self.error(*outer.fail_next.pop(0), f"failed-{n}")
                if outer.fail_actions.get(action):
                    return self.error(*outer.fail_actions[action].pop(0), f"failed-{n}")
                if action == "DescribeVolumeStatus":  # moto has none: every volume asked is ok
                    return self.reply(outer.volume_status(body, f"volume-status-{n}"))
                if outer.ignore_dry_run:
                    body = body.replace(b"&DryRun=true", b"")
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in {"host", "content-length"}}
                req = urllib.request.Request(outer.upstream + self.path, data=body, headers=headers,
                                             method="POST")
                try:
                    with urllib.request.urlopen(req) as resp:
                        code, data, rh = resp.status, resp.read(), resp.headers
                except urllib.error.HTTPError as e:
                    code, data, rh = e.code, e.read(), e.headers
                if action == "DescribeInstanceStatus" and outer.impaired:
                    data = outer.impair(data)
                self.send_response(code)
                for k, v in rh.items():
                    if k.lower() not in {"content-length", "transfer-encoding", "connection",
                                         "server", "date"}:
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def volume_status(self, body: bytes, request_id: str) -> bytes:
        """DescribeVolumeStatus as EC2 answers it for healthy volumes (``impaired_volumes``:
        those whose I/O EBS disabled)."""
        asked = [v for k, v in urllib.parse.parse_qsl(body.decode()) if k.startswith("VolumeId.")]
        rows = []
        for vid in asked:
            bad = vid in self.impaired_volumes
            rows.append(
                f"<item><volumeId>{vid}</volumeId><availabilityZone>us-east-1a</availabilityZone>"
                f"<volumeStatus><status>{'impaired' if bad else 'ok'}</status><details>"
                f"<item><name>io-enabled</name><status>{'failed' if bad else 'passed'}</status>"
                "</item></details></volumeStatus><actionsSet/><eventsSet/></item>")
        return ('<DescribeVolumeStatusResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
                f"<requestId>{request_id}</requestId><volumeStatusSet>{''.join(rows)}"
                "</volumeStatusSet></DescribeVolumeStatusResponse>").encode()

    def impair(self, body: bytes) -> bytes:
        """The instance status check of each impaired instance, failed as EC2 reports it."""
        text = body.decode()
        for iid in self.impaired:
            at = text.find(f"<instanceId>{iid}</instanceId>")
            start = text.find("<instanceStatus>", at) if at >= 0 else -1
            end = text.find("</instanceStatus>", start) if start >= 0 else -1
            if end > 0:
                part = text[start:end].replace("<status>ok</status>", "<status>impaired</status>")
                text = text[:start] + part.replace("<status>passed</status>",
                                                   "<status>failed</status>") + text[end:]
        return text.encode()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
