"""The API's WSGI app: a table of routes over the runtime facade, one per decision verb generated
from the verb table, every request but the OpenAPI document authenticated and rate-limited.

A request goes: body limit (413, from the headers, in JSON; ``limit_bodies`` of the one HTTP edge
behind it for chunked bodies) -> route (404, 405) -> authentication (401 with ``WWW-Authenticate:
Bearer``, recorded through the runtime's refusal hook) -> the caller's token bucket (429 with
``Retry-After``) -> the handler, whose typed errors become statuses: ``NotFound`` 404, ``Refused``
403 (recorded), ``Conflict`` 409, a body or argument that is not valid 400. Anything unexpected is
logged and answered 500 with a sentence, never a stack trace.

Decisions are answered with the engine's ``Outcome``: 200 when it took, 409 when the engine
refused it (already audited as ``command.refused``); the run is then carried on off the request
(``submit``: the server's pool), as Slack does after its answer.

An AI agent (``agents.py``: an identity ``agents.identities`` names, or a request marked as an
agent's) is the caller ``agent:NAME``: its POST requests are limited per agent too, its run
requests carry its reason and evidence (``request_origin``), and every decision route answers it
403, recorded (docs/agents.md).
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qs

from bot.config_agents import AgentsConfig
from bot.diagnose import Report, Scope
from bot.engine import commands as c
from bot.engine.state import RUN_TERMINAL
from bot.engine.verbs import BY_NAME, VerbError, finish, terminal_person
from bot.errors import NotFound, ParamError, PolicyError, RunbookError
from bot.frontends.api.agents import AgentCaller, AgentGate, request_origin
from bot.frontends.api.auth import Unauthenticated
from bot.frontends.api.clientaddr import client_address, networks
from bot.frontends.api.models import (
    DECISION_BODIES,
    DecisionAnswer,
    DiagnoseBody,
    StartBody,
    ValidateBody,
)
from bot.frontends.api.ratelimit import DEFAULT_BURST, DEFAULT_RATE, RateLimiter
from bot.frontends.api.records import AuditReader, Exporter
from bot.frontends.api.routing import (
    Answer,
    ApiError,
    Authenticator,
    Caller,
    Request,
    Route,
    int_arg,
    json_limits,
    line,
    run_id_arg,
    said,
    send,
    truthy,
)
from bot.frontends.http import HEALTH_PATH, HttpServer, WSGIApp, limit_bodies, server_cap
from bot.present.views import run_json, run_view
from bot.runbook.params_schema import params_json_schema
from bot.runtime.facade import Conflict, Origin, Refused, Runtime

log = logging.getLogger(__name__)

PREFIX = "/api/v1"
OPENAPI_PATH = PREFIX + "/openapi.json"
VALIDATE_PATH = PREFIX + "/runbooks/validate"
BODY_LIMIT = 16 * 1024  # a decision, a start, a diagnosis: a few hundred bytes
VALIDATE_LIMIT = 1024 * 1024  # a runbook's YAML text
BODY_LIMITS = {VALIDATE_PATH: VALIDATE_LIMIT, HEALTH_PATH: 0}
ORIGIN = Origin(frontend="api")
EXPORT_TYPES = {"md": "text/markdown; charset=utf-8", "html": "text/html; charset=utf-8",
                "json": "application/json"}
FOLLOW_POLL = 1.0  # seconds between reads of a followed run's events
FOLLOW_LIMIT = 300.0  # seconds a follow stream lasts at most (it holds a request thread); then
# the client follows again from the last seq it saw
Diagnoser = Callable[[Scope], Report]
Submit = Callable[..., Any]


class Api:
    """The routes and what they do; ``app`` is the WSGI callable."""

    def __init__(self, runtime: Runtime, auth: Authenticator, *, exporter: Exporter | None = None,
                 audit: AuditReader | None = None, diagnoser: Diagnoser | None = None,
                 limiter: RateLimiter | None = None, submit: Submit | None = None,
                 wait: Callable[[float], Any] | None = None,
                 follow_poll: float = FOLLOW_POLL, follow_limit: float = FOLLOW_LIMIT,
                 trusted_proxies: Sequence[str] = (), agents: AgentsConfig | None = None) -> None:
        self.runtime = runtime
        self.trusted = networks(trusted_proxies)
        self.auth = auth
        self.exporter = exporter
        self.audit = audit
        self.diagnoser = diagnoser
        self.limiter = limiter or RateLimiter()
        # failed authentications per address (an IPv6 /64 counts as one): past these a caller
        # gets 429 before its token is checked, so a flood of bad tokens costs the cluster no
        # TokenReviews and the refusals chain no rows beyond this rate
        self.failures = RateLimiter(clock=self.limiter.clock, rate=FAILURE_RATE,
                                    burst=FAILURE_BURST)
        self.agents = AgentGate(agents or AgentsConfig(), clock=self.limiter.clock)
        self._pool: ThreadPoolExecutor | None = None
        if submit is None:
            self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="api-drive")
            submit = self._pool.submit
        self.submit = submit
        self.wait = wait or threading.Event().wait
        self.follow_poll, self.follow_limit = follow_poll, follow_limit
        self.routes = self._routes()

    def close(self) -> None:
        """Finish the drives in hand (the server stopped taking requests first)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    # -- the route table ------------------------------------------------------------------------

    def _routes(self) -> list[Route]:
        p = PREFIX
        run = p + "/runs/{run_id}"
        routes = [
            Route("GET", OPENAPI_PATH, self.openapi, "this document (no authentication)",
                  auth=False),
            Route("GET", p + "/whoami", self.whoami, "who the API takes the caller for"),
            Route("GET", p + "/runbooks", self.runbooks, "the runbooks that can be run"),
            Route("POST", VALIDATE_PATH, self.validate, "check a runbook's text", ValidateBody),
            Route("GET", p + "/runbooks/{name}", self.runbook, "one runbook"),
            Route("POST", p + "/runs", self.start, "start a run (requester: the caller)",
                  StartBody, status=201),
            Route("GET", p + "/runs", self.runs, "the newest runs first", query=(
                ("active", "boolean", "only runs not finished"),
                ("limit", "integer", "at most this many (1-500, default 20)"))),
            Route("GET", run, self.show, "a run, step by step"),
            Route("GET", run + "/events", self.events, "the run's audit events, one JSON object "
                  "a line", query=(("after", "integer", "only events after this seq"),
                                   ("follow", "boolean", "keep the stream open until the run "
                                    "ends")), content="application/x-ndjson"),
            Route("GET", run + "/transcript", self.transcript, "the run's transcript", query=(
                ("format", "string", "md (default), html or json"),),
                content="text/markdown"),
            Route("GET", run + "/audit", self.verify, "verify the run's audit chain"),
            Route("GET", run + "/audit/head", self.head, "the run's audit head, to publish"),
            Route("POST", p + "/diagnose", self.diagnose, "scan a cluster, read-only",
                  DiagnoseBody),
        ]
        for name, model in DECISION_BODIES.items():
            routes.append(Route("POST", f"{run}/{name}", self._decider(name),
                                BY_NAME[name].help, model, answer=DecisionAnswer))
        return routes

    # -- WSGI -----------------------------------------------------------------------------------

    def app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        try:
            answer = self._answer(environ)
        except ApiError as e:
            answer = Answer(e.status, {"error": e.code, "message": e.message}, headers=e.headers)
        except Exception:
            log.exception("the API failed on %s %s", environ.get("REQUEST_METHOD"),
                          environ.get("PATH_INFO"))
            answer = Answer(500, {"error": "internal", "message": "the bot failed to answer "
                                  "this request; its log says why"})
        return send(answer, start_response)

    def _answer(self, environ: dict[str, Any]) -> Answer:
        method = str(environ.get("REQUEST_METHOD") or "GET").upper()
        path = str(environ.get("PATH_INFO") or "/")
        if path == HEALTH_PATH and method in ("GET", "HEAD"):
            return Answer(200, {"ok": True})
        route, args = self._route(method, path)
        headers = {k[5:].replace("_", "-").lower(): str(v) for k, v in environ.items()
                   if k.startswith("HTTP_")}
        if environ.get("CONTENT_TYPE"):
            headers["content-type"] = str(environ["CONTENT_TYPE"])
        query = {k: v[-1] for k, v in parse_qs(str(environ.get("QUERY_STRING") or "")).items()}
        length = int(environ.get("CONTENT_LENGTH") or 0)  # checked by the body limits
        body = environ["wsgi.input"].read(length) if length and method == "POST" else b""
        req = Request(method=method, path=path, args=args, query=query, body=body,
                      headers=headers,
                      remote=client_address(str(environ.get("REMOTE_ADDR") or "-"),
                                            headers.get("x-forwarded-for"), self.trusted))
        if route.auth:
            wait = self.failures.waiting(_failure_key(req.remote))
            if wait:
                raise ApiError(429, "rate_limited", "too many failed authentications from this "
                               "address; try again in a moment",
                               [("Retry-After", self.limiter.retry_after(wait))])
            req.caller = self.agents.caller(self._authenticate(req), req.headers)
            wait = self.limiter.take("id:" + req.caller.identity)
            if wait:
                raise ApiError(429, "rate_limited", f"too many requests from "
                               f"{req.caller.identity}; try again in a moment",
                               [("Retry-After", self.limiter.retry_after(wait))])
            if isinstance(req.caller, AgentCaller) and method == "POST":  # what acts or scans
                self._agent_rate(req, req.caller)
        return self._dispatch(route, req)

    def _dispatch(self, route: Route, req: Request) -> Answer:
        """The handler's answer; the runtime's typed errors as statuses."""
        try:
            return route.handler(req)
        except Refused as e:
            self._record(req, e.reason)
            raise ApiError(403, "forbidden", e.reason) from None
        except (NotFound, KeyError) as e:
            raise ApiError(404, "not_found", said(e)) from None
        except Conflict as e:
            raise ApiError(409, "conflict", f"{e} (nothing was recorded; try again)") from None
        except (VerbError, ParamError) as e:
            raise ApiError(400, "bad_request", str(e)) from None
        except RunbookError as e:
            raise ApiError(400, "invalid_runbook", str(e)) from None
        except PolicyError as e:
            self._record(req, str(e))
            raise ApiError(403, "forbidden", str(e)) from None

    def _route(self, method: str, path: str) -> tuple[Route, dict[str, str]]:
        allowed = []
        for route in self.routes:
            m = route.pattern.match(path)
            if m is None:
                continue
            if route.method == method:
                return route, m.groupdict()
            allowed.append(route.method)
        if allowed:
            raise ApiError(405, "method_not_allowed", f"{path} takes {', '.join(allowed)}",
                           [("Allow", ", ".join(allowed))])
        raise ApiError(404, "not_found", f"no such endpoint: {path} (see {OPENAPI_PATH})")

    def _authenticate(self, req: Request) -> Caller:
        try:
            return self.auth.authenticate(req.headers)
        except Unauthenticated as e:
            reason = e.reason
            if not self.failures.take(_failure_key(req.remote)):  # bounded: 429 past it
                self._refusal(f"anonymous@{req.remote}", f"api {req.method} {req.path}", reason,
                              {"frontend": "api", "remote": req.remote})
            log.info("refused an API request to %s from %s: %s", req.path, req.remote, reason)
            raise ApiError(401, "unauthenticated", reason,
                           [("WWW-Authenticate", 'Bearer realm="runbook-bot"')]) from None

    def _agent_rate(self, req: Request, caller: AgentCaller) -> None:
        """An agent past its own rate (``agents.rate_limit``): 429, the flood recorded."""
        wait, record = self.agents.flooded(caller)
        if not wait:
            return
        cfg = self.agents.config
        why = (f"{caller.identity} is sending requests faster than agents may "
               f"({cfg.rate_limit:g} a second, in bursts of {cfg.rate_burst}: agents.rate_limit); "
               "refused, not queued: slow down")
        if record:
            self._record(req, why)
        raise ApiError(429, "rate_limited", why,
                       [("Retry-After", self.limiter.retry_after(wait))])

    def _record(self, req: Request, reason: str) -> None:
        actor = req.caller.identity if req.caller is not None else f"anonymous@{req.remote}"
        via = req.via if req.caller is not None else {"frontend": "api"}
        self._refusal(actor, f"api {req.method} {req.path}", reason, via)

    def _refusal(self, actor: str, what: str, reason: str, via: Mapping[str, Any]) -> None:
        """Recorded by the runtime with who, what and why (it never raises)."""
        self.runtime.record_refusal(actor, what, reason, via)

    # -- handlers -------------------------------------------------------------------------------

    def openapi(self, req: Request) -> Answer:
        from bot.frontends.api.openapi import document

        return Answer(200, document(self.routes))

    def whoami(self, req: Request) -> Answer:
        caller = req.caller
        assert caller is not None
        return Answer(200, {"identity": caller.identity, "groups": list(caller.groups),
                            "method": caller.method})

    def runbooks(self, req: Request) -> Answer:
        out = []
        for name in self.runtime.runbook_names():
            try:
                rb = self.runtime.runbook(name)
            except RunbookError as e:
                out.append({"name": name, "valid": False, "error": str(e)})
                continue
            out.append({"name": name, "valid": True, "title": rb.metadata.title,
                        "description": rb.metadata.description, "steps": len(rb.spec.steps),
                        "params": sorted(rb.spec.params)})
        return Answer(200, {"runbooks": out})

    def runbook(self, req: Request) -> Answer:
        rb = self.runtime.runbook(req.args["name"])
        return Answer(200, {"runbook": rb.model_dump(mode="json", by_alias=True,
                                                     exclude_defaults=True),
                            "params_schema": params_json_schema(rb),
                            "text": self.runtime.runbook_text(rb.name),
                            "steps": self.runtime.step_needs(rb.name)})

    def validate(self, req: Request) -> Answer:
        body: ValidateBody = req.json(ValidateBody)
        try:
            rb = self.runtime.runbook_source.parse(body.text, file="<request>")
        except RunbookError as e:
            return Answer(200, {"valid": False, "problems": [str(p) for p in e.problems]})
        return Answer(200, {"valid": True, "name": rb.name, "steps": len(rb.spec.steps),
                            "problems": []})

    def start(self, req: Request) -> Answer:
        body: StartBody = req.json(StartBody)
        verb = BY_NAME["run"]
        assert verb.build is not None
        via = req.via
        if isinstance(req.caller, AgentCaller):
            via = request_origin(req.caller, reason=body.reason, evidence=body.evidence,
                                 dry_run=body.dry_run, redact=self.runtime.redact_text)
        cmd = verb.build({"name": body.runbook, "params": body.params, "dry_run": body.dry_run,
                          "incident": body.incident}, req.actor, via)
        assert isinstance(cmd, c.StartRun)
        try:
            state = self.runtime.start(cmd, origin=ORIGIN)
        except Refused as e:  # the runtime recorded it: who may start what is its rule
            raise ApiError(403, "forbidden", e.reason) from None
        self.submit(self.runtime.drive, state.run_id)
        return Answer(201, {"run": run_json(run_view(state))})

    def runs(self, req: Request) -> Answer:
        active = True if truthy(req.query.get("active")) else None
        limit = int_arg(req.query, "limit", 20, low=1, high=500)
        states = self.runtime.runs(active=active, limit=limit)
        return Answer(200, {"runs": [run_json(run_view(s)) for s in states]})

    def _show(self, req: Request) -> Any:
        return self.runtime.show(run_id_arg(req.args["run_id"]), origin=ORIGIN, children=True)

    def show(self, req: Request) -> Answer:
        detail = self._show(req)
        runbook = self.runtime.facts.runbook(detail.state)
        return Answer(200, {"run": run_json(run_view(detail.state, runbook,
                                                     children=detail.children))})

    def events(self, req: Request) -> Answer:
        run_id = self._show(req).state.run_id
        after = int_arg(req.query, "after", 0, low=0, high=10**9)
        follow = truthy(req.query.get("follow"))
        first = list(self.runtime.follow(run_id, after=after))  # NotFound before the 200
        return Answer(200, raw=self._stream(run_id, first, after, follow),
                      content_type="application/x-ndjson")

    def _stream(self, run_id: str, first: list[Any], after: int,
                follow: bool) -> Iterator[bytes]:
        events, waited = first, 0.0
        while True:
            for ev in events:
                after = ev.seq
                yield line({"seq": ev.seq, "ts": ev.ts, "actor": ev.actor, "type": ev.type,
                             "payload": dict(ev.payload), "hash": ev.hash})
            if not follow:
                return
            if not events:
                if self.runtime.show(run_id).state.status in RUN_TERMINAL:
                    events = list(self.runtime.follow(run_id, after=after))
                    if not events:
                        yield line({"end": True, "run_id": run_id, "after": after})
                        return
                    continue
                if waited >= self.follow_limit:
                    yield line({"end": False, "run_id": run_id, "after": after,
                                 "message": "the stream is over; follow again from after"})
                    return
                yield line({"heartbeat": True, "after": after})
                self.wait(self.follow_poll)
                waited += self.follow_poll
            events = list(self.runtime.follow(run_id, after=after))

    def transcript(self, req: Request) -> Answer:
        fmt = (req.query.get("format") or "md").lower()
        if fmt not in EXPORT_TYPES:
            raise ApiError(400, "bad_request", f"format is one of md, html, json; got {fmt[:20]!r}")
        run_id = self._show(req).state.run_id
        if self.exporter is None:
            raise NotFound("this bot exports no transcripts here")
        _, data = self.exporter(run_id, fmt)
        return Answer(200, raw=[data], content_type=EXPORT_TYPES[fmt],
                      headers=[("Content-Length", str(len(data)))])

    def verify(self, req: Request) -> Answer:
        run_id = self._show(req).state.run_id
        if self.audit is None:
            raise NotFound("this bot cannot verify audit chains here")
        return Answer(200, self.audit.verify(run_id))

    def head(self, req: Request) -> Answer:
        run_id = self._show(req).state.run_id
        if self.audit is None:
            raise NotFound("this bot cannot read audit heads here")
        return Answer(200, self.audit.head(run_id))

    def diagnose(self, req: Request) -> Answer:
        body: DiagnoseBody = req.json(DiagnoseBody)
        if body.pod and body.node:
            raise ApiError(400, "bad_request", "diagnose looks at a pod or a node, not both")
        if self.diagnoser is None:
            raise NotFound("this bot scans no cluster here")
        report = self.diagnoser(Scope(cluster=body.cluster, node=body.node, pod=body.pod,
                                      namespace=body.namespace))
        return Answer(200, report.to_json())

    def _decider(self, name: str) -> Callable[[Request], Answer]:
        verb = BY_NAME[name]

        def decide(req: Request) -> Answer:
            if isinstance(req.caller, AgentCaller):
                why = (f"{req.actor} is an AI agent: agents request runs and people decide "
                       f"them, so an agent cannot {name} (docs/agents.md)")
                self._record(req, why)
                raise ApiError(403, "forbidden", why)
            model = DECISION_BODIES[name]
            body = req.json(model).model_dump(exclude_none=True)
            run_id = run_id_arg(req.args["run_id"])  # a path that names no run: 404
            values = finish(verb, {**body, "run_id": run_id}, terminal_person)
            assert verb.build is not None
            cmd = verb.build(values, req.actor, req.via)
            assert not isinstance(cmd, c.StartRun)
            outcome = self.runtime.decide(cmd, origin=ORIGIN, drive=False)
            if outcome.ok:
                self.submit(self.runtime.drive, outcome.run_id or run_id)
            answer = DecisionAnswer(ok=outcome.ok, message=outcome.message,
                                    run_id=outcome.run_id or run_id, step=outcome.step)
            if outcome.ok:
                return Answer(200, answer.model_dump())
            # the engine refused it (and audited it): a decision answer that is also an error
            return Answer(409, {"error": "refused", **answer.model_dump()})

        decide.__name__ = f"decide_{name.replace('-', '_')}"
        return decide


