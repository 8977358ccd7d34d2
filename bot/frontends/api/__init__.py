"""The HTTP API: one authenticated API for every front-end that is not a chat, the terminal first.

The bot owns the credentials (the clusters', AWS's, the audit key); a person or a script reaches
runs only through this API, as who they authenticated as. It is a WSGI app (``app.api_app``) on
the one HTTP edge (``bot.frontends.http``: waitress, body limits), on a port of its own
(``listen.api_port``), reached only through the runtime facade (``bot.runtime.facade.Runtime``):

- ``app``: the route table and its handlers; one route per decision verb of the verb table
  (``bot.engine.verbs``), whose JSON body is the verb's arguments (``models``);
- ``openapi``: the OpenAPI 3.1 document, generated from the routes and the models;
- ``ratelimit``: a token bucket per identity (429);
- ``records``: transcripts and audit verification read from the store, handed to the app;
- ``auth``: who a request comes from (Kubernetes service account tokens, OIDC, API tokens);
- ``agents``: which callers are AI agents (``agent:NAME``), their own rate, what their run
  requests record (docs/agents.md).

docs/api.md lists the endpoints, and says why WSGI and no web framework.
"""

from bot.frontends.api.app import ApiApp, api_app, api_listener

__all__ = ["ApiApp", "api_app", "api_listener"]
