"""The HTTP API as a WSGI app: a real runtime over SQLite and fake actions, a fake authenticator
(a bearer token per person), and no sleeps (the rate limit's clock and the follow stream's wait
are injected; runs are driven on the request's thread)."""

from __future__ import annotations

import io
import json
import threading
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest

from bot.config import PolicyConfig, StartRule
from bot.engine import commands as c
from bot.engine.ports import ManualClock
from bot.engine.verbs import decisions
from bot.frontends.api import api_app, api_listener
from bot.frontends.api.auth import Unauthenticated
from bot.frontends.api.records import StoreAudit, store_exporter
from bot.runbook.source import TextSource
from bot.runtime.facade import Refused, Runtime
from bot.runtime.runner import Runner
from bot.store.audit import Keyring
from bot.store.db import Database
from tests.fakes.engine_harness import runbook
from tests.fakes.engine_world import FakeCatalog, World, make_registry

POLICY = PolicyConfig(groups={"sre": ("token:dave", "token:erin")})
CHANGE = runbook("change-thing", """
- id: read
  title: "Read {{ params.name }}"
  action: fake.read
  with: {name: "{{ params.name }}"}
- id: change
  title: "Set {{ params.name }}"
  action: fake.set
  with: {name: "{{ params.name }}", value: "on"}
  approval: {required: true}
""", params="""
name: {type: string, required: true, pattern: "[a-z0-9-]+"}
""", approvals="""
groups: [sre]
""")
READ = runbook("read-thing", """
- id: read
  title: Read it
  action: fake.read
  with: {name: x}
""")
PEOPLE = {"alice": "token:alice", "dave": "token:dave", "erin": "token:erin"}


@dataclass(frozen=True)
class Caller:
    identity: str
    groups: tuple[str, ...] = ()
    method: str = "token"


class FakeAuth:
    """A bearer token per person: the token is the person's name."""

    def authenticate(self, headers: Mapping[str, str]) -> Caller:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or token not in PEOPLE:
            raise Unauthenticated("no valid bearer token")
        return Caller(PEOPLE[token])


class Names(TextSource):
    def names(self) -> list[str]:
        return sorted(self._texts)


class Harness:
    def __init__(self, tmp: Path, *, policy: PolicyConfig = POLICY, **kw: Any) -> None:
        reg = make_registry(World(tmp / "world.json"))
        self.db = Database(f"sqlite:///{tmp / 'state.db'}", audit_key="k")
        self.runner = Runner(store=self.db, catalog=FakeCatalog(reg),
                             runbooks=Names({"change-thing": CHANGE, "read-thing": READ,
                                             "broken": "kind: Nothing\n"}, catalog=reg),
                             policy=policy, clock=ManualClock(), lease_wait=0.0)
        self.runtime = Runtime(self.runner, history=self.db)
        self.refusals: list[tuple[str, str, str, dict[str, Any]]] = []
        self.runtime.record_refusal = (  # type: ignore[method-assign]
            lambda actor, what, reason, via: self.refusals.append((actor, what, reason, dict(via))))
        self.now = [0.0]
        self.waits: list[Callable[[], None]] = []
        self.scans: list[Any] = []
        kw.setdefault("exporter", store_exporter(self.db))
        kw.setdefault("audit", StoreAudit(self.db, Keyring(b"k")))
        kw.setdefault("diagnoser", self._scan)
        self.app = api_app(self.runtime, FakeAuth(), clock=lambda: self.now[0],
                           submit=lambda fn, *a: fn(*a), wait=self._wait, **kw)

    def _scan(self, scope: Any) -> Any:
        self.scans.append(scope)
        return SimpleNamespace(to_json=lambda: {"cluster": scope.cluster, "findings": []})

    def _wait(self, seconds: float) -> None:
        if self.waits:
            self.waits.pop(0)()

    def call(self, method: str, path: str, body: Any = None, *, who: str | None = "alice",
             raw: bytes | None = None, headers: Mapping[str, str] | None = None
             ) -> tuple[int, dict[str, str], bytes]:
        data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
        path, _, query = path.partition("?")
        environ: dict[str, Any] = {"REQUEST_METHOD": method, "PATH_INFO": path,
                                   "QUERY_STRING": query, "CONTENT_LENGTH": str(len(data)),
                                   "wsgi.input": io.BytesIO(data), "REMOTE_ADDR": "10.0.0.9"}
        setup_testing_defaults(environ)
        if who is not None:
            environ["HTTP_AUTHORIZATION"] = f"Bearer {who}"
        for k, v in (headers or {}).items():
            environ[k] = v
        seen: dict[str, Any] = {}

        def start_response(status: str, hdrs: list[tuple[str, str]]) -> None:
            seen["status"], seen["headers"] = int(status.split()[0]), dict(hdrs)

        out = b"".join(self.app(environ, start_response))
        return seen["status"], seen["headers"], out

    def json(self, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        status, hdrs, out = self.call(method, path, body, **kw)
        assert hdrs["Content-Type"] == "application/json"
        doc = json.loads(out)
        if status >= 400:  # every error: a code and a sentence, never a stack trace
            assert {"error", "message"} <= set(doc) and "Traceback" not in out.decode()
            assert set(doc) == {"error", "message"} or doc["error"] == "refused"
        return status, doc

    def start(self, who: str = "alice", **body: Any) -> str:
        status, doc = self.json("POST", "/api/v1/runs", {"runbook": "change-thing",
                                                          "params": {"name": "web"}, **body},
                                who=who)
        assert status == 201, doc
        return str(doc["run"]["run_id"])

    def event_types(self, run_id: str) -> list[str]:
        return [e.type for e in self.db.events(run_id)]


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path)
    yield h
    h.app.close()
    h.db.close()


