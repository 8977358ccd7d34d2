"""The MCP server, on the official ``mcp`` SDK: the tools of ``tools.py`` and two resources, with
JSON schemas the SDK generates from their typed signatures (pydantic) and honest annotations.

- ``list_runbooks`` (read-only): the runbooks, their params (a JSON schema generated from the
  runbook's own ``spec.params``), triggers, and which steps wait for people and why;
- ``diagnose`` (read-only, open world): one read-only scan of a cluster (``runbook-bot diagnose``);
- ``dry_run`` (read-only): plan every step of a runbook, change nothing: the per-step verdict;
- ``request_run`` (destructive, open world): start a run as the agent's request; its changes wait
  for people;
- ``run_status``, ``follow_run`` (read-only): a run step by step; its audit events after a seq;
- ``transcript`` (read-only): the run's transcript (md, html, json).

Resources: ``runbook://{name}`` (the runbook's YAML text) and ``transcript://{run_id}`` (a
finished run's transcript, markdown).

``connect`` gives the tools their way to the API for one request: in the bot's process, the API
app called with the agent's own ``Authorization`` header (streamable HTTP, ``http_app``); in an
agent host, a remote API and its token (stdio, ``serve_stdio``). A refusal by the API comes back
as a tool error whose text is the API's sentence, so the agent reads why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from bot import __version__
from bot.frontends.http import HEALTH_PATH, ASGIApp
from bot.frontends.mcp.apiport import ApiFailure, ApiPort
from bot.frontends.mcp.tools import Tools

MCP_PATH = "/mcp"
BODY_LIMIT = 64 * 1024  # one JSON-RPC message: a request's params and evidence
INSTRUCTIONS = (
    "runbook-bot runs named, reviewed incident runbooks against Kubernetes and AWS. You may read "
    "(list_runbooks, diagnose, dry_run, run_status, follow_run, transcript) and request a run "
    "(request_run, with a reason and your evidence). You cannot approve anything: every step "
    "that changes something waits for a person, and the bot checks its interlocks again before "
    "it applies. Diagnose first; request only what the diagnosis supports.")
# (the MCP request's context, None for stdio) -> the API as the agent
Connect = Callable[[Context | None], ApiPort]

READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                       open_world_hint=False)
SCAN = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                       open_world_hint=True)
CHANGES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False,
                          open_world_hint=True)

RunId = Annotated[str, Field(pattern=r"^[A-Za-z0-9-]{1,64}$", description="a run id (rb-...)")]
Runbook = Annotated[str, Field(min_length=1, max_length=63,
                               description="a runbook's name, from list_runbooks")]
Params = Annotated[dict[str, Any], Field(
    description="the runbook's params, as its params_schema in list_runbooks describes them")]


def build_server(connect: Connect, *, wait: Callable[[float], Any] | None = None) -> MCPServer:
    """The MCP server: every tool and resource, each call made through ``connect``."""
    mcp: MCPServer = MCPServer("runbook-bot", title="runbook-bot", version=__version__,
                               instructions=INSTRUCTIONS, log_level="WARNING",
                               warn_on_duplicate_tools=False)

    def tools(ctx: Context | None) -> Tools:
        return Tools(connect(ctx), wait=wait)

    def answer(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except ApiFailure as e:
            raise ToolError(f"refused ({e.status} {e.code}): {e.message}") from None

    @mcp.tool(annotations=READ)
    def list_runbooks(ctx: Context) -> dict[str, Any]:
        """The runbooks you can ask for: params (a JSON schema each), the alerts that trigger
        them, and which steps wait for a person's approval before they change anything, and why."""
        return answer(lambda: tools(ctx).list_runbooks())

    @mcp.tool(annotations=SCAN)
    def diagnose(ctx: Context, cluster: Annotated[str, Field(
                     description="a configured cluster; empty for the only one")] = "",
                 node: Annotated[str | None, Field(description="a node to look at")] = None,
                 pod: Annotated[str | None, Field(description="a pod to look at")] = None,
                 namespace: Annotated[str | None, Field(
                     description="the pod's namespace, or a namespace to look at")] = None,
                 ) -> dict[str, Any]:
        """Scan a cluster, read-only: what is wrong, the evidence read, and the runbook that
        applies with its params filled in. The same findings as `runbook-bot diagnose`."""
        return answer(lambda: tools(ctx).diagnose(
            cluster=cluster, node=node, pod=pod, namespace=namespace))

    @mcp.tool(annotations=READ)
    def dry_run(ctx: Context, runbook: Runbook, params: Params) -> dict[str, Any]:
        """Plan every step of a runbook and change nothing: each step's honest verdict (what it
        would change, which guard or interlock would stop it). Recorded as a dry run."""
        return answer(lambda: tools(ctx).dry_run(
            runbook=runbook, params=params))

    @mcp.tool(annotations=CHANGES)
    def request_run(ctx: Context, runbook: Runbook, params: Params,
                    reason: Annotated[str, Field(min_length=8, max_length=2000, description=(
                        "why you ask for this run, for the people who approve it"))],
                    evidence: Annotated[str, Field(max_length=8000, description=(
                        "what you found that supports it (findings, log lines); shown to the "
                        "approvers"))] = "",
                    incident: Annotated[str | None, Field(
                        max_length=500, description="the incident: an id, a channel or a link")
                    ] = None,
                    on_behalf_of: Annotated[str | None, Field(description=(
                        "the person you act for, as the bot knows them (k8s:alice, "
                        "slack:U0123ABCD): they become a requester and cannot approve it"))] = None,
                    ) -> dict[str, Any]:
        """Start a run of a runbook as your request. Steps that change something wait for a
        person to approve them (in Slack or at the terminal); you cannot approve. Agents may
        request only what the bot's policy allows them; a refusal says why."""
        return answer(lambda: tools(ctx).request_run(
            runbook=runbook, params=params, reason=reason, evidence=evidence,
            incident=incident, on_behalf_of=on_behalf_of))

    @mcp.tool(annotations=READ)
    def run_status(ctx: Context, run_id: RunId) -> dict[str, Any]:
        """A run step by step: status, what it waits for, each step's plan and outcome."""
        return answer(lambda: tools(ctx).run_status(run_id=run_id))

    @mcp.tool(annotations=READ)
    def follow_run(ctx: Context, run_id: RunId, after: Annotated[int, Field(
            ge=0, description="only events after this seq (next_after of the last call)")] = 0,
                   ) -> dict[str, Any]:
        """A run's audit events after a seq, its status, and whether it has finished: call again
        with next_after to follow it."""
        return answer(lambda: tools(ctx).follow_run(
            run_id=run_id, after=after))

    @mcp.tool(annotations=READ)
    def transcript(ctx: Context, run_id: RunId,
                   format: Literal["md", "html", "json"] = "md") -> str:
        """The run's transcript: who asked, who approved, what changed, the audit chain's head."""
        return answer(lambda: tools(ctx).transcript(
            run_id=run_id, format=format))

    @mcp.resource("runbook://{name}", mime_type="application/yaml",
                  description="a runbook's text, as the bot runs it")
    def runbook_text(name: str, ctx: Context) -> str:
        return answer(lambda: tools(ctx).runbook_text(name))

    @mcp.resource("transcript://{run_id}", mime_type="text/markdown",
                  description="a finished run's transcript")
    def finished_transcript(run_id: str, ctx: Context) -> str:
        return answer(lambda: tools(ctx).finished_transcript(run_id))

    return mcp