FAILURE_RATE, FAILURE_BURST = 1.0, 10  # failed authentications a second per address, burst


def _failure_key(remote: str) -> str:
    """Whose failures count together: an IPv4 address, or an IPv6 /64 (one host's share)."""
    try:
        ip = ipaddress.ip_address(remote)
    except ValueError:
        return "fail:" + remote
    if ip.version == 6:
        return "fail:" + str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return "fail:" + str(ip)


def api_app(runtime: Runtime, auth: Authenticator, *, exporter: Exporter | None = None,
            audit: AuditReader | None = None, diagnoser: Diagnoser | None = None,
            clock: Callable[[], float] | None = None, rate: float | None = None,
            burst: int | None = None, submit: Submit | None = None,
            wait: Callable[[float], Any] | None = None,
            trusted_proxies: Sequence[str] = (), agents: AgentsConfig | None = None) -> ApiApp:
    """The API as a WSGI callable, behind its body limits. ``clock`` (monotonic seconds) drives
    the rate limit (``rate`` requests a second per identity, in bursts of ``burst``); ``submit``
    carries runs on after a start or a decision (default: a small pool); ``wait`` is how a
    follow stream waits between reads; ``trusted_proxies`` (CIDRs) are the proxies whose
    ``X-Forwarded-For`` names the caller's address."""
    limiter = RateLimiter(clock=clock, rate=rate or DEFAULT_RATE, burst=burst or DEFAULT_BURST)
    api = Api(runtime, auth, exporter=exporter, audit=audit, diagnoser=diagnoser,
              limiter=limiter, submit=submit, wait=wait, trusted_proxies=trusted_proxies,
              agents=agents)
    return ApiApp(api)


class ApiApp:
    """The WSGI callable ``api_app`` builds; ``api`` is its route table and handlers."""

    def __init__(self, api: Api) -> None:
        self.api = api
        inner = limit_bodies(api.app, limits=BODY_LIMITS, default=BODY_LIMIT)
        self._wsgi = json_limits(inner, limits=BODY_LIMITS, default=BODY_LIMIT)

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        return self._wsgi(environ, start_response)

    @property
    def routes(self) -> list[Route]:
        return self.api.routes

    def close(self) -> None:
        self.api.close()


def api_listener(app: WSGIApp, *, host: str, port: int, threads: int = 8) -> HttpServer:
    """The API's listener on the api port (``bot.frontends.http``; not yet serving)."""
    return HttpServer(app, name="api", host=host, port=port, threads=threads,
                      max_body=server_cap(BODY_LIMITS, BODY_LIMIT))

