"""The MCP server: AI agents (HolmesGPT, kagent, any MCP client) as requesters of guarded runs.

Agents reach runs only through the bot's API, as who they authenticated as, so every rule the API,
the runtime and the engine hold (authentication, rate limits, what agents may request, who may
approve) holds for them too, and nothing here decides anything. Two ways in (docs/agents.md):

- ``runbook-bot mcp serve``: streamable HTTP on the mcp port (``listen.mcp_port``), served by the
  one HTTP edge (``bot.frontends.http.AsgiServer``) in the bot's process; each tool call is
  answered by the API app in the same process (``apiport.InProcessApi``) with the agent's own
  bearer token;
- ``runbook-bot mcp serve --stdio``: a client of a remote bot's API (``server.url`` and a token:
  ``apiport.RemoteApi``), for an agent host that holds no cloud, cluster-write or database
  credential.

``tools`` is what the tools do (over an ``ApiPort``, no SDK), ``server`` registers them with the
official ``mcp`` SDK (the optional extra ``runbook-bot[mcp]``; this package is the one importer of
it, an import-linter contract). No tool approves, rejects, confirms or breaks glass, none calls an
action, none takes a raw Kubernetes or AWS operation.
"""
