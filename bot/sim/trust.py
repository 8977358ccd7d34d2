"""The trust policy of the role a cluster's ``role_arn`` names, enforced by the sandbox's STS.

In production, AssumeRole needs two grants: the caller's own policy must allow ``sts:AssumeRole``
(and ``sts:TagSession``, ``sts:SetSourceIdentity`` for session tags and a SourceIdentity) on the
role, and the role's trust policy must allow the same actions from the caller. A rehearsal that
checked only the first would pass with a trust policy that production refuses, and every write of
an attributed run would fail there with ``AccessDenied``. The sandbox evaluates
deploy/role-trust-policy.json (option ``trust_policy``) for every AssumeRole, whatever role it
names.

What is evaluated: ``Allow`` and ``Deny`` statements, ``Action`` with wildcards, ``Principal``
``"*"`` or ``{"AWS": ARN or [ARNs]}`` where an ARN is the account's root (every principal of the
account, the caller's own policy then decides), a role (its sessions:
``arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION``), or an exact ARN, and a ``Condition`` on what
the AssumeRole carries: the keys ``sts:SourceIdentity``, ``aws:RequestTag/KEY`` and
``aws:TagKeys`` (the request's session tag keys, a list: only with ``ForAllValues:`` or
``ForAnyValue:``), with the operators ``StringEquals``, ``StringNotEquals``, ``StringLike``,
``StringNotLike`` (each also ``...IfExists``) and ``Null``, as IAM evaluates them: every key of a
statement's condition must hold for it to apply, a key the request lacks fails the positive
operators, and ``ForAllValues:`` holds for an empty set. The shipped policy requires a
SourceIdentity and the bot's requester tag, and only the bot's tag keys, on every session. The
placeholder ``ACCOUNT_ID`` is the sandbox's account. Anything else (other condition keys or
operators, ``NotPrincipal``, other principal types) is refused when the file is loaded, naming the
statement.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from bot.sim.iam import ACCOUNT, PolicyFileError, policy_file

DEFAULT_TRUST = Path(__file__).resolve().parents[2] / "deploy" / "role-trust-policy.json"
KNOWN = {"Sid", "Effect", "Principal", "Action", "Condition"}
OPERATORS = {"StringEquals", "StringNotEquals", "StringLike", "StringNotLike", "Null"}
SETS = ("ForAllValues:", "ForAnyValue:")
KEYS = ("sts:SourceIdentity", "aws:TagKeys")  # and aws:RequestTag/KEY
Context = Mapping[str, "str | list[str]"]  # condition key -> the request's value(s)
# (operator, key, values) of one statement: all must hold
Conditions = tuple[tuple[str, str, tuple[str, ...]], ...]


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _conditions(block: Any, where: str) -> Conditions:
    """A statement's ``Condition``, checked to be what the sandbox evaluates."""
    if block is None:
        return ()
    if not isinstance(block, dict):
        raise PolicyFileError(f"{where}: Condition must be an object")
    out = []
    for op, keys in block.items():
        plain = op.removeprefix(SETS[0]).removeprefix(SETS[1]).removesuffix("IfExists")
        if plain not in OPERATORS or not isinstance(keys, dict):
            raise PolicyFileError(f"{where}: condition operator {op} is not evaluated by the "
                                  f"sandbox (known: {', '.join(sorted(OPERATORS))}, with "
                                  "ForAllValues: or ForAnyValue: for aws:TagKeys)")
        for key, values in keys.items():
            if key not in KEYS and not key.startswith("aws:RequestTag/"):
                raise PolicyFileError(f"{where}: condition key {key} is not evaluated by the "
                                      "sandbox (known: sts:SourceIdentity, aws:RequestTag/KEY, "
                                      "aws:TagKeys)")
            if (key == "aws:TagKeys") != op.startswith(SETS):
                raise PolicyFileError(f"{where}: {op} on {key}: aws:TagKeys, and only it, is "
                                      "a set (ForAllValues: or ForAnyValue:)")
            out.append((op, key, tuple(str(v) for v in _listed(values))))
    return tuple(out)


