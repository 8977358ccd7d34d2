"""Approval policy: who may approve which step, how many must, for how long, and break-glass.

Every front-end (Slack, the terminal) submits the same ``Approve`` / ``Reject`` / ``BreakGlass``
commands and the conductor asks this module whether the person may; no front-end decides. The
rules:

- destructive actions always need approval; ``min_approvers`` defaults to 1 and a runbook can ask
  for more, never less, than its own ``spec.approvals`` (the validator enforces the floor);
- eligible approvers are the members of the step's groups (``policy.groups`` in the config maps a
  group to identities; a front-end may resolve further members, e.g. Slack user groups, through
  the ``Membership`` it hands the runner);
- the requester may approve their own step only when both the runbook (``allow_self``) and the
  config (``allow_self_approval``) allow it; one person never counts twice, including through an
  alias (a terminal user and a Slack user who are the same person);
- the run's current owner (the incident commander, ``run.handed_over``) never approves or breaks
  glass on it: who directs the response is not who checks its changes. While the requester owns
  the run, the requester's rule (and ``allow_self``) decides. A former owner who is not the
  requester may approve, like anyone else in the groups;
- a rejection needs a reason; approvals expire after ``expires_after``;
- break-glass (overriding an interlock) needs two distinct eligible people, each with a reason;
  their votes approve the plan made after the override only if it is the one they were shown
  (``shown_alike``: the same changes, no approvers raise they did not read);
- a plan may raise its step's approver count (``raised``): what it found makes the change worse
  than the runbook foresaw (a fence that destroys data no other machine holds). The raise is in
  the plan's data, so it is bound to the plan's hash like everything else an approval covers;
- a step's groups narrow the runbook's: a step that names none has the runbook's groups, and only
  a runbook that names none at all leaves approval to any configured group;
- the bot itself (``SYSTEM_ACTOR``, and any ``system:`` identity: a worker, an alert) never
  approves or breaks glass, whatever the groups or aliases say;
- an AI agent (``agent:NAME``, ``engine/agents.py``) never approves, confirms or breaks glass,
  whatever the groups or aliases say; the person it said it acted for counts as a requester;
- ``policy.approvals_from`` says which front-ends' identities may approve and break glass
  (``slack``: only ``slack:U…`` identities, vouched for by Slack's signed requests); rejecting,
  aborting and retrying stay open to every front-end, because stopping is always safe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from bot.config import PolicyConfig
from bot.engine.agents import is_agent
from bot.engine.runstate import RunState, StepState
from bot.engine.state import StepStatus
from bot.errors import PolicyError
from bot.runbook.model import Approval

BREAK_GLASS_QUORUM = 2
MIN_REASON = 8  # characters: "because" is not a reason
SYSTEM_ACTOR = "runbook-bot"  # the actor of everything the bot does on its own
SYSTEM_PREFIX = "system:"  # e.g. system:worker, system:alertmanager
SLACK_PREFIX = "slack:"
_PLACES = {"terminal": "the terminal", "slack": "Slack", "api": "the API"}

# (identity, group) -> is the identity a member; the config's groups are checked first
Membership = Callable[[str, str], bool]


@dataclass(frozen=True)
class ApprovalRule:
    required: bool
    min_approvers: int
    groups: tuple[str, ...]
    allow_self: bool
    expires_after: float
    reason: str  # why approval is needed, in words ("" when it is not)
    raised_by: int = 0  # approvers the plan added to the step's own count (see ``raised``)
    raised_why: str = ""  # why, in the plan's words


# The key of a plan's data by which it raises its step's approver count: {"by": N, "why": "..."}.
# In the data, so the plan hash covers it: a plan without it hashes as before the key existed.
RAISE_KEY = "approvers_raised"
MAX_RAISE = 2  # a plan asks for at most this many more people; more is a runbook's decision


def effective_rule(*, runbook: Approval, step: Approval | None, destructive: bool,
                   policy: PolicyConfig) -> ApprovalRule:
    """Combine runbook defaults, the step's own block, the destructive floor and the config."""
    own = step or Approval()
    if destructive:
        required, reason = True, "destructive action: approval is always required"
    elif own.required:
        required, reason = True, "the step asks for approval"
    elif own.required is None and runbook.required:
        required, reason = True, "the runbook asks for approval of every step"
    else:
        required, reason = False, ""
    floor = runbook.min_approvers or 1
    minimum = own.min_approvers or floor
    if destructive:
        minimum = max(minimum, floor)
    groups = _narrowed(own.groups or (), runbook.groups or ())
    allow_self = own.allow_self if own.allow_self is not None else bool(runbook.allow_self)
    expires = own.expires_after or runbook.expires_after or policy.default_expires_after
    return ApprovalRule(required=required, min_approvers=minimum, groups=tuple(groups),
                        allow_self=bool(allow_self and policy.allow_self_approval),
                        expires_after=float(expires), reason=reason)


