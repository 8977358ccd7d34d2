"""moto itself: its server on a socket, its application called in-process, and plain Query calls to it.

Split out of ``ec2`` (the behaviour proxy) because none of this knows the proxy's rules: it is how
the sandbox reaches moto underneath them. ``MotoServer`` serves moto over HTTP, ``MotoApp`` is
moto's application for the in-process transport, and ``MotoQuery`` arranges a scenario's
instances and volumes straight to moto, through whatever ``forward`` the proxy (``MotoFront``)
sends its requests on. ``SeedError`` is an EC2 refusal in botocore's shape, raised by every
client written without botocore here and in ``ec2_clients``.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol
from urllib.parse import urlencode
from xml.etree import ElementTree

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import BaseWSGIServer, make_server

from bot.sim import moto_speed
from bot.sim.iam import ADMIN_KEY
from bot.sim.net import POLL, no_delay


class MotoFront(Protocol):
    """What ``MotoQuery`` sends through: the proxy's region and its forward to moto (``ec2.Ec2Sim``)."""

    region: str

    def forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[
            int, dict[str, str], bytes]: ...


class _MotoHandler(MotoRequestHandler):
    def setup(self) -> None:
        super().setup()
        no_delay(self.connection)


class MotoServer:
    """moto's WSGI application on a werkzeug server in a thread (ThreadedMotoServer, minus Nagle)."""

    def __init__(self) -> None:
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> tuple[str, int]:
        app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=_MotoHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(POLL,), name="sim-moto",
                                        daemon=True)
        self._thread.start()
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


class MotoApp:
    """moto's server application, called in-process (``inprocess.wsgi``).

    moto's dispatcher finds a request's service anew on every request, listing and stat-ing the
    ~180 directories of its package; here the application it picks is kept per signing service
    (every request the sandbox forwards is signed). What else moto recomputes per request although
    no request changes it is memoised (``moto_speed``).
    """

    def __init__(self) -> None:
        moto_speed.install()  # until a sandbox starts over HTTP in this process
        self._dispatcher = DomainDispatcherApplication(create_backend_app)
        self._apps: dict[str, Any] = {}

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        auth = str(environ.get("HTTP_AUTHORIZATION") or "")
        scope = auth.split("Credential=", 1)[-1].split(",", 1)[0].split("/")
        service = scope[3] if "Credential=" in auth and len(scope) == 5 else ""
        app = self._apps.get(service) if service else None
        if app is None:
            app = self._dispatcher.get_application(environ)
            if service:
                self._apps[service] = app
        return app(environ, start_response)


class MotoQuery:
    """Arranging calls straight to moto in the EC2 Query API, without botocore.

    A scenario arranges its instances and spare volumes before anyone connects; building a botocore
    client for that costs a third of a second per sandbox. moto reads the region and service from
    the credential scope of the Authorization header and does not check the signature.
    """

    def __init__(self, sim: MotoFront) -> None:
        self.sim = sim

    def raw(self, action: str, params: dict[str, Any]) -> bytes:
        """moto's answer as it would reach a client (the status is the caller's to check)."""
        return self._send(action, params)[1]

    def _send(self, action: str, params: dict[str, Any]) -> tuple[int, bytes]:
        body = urlencode({"Action": action, "Version": "2016-11-15", **params}).encode()
        auth = (f"AWS4-HMAC-SHA256 Credential={ADMIN_KEY}/20260101/{self.sim.region}/ec2/"
                "aws4_request, SignedHeaders=host, Signature=0")
        status, _, data = self.sim.forward("POST", "/", {
            "Content-Type": "application/x-www-form-urlencoded; charset=utf-8",
            "Authorization": auth, "Host": f"ec2.{self.sim.region}.amazonaws.com"}, body)
        return status, data

    def call(self, action: str, params: dict[str, Any]) -> Any:
        status, data = self._send(action, params)
        root = ElementTree.fromstring(data)
        for el in root.iter():
            el.tag = el.tag.rsplit("}", 1)[-1]
        if status >= 300:
            code = root.findtext(".//Code") or "InternalError"
            raise SeedError(code, root.findtext(".//Message") or "")
        return root

    def run_instances(self, *, ImageId: str, MinCount: int, MaxCount: int, InstanceType: str,
                      Placement: dict[str, str], Tags: dict[str, str] | None = None,
                      Spot: bool = False) -> dict[str, Any]:
        params: dict[str, Any] = {"ImageId": ImageId, "MinCount": MinCount, "MaxCount": MaxCount,
                                  "InstanceType": InstanceType,
                                  "Placement.AvailabilityZone": Placement["AvailabilityZone"]}
        for n, (k, v) in enumerate(sorted((Tags or {}).items()), 1):
            params |= {"TagSpecification.1.ResourceType": "instance",
                       f"TagSpecification.1.Tag.{n}.Key": k, f"TagSpecification.1.Tag.{n}.Value": v}
        if Spot:
            params["InstanceMarketOptions.MarketType"] = "spot"
        root = self.call("RunInstances", params)
        items = root.find("instancesSet")
        assert items is not None
        return {"Instances": [{"InstanceId": i.findtext("instanceId"),
                               "AmiLaunchIndex": int(i.findtext("amiLaunchIndex") or 0)}
                              for i in items.findall("item")]}

    def create_volume(self, *, AvailabilityZone: str, Size: int) -> dict[str, Any]:
        root = self.call("CreateVolume", {"AvailabilityZone": AvailabilityZone, "Size": Size})
        return {"VolumeId": root.findtext("volumeId")}

    def attach_volume(self, *, VolumeId: str, InstanceId: str, Device: str) -> dict[str, Any]:
        self.call("AttachVolume", {"VolumeId": VolumeId, "InstanceId": InstanceId, "Device": Device})
        return {"VolumeId": VolumeId, "InstanceId": InstanceId, "State": "attached"}

    def delete_volume(self, *, VolumeId: str) -> dict[str, Any]:
        self.call("DeleteVolume", {"VolumeId": VolumeId})
        return {}


class SeedError(Exception):
    """An EC2 refusal in the shape botocore's ClientError has (``response["Error"]``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"An error occurred ({code}): {message}")
        self.response = {"Error": {"Code": code, "Message": message}}
