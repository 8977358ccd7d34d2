"""``runbook-bot demo``: a whole recovery from a dead node, in the built-in sandbox, in seconds.

It starts a sandbox scenario (a node dies and its StatefulSet pod sticks on a Multi-Attach error),
then runs ``node-dead-ngns`` through the terminal front-end exactly as an on-call engineer would:
``alice`` starts it and a second identity, ``bob``, approves each destructive step (or you do,
with ``--interactive``). Time is simulated, so the six-minute waits of a real incident pass at
once. The run is recorded in the normal state store, so ``runs``, ``status``, ``audit verify`` and
``export`` work on it afterwards.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

SCENARIOS = ("node-dead", "node-hung", "stuck-detach")


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="watch node-dead-ngns recover a dead node in the sandbox",
                       description="Start the sandbox, break a node, and run node-dead-ngns "
                       "against it with a second identity approving. Takes a few seconds.")
    p.add_argument("--scenario", choices=SCENARIOS, default="node-dead",
                   help="node-dead (default), node-hung (needs fencing first) or stuck-detach "
                        "(needs a break-glass force detach)")
    p.add_argument("--interactive", action="store_true",
                   help="ask you to approve each step (as bob) instead of approving for you")
    p.add_argument("--transcript", metavar="FILE",
                   help="where to write the Markdown transcript (default: ./runbook-bot-demo-RUN_ID.md)")
    p.set_defaults(handler=cmd_demo)


def _say(text: str = "") -> None:
    print(text, flush=True)


def _story(r: Any) -> None:
    f = r.facts
    sb = r.sandbox
    pod = sb.get("Pod", f["namespace"], f["pod"])
    events = [e for e in sb.list("Event", f["namespace"])
              if (e.get("involvedObject") or {}).get("name") == f["pod"]
              and e.get("reason") in ("FailedAttachVolume", "FailedScheduling")]
    _say("== runbook-bot demo ==")
    _say(f"The sandbox: a Kubernetes cluster on AWS in {sb.region} (fake API server {sb.k8s_url},")
    _say(f"EC2 on moto at {sb.ec2_endpoint}). The bot reaches it through a kubeconfig and")
    _say("AWS_ENDPOINT_URL_EC2, exactly as it reaches a real cluster.")
    _say()
    hung = r.scenario == "node-hung"
    _say(f"The incident: node {f['node']} (instance {f['instance_id']}, {f['zone']}) "
         + ("hangs: its instance still runs but answers nothing." if hung
            else "died: its EC2 instance stopped."))
    _say(f"Its Elasticsearch pod {f['namespace']}/{f['pod']} was recreated on "
         f"{pod['spec'].get('nodeName')}, and is stuck {pod['status'].get('phase')}:")
    for e in events[-1:]:
        _say(f"    {e.get('reason')}: {e.get('message')}")
    if r.scenario == "stuck-detach":
        _say("Worse, EC2 reports the volume's attachment as busy: a normal detach will not clear it.")
    _say()
    _say("alice (on call) runs node-dead-ngns; bob (second on call) approves the destructive steps.")
    _say(f"    runbook-bot run node-dead-ngns -p node={f['node']}")
    _say()


def _decide_interactively(r: Any) -> Any:
    def decide(state: Any, s: Any) -> Any:
        cmd = r.approve_all(state, s)
        if cmd is None:
            return None
        verb = "confirm" if s.needs_confirmation and not s.needs_approval else "approve"
        try:
            answer = input(f"  [{cmd.actor}] {verb} step {s.key}? [y/N] ").strip().lower()
        except EOFError:
            answer = ""
        return cmd if answer in ("y", "yes") else None
    return decide


def _aftermath(r: Any, state: Any) -> None:
    f = r.facts
    sb = r.sandbox
    pod = sb.get("Pod", f["namespace"], f["pod"])
    node = pod["spec"].get("nodeName")
    attached = sb.ec2.attachments().get(f["volume_id"]) or []
    taints = [t["key"] for t in (sb.get("Node", None, f["node"]).get("spec") or {}).get("taints") or ()]
    _say()
    _say("== afterwards ==")
    _say(f"pod {f['namespace']}/{f['pod']}: {pod['status'].get('phase')} on {node}")
    _say(f"volume {f['volume_id']}: " + (", ".join(f"{s} to {i}" for i, s in attached) or "detached"))
    if "node.kubernetes.io/out-of-service" in taints:
        _say(f"node {f['node']}: keeps the out-of-service taint until node-recovered runs")
    violations = sb.violations
    _say("sandbox safety invariants: " + ("none violated" if not violations else
                                          f"{len(violations)} VIOLATED: {violations}"))


def _verify(r: Any, run_id: str) -> bool:
    from bot.store.integrity import verify_run

    head = r.store.head(run_id)[1]
    verdict = verify_run(r.store, run_id, key=r.store.key)
    if verdict.ok:
        _say(f"audit: {verdict.count} events, hash chain intact (head {str(head)[:16]}...)")
    else:
        _say(f"audit: BROKEN at seq {verdict.first_bad_seq}: {verdict.reason}")
    return verdict.ok


def _transcript(r: Any, run_id: str, path: str | None) -> str:
    from bot.present.transcript import export

    out = Path(path or f"runbook-bot-demo-{run_id}.md")
    out.write_text(export(r.store, run_id, fmt="md"), encoding="utf-8")
    return str(out)


def cmd_demo(args: argparse.Namespace) -> int:
    from bot.config import load_settings
    from bot.frontends.term.printer import TerminalPrinter
    from bot.sim.rehearsal import Rehearsal

    settings = load_settings()
    rehearsal = Rehearsal(args.scenario, database_url=settings.database_url,
                          audit_key=settings.audit_key or None, notifiers=[TerminalPrinter()],
                          wall_clock=True)
    with rehearsal as r:
        _story(r)
        decide = _decide_interactively(r) if args.interactive else None
        run_id = r.start_run("node-dead-ngns", node=r.facts["node"])
        state = r.play(run_id, decide=decide)
        _aftermath(r, state)
        ok = _verify(r, run_id)
        written = _transcript(r, run_id, args.transcript)
    _say()
    if state.status == "awaiting_approval":
        _say(f"run {run_id} is left waiting for an approval (the sandbox is gone with this process).")
    _say("Next:")
    _say(f"    runbook-bot status {run_id}")
    _say(f"    runbook-bot audit verify {run_id}")
    _say(f"    runbook-bot export {run_id} --format html -o {run_id}.html")
    if written:
        _say(f"The Markdown transcript is in {written}.")
    _say(f"(state store: {settings.database_url})")
    return 0 if state.status == "succeeded" and ok else 1