def test_whoami_runbooks_and_validate(api: Harness) -> None:
    assert api.json("GET", "/api/v1/whoami") == (200, {"identity": "token:alice", "groups": [],
                                                       "method": "token"})
    status, doc = api.json("GET", "/api/v1/runbooks")
    by_name = {r["name"]: r for r in doc["runbooks"]}
    assert status == 200 and by_name["change-thing"]["params"] == ["name"]
    assert by_name["broken"]["valid"] is False
    status, doc = api.json("GET", "/api/v1/runbooks/read-thing")
    assert status == 200 and doc["runbook"]["metadata"]["name"] == "read-thing"
    assert api.json("GET", "/api/v1/runbooks/nope")[0] == 404
    status, doc = api.json("POST", "/api/v1/runbooks/validate", {"text": READ})
    assert (status, doc["valid"], doc["name"]) == (200, True, "read-thing")
    status, doc = api.json("POST", "/api/v1/runbooks/validate", {"text": READ.replace(
        "fake.read", "fake.nope")})
    assert status == 200 and not doc["valid"] and "fake.nope" in " ".join(doc["problems"])


def test_a_run_started_decided_and_read_through_the_api(api: Harness) -> None:
    run_id = api.start(incident="INC-7")
    status, doc = api.json("GET", f"/api/v1/runs/{run_id}")
    run = doc["run"]
    assert (status, run["requester"], run["status"], run["waiting_on"]) == (
        200, "token:alice", "awaiting_approval", "change")
    assert run["incident"] == "INC-7"
    assert api.runner.store.load(run_id).origin == {"frontend": "api", "method": "token"}
    status, doc = api.json("GET", "/api/v1/runs?active=true&limit=5")
    assert status == 200 and [r["run_id"] for r in doc["runs"]] == [run_id]
    # the requester may not approve her own step: the engine refuses, audited, 409
    status, doc = api.json("POST", f"/api/v1/runs/{run_id}/approve", {}, who="alice")
    assert status == 409 and doc["ok"] is False and doc["run_id"] == run_id
    status, doc = api.json("POST", f"/api/v1/runs/{run_id}/approve", {"step": "change"},
                           who="dave")
    assert status == 200 and doc["ok"] is True
    assert api.runner.store.load(run_id).status == "succeeded"  # driven on after the answer
    # a replayed approve changes nothing: not ok, and audited as command.refused
    before = api.event_types(run_id).count("command.refused")
    status, doc = api.json("POST", f"/api/v1/runs/{run_id}/approve", {"step": "change"},
                           who="dave")
    assert status == 409 and doc["ok"] is False
    assert api.event_types(run_id).count("command.refused") == before + 1
    assert api.runner.store.load(run_id).status == "succeeded"
    events = api.db.events(run_id)
    assert [e.actor for e in events if e.type == "approval.granted"] == ["token:dave"]
    asked = [e for e in events if e.type == "command.approve"]
    assert [e.actor for e in asked] == ["token:alice", "token:dave", "token:dave"]
    assert {str(e.payload.get("via")) for e in asked} == {"{'frontend': 'api', 'method': 'token'}"}


