"""Which runbooks may start themselves from an alert (``spec.auto_run``): those that only read.

An auto-run has no person behind it: its requester is the bot's system actor, named after an
alert that anyone holding the webhook's token (or a mistaken rule) can send. So every write needs
a person to start the run, destructive or not: a cordon of every Ready node is as much an outage
as a taint. A runbook may auto-run only when every step reads, reports or notifies.

What only reads is said here, by name, rather than inferred: an action missing from the list
counts as a write, so a new action cannot make a runbook auto-runnable until someone adds it here
knowing what it does (tests/runbook/test_triggers.py holds the list to shipped, non-destructive
actions). A manual step is a change a person makes by hand, so it is not read-only either.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from bot.runbook.model import Runbook, Step

# the shipped actions that read (the cluster, EC2, the run's own results), report or notify
READ_ONLY_ACTIONS = frozenset({
    "aws.ec2.instance.get", "aws.ec2.volume.get", "aws.ec2.volumes.list",
    "aws.ec2.volumes.wait_detached",
    "k8s.claims.status", "k8s.node.detach_risk", "k8s.node.get", "k8s.node.liveness",
    "k8s.node.triage", "k8s.pod.events", "k8s.pod.get", "k8s.pods.list", "k8s.pv.blockers",
    "k8s.pv.get", "k8s.pv.list", "k8s.pvc.get", "k8s.storageclasses.audit",
    "k8s.volumeattachments.audit", "k8s.volumeattachments.list",
    "k8s.volumeattachments.wait_gone",
    "k8s.zone.held_volumes", "k8s.zone.leftover_attachments", "k8s.zone.placement",
    "k8s.zone.survey", "k8s.zone.wait_detached",
    "notify", "report.render", "wait",
})

IsDestructive = Callable[[str], bool]


def writes(step: Step, destructive: IsDestructive | None = None) -> str:
    """What a step that does more than read does, in words ("" for a read-only step)."""
    if step.action is None:
        return "is a manual step, a change a person makes"
    if step.action in READ_ONLY_ACTIONS:
        return ""
    if destructive is not None and destructive(step.action):
        return f"runs destructive action {step.action!r}"
    return f"runs action {step.action!r}, which writes (or is not known to only read)"


def writing_steps(runbook: Runbook,
                  destructive: IsDestructive | None = None) -> Iterator[tuple[int, Step, str]]:
    """(index, step, what it does) for each step of ``runbook`` that does more than read."""
    for index, step in enumerate(runbook.spec.steps):
        said = writes(step, destructive)
        if said:
            yield index, step, said


def may_auto_run(runbook: Runbook) -> bool:
    """``spec.auto_run`` set, and every step only reads."""
    return runbook.spec.auto_run and next(writing_steps(runbook), None) is None