def _holds(op: str, key: str, values: tuple[str, ...], context: Context) -> bool:
    """Whether one condition holds for a request with these condition keys."""
    given = context.get(key)
    present = given is not None
    if op.endswith("Null"):
        return (not present) == (values[0].lower() == "true")
    if op.startswith(SETS):
        found = given if isinstance(given, list) else ([] if given is None else [given])
        test = op.split(":", 1)[1]
        matches = [_holds(test, key, values, {key: v}) for v in found]
        return all(matches) if op.startswith(SETS[0]) else any(matches)
    if not present:
        # a missing key fails the positive operators and satisfies the negated ones
        return op.startswith("StringNot") or op.endswith("IfExists")
    value = str(given)
    base = op.removesuffix("IfExists")
    if base == "StringEquals":
        return value in values
    if base == "StringNotEquals":
        return value not in values
    if base == "StringLike":
        return any(fnmatchcase(value, v) for v in values)
    return not any(fnmatchcase(value, v) for v in values)


def _trusts(pattern: str, caller: str) -> bool:
    if pattern == "*":
        return True
    if pattern == f"arn:aws:iam::{ACCOUNT}:root":
        return caller.split(":")[4:5] == [ACCOUNT]
    prefix = "arn:aws:iam::"
    if pattern.startswith(prefix) and ":role/" in pattern:
        account, role = pattern[len(prefix):].split(":role/", 1)
        return caller == pattern or caller.startswith(f"arn:aws:sts::{account}:assumed-role/{role}/")
    return caller == pattern


@dataclass(frozen=True)
class TrustPolicy:
    # (effect, principals, actions, conditions)
    statements: tuple[tuple[str, tuple[str, ...], tuple[str, ...], Conditions], ...]

    @classmethod
    def load(cls, path: Path) -> TrustPolicy:
        try:
            doc = json.loads(path.read_text().replace("ACCOUNT_ID", ACCOUNT))
        except (OSError, ValueError) as e:
            raise PolicyFileError(f"{path}: not a readable JSON trust policy ({e})") from None
        raw = doc.get("Statement") or [] if isinstance(doc, dict) else []
        statements: list[dict[str, Any]] = [raw] if isinstance(raw, dict) else list(raw)
        out = []
        for n, st in enumerate(statements):
            if not isinstance(st, dict):
                raise PolicyFileError(f"{path}: Statement {n + 1} is not an object")
            where = f"{path}: Statement {st.get('Sid') or n + 1}"
            extra = sorted(set(st) - KNOWN)
            if extra:
                raise PolicyFileError(f"{where}: {', '.join(extra)} is not evaluated by the sandbox "
                                      f"(it evaluates {', '.join(sorted(KNOWN))})")
            principal = st.get("Principal")
            if principal == "*":
                principals = ["*"]
            elif isinstance(principal, dict) and set(principal) == {"AWS"}:
                principals = _listed(principal["AWS"])
            else:
                raise PolicyFileError(f"{where}: Principal must be \"*\" or {{\"AWS\": ARNs}}, "
                                      f"not {json.dumps(principal)}")
            if st.get("Effect") not in ("Allow", "Deny"):
                raise PolicyFileError(f"{where}: Effect must be Allow or Deny")
            out.append((str(st["Effect"]), tuple(principals), tuple(_listed(st.get("Action") or [])),
                        _conditions(st.get("Condition"), where)))
        if not out:
            raise PolicyFileError(f"{path}: no Statement")
        return cls(tuple(out))

    def refuses(self, action: str, caller: str, role: str, context: Context | None = None) -> str:
        """Why the role's trust policy refuses ``action`` to ``caller`` ("" when it allows it);
        ``context``: the request's condition keys (``bot.sim.sts.trust_context``)."""
        allowed = False
        unmet = ""
        for effect, principals, actions, conditions in self.statements:
            if not any(fnmatchcase(action.lower(), a.lower()) for a in actions):
                continue
            if not any(_trusts(p, caller) for p in principals):
                continue
            failed = [f"{op} {key} {list(values)}" for op, key, values in conditions
                      if not _holds(op, key, values, context or {})]
            if failed:
                unmet = unmet or failed[0]
                continue
            if effect == "Deny":
                return (f"User: {caller} is not authorized to perform: {action} on resource: {role} "
                        "with an explicit deny in the role's trust policy")
            allowed = True
        if allowed:
            return ""
        return (f"User: {caller} is not authorized to perform: {action} on resource: {role}: the "
                "role's trust policy does not allow it"
                + (f" (the request does not meet its condition {unmet})" if unmet else ""))


def sandbox_trust(options: dict[str, Any]) -> TrustPolicy | None:
    """The trust policy STS enforces: option ``trust_policy`` (a path), deploy/role-trust-policy.json
    by default; None with ``enforce_iam=false`` or when the file is not there."""
    path = policy_file(options, "trust_policy", DEFAULT_TRUST)
    return None if path is None else TrustPolicy.load(path)