def test_decision_bodies_are_checked_by_the_verb_table(api: Harness) -> None:
    run_id = api.start()
    status, doc = api.json("POST", f"/api/v1/runs/{run_id}/reject", {}, who="dave")
    assert status == 400 and "reason" in doc["message"]
    status, doc = api.json("POST", f"/api/v1/runs/{run_id}/abort", {"reason": "x", "nope": 1})
    assert status == 400 and "nope" in doc["message"]
    status, doc = api.json("POST", f"/api/v1/runs/{run_id}/abort", {"reason": "wrong host"})
    assert status == 200 and api.runner.store.load(run_id).status == "aborted"
    assert api.json("POST", "/api/v1/runs/rb-33333/approve", {}, who="dave")[0] == 404
    assert api.json("POST", "/api/v1/runs/not-a-run/approve", {}, who="dave")[0] == 404
    assert api.json("GET", f"/api/v1/runs/{run_id}/approve")[0] == 405
    assert api.json("POST", "/api/v1/runs", {"runbook": "change-thing", "params": {}})[0] == 400


def test_401_without_a_token_is_recorded_and_names_the_scheme(api: Harness) -> None:
    status, hdrs, out = api.call("GET", "/api/v1/runs", who=None)
    assert status == 401 and hdrs["WWW-Authenticate"].startswith("Bearer")
    assert json.loads(out)["error"] == "unauthenticated"
    assert api.json("GET", "/api/v1/whoami", who="mallory")[0] == 401
    assert [(r[0], r[1]) for r in api.refusals] == [
        ("anonymous@10.0.0.9", "api GET /api/v1/runs"),
        ("anonymous@10.0.0.9", "api GET /api/v1/whoami")]
    # the OpenAPI document needs no token
    assert api.call("GET", "/api/v1/openapi.json", who=None)[0] == 200


def test_403_when_the_runtime_refuses_a_start_is_recorded_once(tmp_path: Path) -> None:
    api = Harness(tmp_path, policy=replace(POLICY, start={"*": StartRule(groups=("sre",))}))
    status, doc = api.json("POST", "/api/v1/runs", {"runbook": "change-thing",
                                                    "params": {"name": "web"}})
    assert (status, doc["error"]) == (403, "forbidden") and "sre" in doc["message"]
    [(actor, what, reason, via)] = api.refusals  # by the runtime, which decides who may start
    assert (actor, what, reason, via["frontend"]) == ("token:alice", "start change-thing",
                                                      doc["message"], "api")
    assert api.runner.store.runs(limit=5) == []
    assert api.start(who="dave")  # a member of sre may
    api.app.close()
    api.db.close()


def test_403_from_the_runtime_elsewhere_is_recorded_by_the_api(api: Harness,
                                                              monkeypatch: Any) -> None:
    run_id = api.start()

    def refuse(*_: Any, **__: Any) -> Any:
        raise Refused("not from here")

    monkeypatch.setattr(api.runtime, "show", refuse)
    status, doc = api.json("GET", f"/api/v1/runs/{run_id}")
    assert (status, doc) == (403, {"error": "forbidden", "message": "not from here"})
    assert api.refusals == [("token:alice", f"api GET /api/v1/runs/{run_id}", "not from here",
                             {"frontend": "api", "method": "token"})]


def test_413_from_the_headers_and_429_over_the_rate(tmp_path: Path) -> None:
    api = Harness(tmp_path, rate=1.0, burst=2)
    status, doc = api.json("POST", "/api/v1/runs", raw=b"x" * 17_000)
    assert (status, doc["error"]) == (413, "too_large")
    # the 413 spent nothing; two requests of the burst, then 429 until a token comes back
    assert api.json("GET", "/api/v1/whoami")[0] == 200
    assert api.json("GET", "/api/v1/whoami")[0] == 200
    status, hdrs, out = api.call("GET", "/api/v1/whoami")
    assert status == 429 and hdrs["Retry-After"] == "1"
    assert json.loads(out)["error"] == "rate_limited"
    assert api.json("GET", "/api/v1/whoami", who="dave")[0] == 200  # per identity
    api.now[0] += 1.0
    assert api.json("GET", "/api/v1/whoami")[0] == 200
    api.app.close()
    api.db.close()