def raised(rule: ApprovalRule, plan: Mapping[str, object] | None) -> ApprovalRule:
    """``rule`` with the approvers the plan adds (``data[RAISE_KEY]``): its ``by`` more people, and
    approval required even where the runbook asked for none. A plan without the key, or none yet,
    leaves the rule as it is. The raise is read from the plan currently shown, so a plan computed
    again at apply raises (or not) by what it finds then, and a changed raise changes the hash."""
    data = (plan or {}).get("data")
    ask = data.get(RAISE_KEY) if isinstance(data, Mapping) else None
    if not ask:
        return rule
    if not isinstance(ask, Mapping):
        ask = {}  # a raise the engine cannot read still raises: asking one more person is safe
    try:
        by = min(max(int(str(ask.get("by", 1))), 0), MAX_RAISE)
    except ValueError:
        by = 1
    if by == 0:
        return rule
    why = " ".join(str(ask.get("why") or "the plan asks for more approvers").split())
    reason = (f"{rule.reason}; " if rule.reason else "") + (
        f"{rule.min_approvers + by} approvers, {by} more than the step otherwise needs: {why}")
    return replace(rule, required=True, min_approvers=rule.min_approvers + by, raised_by=by,
                   raised_why=why, reason=reason)


def shown_alike(shown: Mapping[str, object] | None, plan: Mapping[str, object]) -> bool:
    """Whether ``plan`` (made after a break-glass) asks what ``shown`` (the plan its people were
    shown; None: the refusal came with no plan) asked of them: the same changes, and no approvers
    raise they did not read. Their break-glass votes approve ``plan`` only then."""
    def raise_of(p: Mapping[str, object] | None) -> object:
        data = (p or {}).get("data")
        return data.get(RAISE_KEY) if isinstance(data, Mapping) else None

    new = raise_of(plan)
    if shown is None:
        return not new
    return shown.get("changes") == plan.get("changes") and (not new or new == raise_of(shown))


def bind_break_glass(s: StepState, *, shown: Mapping[str, object] | None,
                     shown_hash: str | None) -> list[str]:
    """Bind the break-glass votes of ``s`` to its new plan if it is the one their people were shown
    (``shown``: the step's plan when they voted). Otherwise the override stands and their approval
    does not: returns who they are, and the new plan is asked for like any other."""
    glass = [v for v in s.votes if v.kind == "break_glass" and v.plan_hash != s.plan_hash
             and v.plan_hash in (None, shown_hash)]
    seen = shown if all(v.plan_hash == shown_hash for v in glass) else None
    if glass and not shown_alike(seen, s.plan or {}):
        return [v.by for v in glass]
    for v in glass:
        v.plan_hash = s.plan_hash
    return []


def _narrowed(step: tuple[str, ...], runbook: tuple[str, ...]) -> tuple[str, ...]:
    """The step's groups within the runbook's; the runbook's when the step names none of them."""
    if not runbook:
        return step
    return tuple(g for g in step if g in runbook) or runbook


def is_system(identity: str) -> bool:
    return identity == SYSTEM_ACTOR or identity.startswith(SYSTEM_PREFIX)


API_PREFIXES = ("k8s:", "oidc:", "token:")  # identities the API authenticated


def frontend_of(identity: str) -> str:
    """Which front-end vouches for ``identity``: Slack for ``slack:U…``, the API for the
    identities it authenticates (``k8s:``, ``oidc:``, ``token:``), else the terminal."""
    if identity.startswith(SLACK_PREFIX):
        return "slack"
    return "api" if identity.startswith(API_PREFIXES) else "terminal"


def canonical(identity: str, policy: PolicyConfig) -> str:
    """The person behind an identity: aliases map e.g. ``slack:U0ABC`` to ``alice``."""
    seen = {identity}
    while identity in policy.aliases:
        identity = policy.aliases[identity]
        if identity in seen:
            break
        seen.add(identity)
    return identity


def config_membership(policy: PolicyConfig) -> Membership:
    """Membership from ``policy.groups`` alone, alias-aware."""
    def is_member(identity: str, group: str) -> bool:
        person = canonical(identity, policy)
        return any(canonical(m, policy) == person for m in policy.groups.get(group, ()))
    return is_member


def eligible_groups(groups: Sequence[str], policy: PolicyConfig) -> tuple[str, ...]:
    """The step's groups; every configured group only when the runbook names none at all."""
    if groups:
        return tuple(groups)
    return tuple(sorted(policy.groups))