def bearer_required(app: ASGIApp) -> ASGIApp:
    """401 for an HTTP request without a bearer token; who it is, the API decides per call (with
    its limit on failed authentications), so a flood of bad tokens costs no more here."""

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") == "http" and scope.get("path") == HEALTH_PATH:
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", b"3")]})
            await send({"type": "http.response.body", "body": b"ok\n"})
            return
        if scope.get("type") == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                       for k, v in scope.get("headers") or ()}
            scheme, _, token = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                body = (b'{"error": "unauthenticated", "message": "send Authorization: Bearer '
                        b'TOKEN (an API token, an OIDC token or a ServiceAccount token)"}')
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer realm="runbook-bot"'),
                    (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


def http_app(api_wsgi: Any, *, host: str, wait: Callable[[float], Any] | None = None) -> ASGIApp:
    """The streamable HTTP transport (``/mcp``), stateless, each call answered by ``api_wsgi``
    (the API app in this process) as the caller its ``Authorization`` header names."""
    from bot.frontends.mcp.apiport import InProcessApi

    def connect(ctx: Context | None) -> ApiPort:
        headers: Mapping[str, str] = (ctx.headers if ctx is not None else None) or {}
        request = ctx.request_context.request if ctx is not None else None
        client = getattr(request, "client", None)
        return InProcessApi(api_wsgi, headers.get("authorization"),
                            remote=getattr(client, "host", None) or "127.0.0.1",
                            behalf=headers.get("x-on-behalf-of"))

    server = build_server(connect, wait=wait)
    app = server.streamable_http_app(streamable_http_path=MCP_PATH, stateless_http=True,
                                     json_response=True, host=host)
    return bearer_required(app)


def mcp_listener(app: ASGIApp, *, host: str, port: int) -> Any:
    """The MCP listener on the mcp port (``bot.frontends.http.AsgiServer``; not yet serving)."""
    from bot.frontends.http import AsgiServer

    return AsgiServer(app, name="mcp", host=host, port=port, max_body=BODY_LIMIT)


def serve_stdio(api: ApiPort) -> None:
    """Serve MCP on this process's standard input and output, every call made to ``api`` (a
    remote bot's API), until the client closes the stream."""
    server = build_server(lambda ctx: api)
    server.run("stdio")
