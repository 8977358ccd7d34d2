"""IAM for the sandbox's EC2 endpoint: the bot's calls are evaluated against deploy/iam-policy.json.

In production the bot's role carries that policy, and EC2 refuses what it does not allow with
``UnauthorizedOperation`` (HTTP 403; with ``DryRun`` too, before ``DryRunOperation``). A rehearsal
must fail where production would be refused, so the endpoint evaluates the same file for every
caller except the sandbox's own controllers (their access key is ``ADMIN_KEY``).

What is evaluated, as IAM does for one identity-based policy: ``Allow`` and ``Deny`` statements,
``Action``/``NotAction`` with wildcards, ``Resource`` ARNs with wildcards, and conditions with the
operators ``StringEquals``, ``StringNotEquals``, ``StringLike``, ``StringNotLike`` and ``Null`` on
``aws:ResourceTag/KEY``, ``ec2:ResourceTag/KEY``, ``aws:RequestTag/KEY`` (the tags of the request's
``TagSpecification``) and ``ec2:CreateAction``. Every resource EC2 authorizes must be allowed:
the instance for StopInstances, the instance *and* the volume for DetachVolume/AttachVolume, the
volume for DeleteVolume, the volume *and* the new snapshot (``arn:aws:ec2:REGION::snapshot/*``) for
CreateSnapshot, plus ``ec2:CreateTags`` on the snapshot (with ``ec2:CreateAction``) when the
request tags it; Describe calls authorize ``*`` only (EC2 has no resource-level permissions for
them). The placeholder ``CLUSTER_NAME`` in the file is the sandbox's cluster name. Anything
else in the file (another operator, a global condition key) is refused when the policy is loaded,
naming the statement, so the sandbox never silently allows what IAM would not.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

ADMIN_KEY = "SANDBOXADMIN"  # the sandbox's own controllers and arranging calls
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}  # the bot's
ADMIN_CREDENTIALS = {"aws_access_key_id": ADMIN_KEY, "aws_secret_access_key": "testing"}
ACCOUNT = "123456789012"  # moto's default account
OPERATORS = {"StringEquals", "StringNotEquals", "StringLike", "StringNotLike", "Null"}
TAG_KEYS = ("aws:ResourceTag/", "ec2:ResourceTag/", "aws:RequestTag/")
CREATE_ACTION = "ec2:CreateAction"

# action -> the request parameters naming the resources EC2 authorizes, with their ARN type
RESOURCES: dict[str, tuple[tuple[str, str], ...]] = {
    "StopInstances": (("InstanceId.", "instance"),),
    "StartInstances": (("InstanceId.", "instance"),),
    "TerminateInstances": (("InstanceId.", "instance"),),
    "RebootInstances": (("InstanceId.", "instance"),),
    "DetachVolume": (("InstanceId", "instance"), ("VolumeId", "volume")),
    "AttachVolume": (("InstanceId", "instance"), ("VolumeId", "volume")),
    "DeleteVolume": (("VolumeId", "volume"),),
    "CreateSnapshot": (("VolumeId", "volume"),),
}
CREATES = {"CreateSnapshot": "snapshot"}  # actions that create a resource: its ARN is authorized too


class PolicyFileError(ValueError):
    """The policy uses something the sandbox cannot evaluate, or is not a policy."""


@dataclass(frozen=True)
class Denied:
    action: str
    resource: str
    message: str


@dataclass(frozen=True)
class Policy:
    statements: tuple[dict[str, Any], ...]
    source: str

    @classmethod
    def load(cls, path: Path | str, *, cluster_name: str, account: str = ACCOUNT) -> Policy:
        # the role a cluster's role_arn names lives in the sandbox's account
        text = (Path(path).read_text().replace("CLUSTER_NAME", cluster_name)
                .replace("TARGET_ACCOUNT_ID", account))
        try:
            doc = json.loads(text)
        except ValueError as e:
            raise PolicyFileError(f"{path}: not JSON: {e}") from e
        raw = doc.get("Statement") if isinstance(doc, dict) else None
        stmts = [raw] if isinstance(raw, dict) else raw
        if not isinstance(stmts, list) or not stmts:
            raise PolicyFileError(f"{path}: no Statement list")
        for n, st in enumerate(stmts):
            _check_statement(st, where=f"{path}: Statement {st.get('Sid') or n}")
        return cls(statements=tuple(stmts), source=str(path))

    def evaluate(self, action: str, resources: list[tuple[str, dict[str, str]]], *,
                 principal: str) -> Denied | None:
        """None when every (arn, condition context) is allowed for ``ec2:action``; else the refusal.

        The context maps condition keys (``aws:ResourceTag/KEY``, ``aws:RequestTag/KEY``,
        ``ec2:CreateAction``) to their values for that resource."""
        full = action if ":" in action else f"ec2:{action}"
        for arn, tags in resources:
            allowed = False
            for st in self.statements:
                if not _applies(st, full, arn, tags):
                    continue
                if st["Effect"] == "Deny":
                    return Denied(full, arn, _message(principal, full, arn, "an explicit deny in an "
                                                      "identity-based policy"))
                allowed = True
            if not allowed:
                return Denied(full, arn, _message(principal, full, arn, "no identity-based policy "
                                                  f"allows the {full} action"))
        return None


def resources_of(action: str, params: dict[str, str], *, region: str,
                 tags: Callable[[str], dict[str, str]]) -> list[tuple[str, dict[str, str]]]:
    """The (ARN, condition context) EC2 authorizes for this request; ``[("*", ...)]`` when none."""
    asked = request_tags(params)
    out = []
    for param, kind in RESOURCES.get(action, ()):
        ids = [v for k, v in sorted(params.items()) if k == param or (param.endswith(".")
                                                                      and k.startswith(param))]
        out += [(f"arn:aws:ec2:{region}:{ACCOUNT}:{kind}/{i}", condition_context(tags(i), asked))
                for i in ids]
    if action in CREATES:
        out.append((f"arn:aws:ec2:{region}::{CREATES[action]}/*", condition_context({}, asked)))
    return out or [("*", condition_context({}, asked))]


def implicit_checks(action: str, params: dict[str, str], *,
                    region: str) -> list[tuple[str, list[tuple[str, dict[str, str]]]]]:
    """Further (action, resources) EC2 authorizes: tagging a resource as it is created."""
    asked = request_tags(params)
    if action not in CREATES or not asked:
        return []
    ctx = {**condition_context({}, asked), CREATE_ACTION: action}
    return [("ec2:CreateTags", [(f"arn:aws:ec2:{region}::{CREATES[action]}/*", ctx)])]


def request_tags(params: dict[str, str]) -> dict[str, str]:
    """The tags a request asks for (``TagSpecification.N.Tag.M.Key/Value``)."""
    keys = {k[:-len(".Key")]: v for k, v in params.items()
            if k.startswith("TagSpecification.") and k.endswith(".Key")}
    return {v: params.get(f"{k}.Value", "") for k, v in keys.items()}


def condition_context(resource_tags: dict[str, str], asked: dict[str, str]) -> dict[str, str]:
    """The condition keys IAM sees for a resource with these tags, in a request asking for these."""
    ctx = {f"{p}{k}": v for k, v in resource_tags.items() for p in ("aws:ResourceTag/", "ec2:ResourceTag/")}
    ctx.update({f"aws:RequestTag/{k}": v for k, v in asked.items()})
    return ctx


def access_key(authorization: str) -> str:
    """The access key id from a SigV4 ``Authorization`` header ('' when unsigned)."""
    marker = "Credential="
    at = authorization.find(marker)
    return authorization[at + len(marker):].split("/", 1)[0] if at >= 0 else ""


def _message(principal: str, action: str, arn: str, why: str) -> str:
    return (f"You are not authorized to perform this operation. User: {principal} is not authorized "
            f"to perform: {action} on resource: {arn} because {why}.")


def _list(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value or [])


def _check_statement(st: Any, *, where: str) -> None:
    if not isinstance(st, dict) or st.get("Effect") not in ("Allow", "Deny"):
        raise PolicyFileError(f"{where}: Effect must be Allow or Deny")
    if not (st.get("Action") or st.get("NotAction")):
        raise PolicyFileError(f"{where}: no Action")
    if "NotResource" in st or "Principal" in st:
        raise PolicyFileError(f"{where}: NotResource/Principal are not evaluated by the sandbox")
    for op, block in (st.get("Condition") or {}).items():
        base = op.removesuffix("IfExists")
        if base not in OPERATORS:
            raise PolicyFileError(f"{where}: condition operator {op} is not evaluated by the sandbox "
                                  f"(known: {', '.join(sorted(OPERATORS))})")
        for key in block:
            if not key.startswith(TAG_KEYS) and key != CREATE_ACTION:
                raise PolicyFileError(f"{where}: condition key {key} is not evaluated by the sandbox "
                                      "(known: aws:ResourceTag/KEY, ec2:ResourceTag/KEY, "
                                      "aws:RequestTag/KEY, ec2:CreateAction)")


def _applies(st: dict[str, Any], action: str, arn: str, tags: dict[str, str]) -> bool:
    if "Action" in st:
        if not any(fnmatchcase(action.lower(), a.lower()) for a in _list(st["Action"])):
            return False
    elif any(fnmatchcase(action.lower(), a.lower()) for a in _list(st["NotAction"])):
        return False
    if not any(r == "*" or fnmatchcase(arn, r) for r in _list(st.get("Resource", "*"))):
        return False
    return all(_condition(op, key, _list(values), tags)
               for op, block in (st.get("Condition") or {}).items() for key, values in block.items())


def _condition(op: str, key: str, values: list[str], tags: dict[str, str]) -> bool:
    tag = key
    present = tag in tags
    base = op.removesuffix("IfExists")
    if base == "Null":
        return (not present) == (str(values[0]).lower() == "true")
    if not present:
        # a missing key fails the positive operators and satisfies the negated ones
        return base.startswith("StringNot") or op.endswith("IfExists")
    value = tags[tag]
    if base == "StringEquals":
        return value in values
    if base == "StringNotEquals":
        return value not in values
    if base == "StringLike":
        return any(fnmatchcase(value, v) for v in values)
    return not any(fnmatchcase(value, v) for v in values)


DEFAULT_POLICY = Path(__file__).resolve().parents[2] / "deploy" / "iam-policy.json"


def cluster_name(options: dict[str, Any]) -> str:
    """The sandbox's cluster name (option ``cluster_name``): it fills the policy file's
    ``CLUSTER_NAME`` here, and names the cluster in instance and volume tags (``nodegroups``)."""
    return str(options.get("cluster_name") or "sandbox")


def policy_file(options: dict[str, Any], option: str, default: Path) -> Path | None:
    """The policy file a sandbox option names (``default`` without it); None when IAM is not
    enforced (``enforce_iam=false``) or the default file is not there (an installed package)."""
    if str(options.get("enforce_iam", "true")).lower() in ("0", "false", "no", "off"):
        return None
    path = Path(str(options.get(option) or default))
    if not path.is_file():
        if options.get(option):
            raise PolicyFileError(f"option {option}: {path} is not a file")
        return None
    return path


def sandbox_policy(options: dict[str, Any], *, account: str = ACCOUNT) -> Policy | None:
    """The policy the endpoint enforces: option ``iam_policy`` (a path), deploy/iam-policy.json by
    default; None (nothing enforced) with ``enforce_iam=false`` or when the file is not there."""
    path = policy_file(options, "iam_policy", DEFAULT_POLICY)
    if path is None:
        return None
    return Policy.load(path, cluster_name=cluster_name(options), account=account)
