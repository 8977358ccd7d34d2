"""What each MCP tool does, over the bot's API (``apiport.ApiPort``): no SDK here, so the tools read
as plain functions and the SDK's registration (``server.py``) stays a table.

Every tool is an API request made as the agent; the API, the runtime and the engine decide. The
one that can lead to a change, ``request_run``, starts a run whose destructive steps wait for
people exactly as any other run's do (Slack, the terminal); the answer says so, and names what the
run waits for. Nothing here approves, rejects, confirms, breaks glass or calls an action.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from bot.frontends.mcp.apiport import ApiPort, checked

FINISHED = frozenset({"succeeded", "partial", "failed", "aborted"})
DRY_RUN_WAIT = 30.0  # seconds a dry run is waited for (it plans every step, changes nothing)
POLL = 0.25


def _quoted(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


class Tools:
    """The tools over ``api``; ``wait`` sleeps between reads of a dry run (injected in tests)."""

    def __init__(self, api: ApiPort, *, wait: Callable[[float], Any] | None = None) -> None:
        self.api = api
        if wait is None:
            import threading

            wait = threading.Event().wait
        self.wait = wait

    def list_runbooks(self) -> dict[str, Any]:
        out = []
        for entry in checked(self.api.call("GET", "/runbooks")).json()["runbooks"]:
            if not entry.get("valid"):
                out.append({"name": entry["name"], "valid": False, "error": entry.get("error")})
                continue
            detail = checked(self.api.call("GET", f"/runbooks/{_quoted(entry['name'])}")).json()
            spec = detail["runbook"].get("spec") or {}
            needs = [s for s in detail["steps"] if s["approval"]["required"]]
            out.append({
                "name": entry["name"], "title": entry.get("title"),
                "description": entry.get("description"),
                "params_schema": detail["params_schema"],
                "triggers": spec.get("triggers") or [],
                "changes_things": any(s["destructive"] for s in detail["steps"]),
                "steps": [{"id": s["id"], "title": s["title"], "destructive": s["destructive"],
                           "needs_approval": s["approval"]["required"],
                           "why": s["approval"]["why"] or None,
                           "approvers": s["approval"]["approvers"]} for s in detail["steps"]],
                "approval_summary": (f"{len(needs)} step(s) wait for people before they change "
                                     "anything" if needs else "no step needs approval"),
            })
        return {"runbooks": out}

    def diagnose(self, *, cluster: str = "", node: str | None = None, pod: str | None = None,
                 namespace: str | None = None) -> dict[str, Any]:
        body = {"cluster": cluster, "node": node, "pod": pod, "namespace": namespace}
        return dict(checked(self.api.call("POST", "/diagnose", body=body)).json())

    def dry_run(self, *, runbook: str, params: dict[str, Any]) -> dict[str, Any]:
        run = checked(self.api.call("POST", "/runs", body={
            "runbook": runbook, "params": params, "dry_run": True})).json()["run"]
        waited = 0.0
        while run["status"] not in FINISHED and waited < DRY_RUN_WAIT:
            self.wait(POLL)
            waited += POLL
            run = self.run_status(run_id=run["run_id"])["run"]
        return {"run": run, "finished": run["status"] in FINISHED}

    def request_run(self, *, runbook: str, params: dict[str, Any], reason: str, evidence: str = "",
                    incident: str | None = None,
                    on_behalf_of: str | None = None) -> dict[str, Any]:
        body = {"runbook": runbook, "params": params, "reason": reason, "evidence": evidence,
                "incident": incident}
        run = checked(self.api.call("POST", "/runs", body=body, behalf=on_behalf_of)).json()["run"]
        run = self.run_status(run_id=run["run_id"])["run"]  # the server carries it on meanwhile
        return {"run": run, "note": (
            "the run started as your request; every step that changes something waits for a "
            "person to approve it in Slack or at the terminal, and interlocks are checked again "
            "before it applies. Follow it with follow_run or run_status.")}

    def run_status(self, *, run_id: str) -> dict[str, Any]:
        return dict(checked(self.api.call("GET", f"/runs/{_quoted(run_id)}")).json())

    def follow_run(self, *, run_id: str, after: int = 0) -> dict[str, Any]:
        reply = checked(self.api.call("GET", f"/runs/{_quoted(run_id)}/events",
                                      query={"after": str(after)}))
        events = [json.loads(line) for line in reply.body.decode().splitlines() if line.strip()]
        run = self.run_status(run_id=run_id)["run"]
        last = events[-1]["seq"] if events else after
        return {"run_id": run_id, "status": run["status"], "waiting_on": run.get("waiting_on"),
                "finished": run["status"] in FINISHED, "events": events, "next_after": last}

    def transcript(self, *, run_id: str, format: str = "md") -> str:
        reply = checked(self.api.call("GET", f"/runs/{_quoted(run_id)}/transcript",
                                      query={"format": format}))
        return reply.body.decode("utf-8")

    def runbook_text(self, name: str) -> str:
        return str(checked(self.api.call("GET", f"/runbooks/{_quoted(name)}")).json()["text"])

    def finished_transcript(self, run_id: str) -> str:
        status = self.run_status(run_id=run_id)["run"]["status"]
        if status not in FINISHED:
            from bot.frontends.mcp.apiport import ApiFailure

            raise ApiFailure(409, "not_finished", f"run {run_id} is {status}: its transcript is "
                             "a resource once it has finished (the transcript tool reads it now)")
        return self.transcript(run_id=run_id)