def test_follow_streams_events_until_the_run_ends(api: Harness) -> None:
    run_id = api.start()
    api.waits.append(lambda: api.runtime.decide(c.Approve(run_id=run_id, actor="token:dave")))
    status, hdrs, out = api.call("GET", f"/api/v1/runs/{run_id}/events?follow=true")
    assert status == 200 and hdrs["Content-Type"] == "application/x-ndjson"
    lines = [json.loads(x) for x in out.decode().splitlines()]
    assert lines[-1] == {"end": True, "run_id": run_id, "after": lines[-2]["seq"]}
    assert any(x.get("heartbeat") for x in lines)
    types = [x["type"] for x in lines if "type" in x]
    assert types[0] == "run.created" and types[-1] == "run.finished"
    assert [x["seq"] for x in lines if "seq" in x] == list(range(1, len(types) + 1))
    # without follow: what there is after a seq, and the stream ends
    status, _, out = api.call("GET", f"/api/v1/runs/{run_id}/events?after=2")
    assert status == 200 and json.loads(out.splitlines()[0])["seq"] == 3
    assert api.json("GET", "/api/v1/runs/rb-33333/events")[0] == 404


def test_a_follow_stream_of_a_run_that_waits_ends_after_its_limit(api: Harness) -> None:
    run_id = api.start()
    api.app.api.follow_limit = 3.0  # three polls of a second, on the injected wait
    status, _, out = api.call("GET", f"/api/v1/runs/{run_id}/events?follow=1&after=7")
    lines = [json.loads(x) for x in out.decode().splitlines()]
    assert status == 200 and [x.get("heartbeat") for x in lines[:3]] == [True, True, True]
    assert lines[-1]["end"] is False and lines[-1]["after"] == 7


def test_transcript_audit_head_and_diagnose(api: Harness) -> None:
    run_id = api.start()
    status, hdrs, out = api.call("GET", f"/api/v1/runs/{run_id}/transcript?format=md")
    assert status == 200 and hdrs["Content-Type"].startswith("text/markdown")
    assert run_id in out.decode()
    status, hdrs, out = api.call("GET", f"/api/v1/runs/{run_id}/transcript?format=json")
    assert status == 200 and json.loads(out)["run"]["run_id"] == run_id
    assert api.json("GET", f"/api/v1/runs/{run_id}/transcript?format=pdf")[0] == 400
    status, doc = api.json("GET", f"/api/v1/runs/{run_id}/audit")
    assert status == 200 and (doc["verdict"], doc["exit_status"]) == ("intact", 0)
    assert doc["message"].startswith(f"{run_id}: audit chain intact: ")
    status, doc = api.json("GET", f"/api/v1/runs/{run_id}/audit/head")
    assert status == 200 and doc["seq"] == len(api.event_types(run_id))
    assert doc["line"].startswith(f"{run_id} audit head {doc['seq']}:")
    status, doc = api.json("POST", "/api/v1/diagnose", {"cluster": "prod", "node": "n-1"})
    assert status == 200 and doc == {"cluster": "prod", "findings": []}
    assert api.scans[0].node == "n-1"
    assert api.json("POST", "/api/v1/diagnose", {"pod": "p", "node": "n"})[0] == 400


def test_a_failing_handler_answers_500_without_a_trace(tmp_path: Path) -> None:
    def broken(run_id: str, fmt: str) -> tuple[str, bytes]:
        raise RuntimeError("secret internals")

    api = Harness(tmp_path, exporter=broken)
    run_id = api.start()
    status, doc = api.json("GET", f"/api/v1/runs/{run_id}/transcript")
    assert status == 500 and "secret" not in doc["message"]
    api.app.close()
    api.db.close()


def test_openapi_covers_every_route_and_every_decision_verb(api: Harness) -> None:
    status, doc = api.json("GET", "/api/v1/openapi.json", who=None)
    assert status == 200 and doc["openapi"].startswith("3.1")
    for route in api.app.routes:
        op = doc["paths"][route.path][route.method.lower()]
        assert op["summary"] == route.summary
        if route.body is not None:
            ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            assert ref.rsplit("/", 1)[1] in doc["components"]["schemas"]
    for verb in decisions():
        if verb.name != "run":
            path = doc["paths"][f"/api/v1/runs/{{run_id}}/{verb.name}"]["post"]
            schema = doc["components"]["schemas"][path["requestBody"]["content"][
                "application/json"]["schema"]["$ref"].rsplit("/", 1)[1]]
            assert set(schema["properties"]) == {a.name for a in verb.args} - {"run_id"}


def test_served_on_the_http_edge(api: Harness) -> None:
    server = api_listener(api.app, host="127.0.0.1", port=0, threads=2)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        req = urllib.request.Request(f"http://127.0.0.1:{server.effective_port}/api/v1/whoami",
                                     headers={"Authorization": "Bearer dave"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert json.loads(r.read()) == {"identity": "token:dave", "groups": [],
                                            "method": "token"}
    finally:
        server.stop()
        thread.join(timeout=10)