def approver_groups(state: RunState, step: str | None, policy: PolicyConfig) -> tuple[str, ...]:
    """The groups whose members may decide the step a command names, as the engine checks them.

    ``step`` is a step's key or id, as people type it; None names the first step waiting for a
    decision. The groups are those recorded when the step asked for people. Empty when no such
    step is waiting (the engine refuses the command). A front-end that resolves members itself
    (Slack user groups) reads these to refresh them before it submits a decision.
    """
    waiting = [s for s in state.steps.values() if s.status == StepStatus.AWAITING_APPROVAL]
    if step is not None:
        waiting = [s for s in waiting if step in (s.key, s.step_id)]
    if not waiting:
        return ()
    return eligible_groups(waiting[0].groups, policy)


def _never_approves(approver: str, person: str, *, on_behalf_of: str | None,
                    policy: PolicyConfig) -> None:
    """Who never approves or breaks glass, whatever the groups say: the bot itself, an AI agent,
    and the person an agent said it requested the run for."""
    if is_system(approver) or is_system(person):
        raise PolicyError(f"{approver} is the bot's own identity: what the bot does on its own "
                          "never approves a step or breaks glass; a person must")
    if is_agent(approver) or is_agent(person):
        raise PolicyError(f"{approver} is an AI agent: agents request runs and people approve "
                          "them, whatever policy.groups says; a person in an approver group must")
    if on_behalf_of and person == canonical(on_behalf_of, policy):
        raise PolicyError(f"{approver} cannot approve this run: an agent requested it on their "
                          "behalf, which makes them its requester; someone else must")


def check_approver(*, rule: ApprovalRule, approver: str, requester: str,
                   prior: Iterable[str], policy: PolicyConfig, membership: Membership,
                   kind: str = "approve", owner: str | None = None,
                   on_behalf_of: str | None = None) -> None:
    """Raise PolicyError saying why ``approver`` may not approve; return if they may.

    ``kind`` is ``approve``, ``break_glass``, or ``decide`` (reject, abort, retry: who may stop or
    re-plan a step, which any front-end may do). ``on_behalf_of``: the person an agent said it
    requested the run for, who may not approve it either (``engine/agents.py``).
    """
    person = canonical(approver, policy)
    if kind != "decide":
        _never_approves(approver, person, on_behalf_of=on_behalf_of, policy=policy)
    if kind != "decide" and frontend_of(approver) not in policy.approvals_from:
        raise PolicyError(
            f"{approver} cannot {'break glass' if kind == 'break_glass' else 'approve'} from "
            f"{_PLACES[frontend_of(approver)]}: policy.approvals_from accepts approvals only from "
            f"{', '.join(policy.approvals_from)}; rejecting and aborting remain possible here")
    groups = eligible_groups(rule.groups, policy)
    if not groups:
        raise PolicyError(
            "no approver groups are configured: define policy.groups in the bot's config "
            "(group -> members) before anyone can approve")
    undefined = [g for g in groups if g not in policy.groups]
    if person in {canonical(p, policy) for p in prior}:
        raise PolicyError(f"{approver} has already approved this step; the same person never "
                          "counts twice")
    if person == canonical(requester, policy) and not (rule.allow_self and kind == "approve"):
        why = ("break-glass always needs two people other than the requester"
               if kind == "break_glass" else
               "self-approval is not allowed" + ("" if rule.allow_self else
                                                 " (it needs allow_self in the runbook and "
                                                 "allow_self_approval in the config)"))
        raise PolicyError(f"{approver} started this run and cannot approve its steps: {why}")
    owner_person = canonical(owner, policy) if owner else None
    if (kind != "decide" and person == owner_person
            and owner_person != canonical(requester, policy)):  # the requester's rule is above
        raise PolicyError(f"{approver} owns this run (its incident commander) and cannot "
                          f"{'break glass on' if kind == 'break_glass' else 'approve'} its steps: "
                          "the owner directs the response, someone else checks its changes")
    if not any(membership(approver, g) for g in groups):
        hint = f" (not defined in policy.groups: {', '.join(undefined)})" if undefined else ""
        raise PolicyError(f"{approver} is not in an approver group for this step; eligible "
                          f"groups: {', '.join(groups)}{hint}")


def check_reason(reason: str, *, what: str) -> str:
    text = " ".join(reason.split())
    if len(text) < MIN_REASON:
        raise PolicyError(f"{what} needs a written reason of at least {MIN_REASON} characters")
    return text


def membership_from(policy: PolicyConfig, extra: Mapping[str, Membership] | None = None) -> Membership:
    """Config groups first, then any front-end resolvers (e.g. Slack user groups) by prefix."""
    base = config_membership(policy)
    if not extra:
        return base

    def is_member(identity: str, group: str) -> bool:
        if base(identity, group):
            return True
        for member in policy.groups.get(group, ()):
            prefix = member.split(":", 1)[0]
            resolver = extra.get(prefix)
            if resolver is not None and resolver(identity, member):
                return True
        return False

    return is_member
