"""The trust policy of the role a cluster's ``role_arn`` names, enforced by the sandbox's STS.

In production, AssumeRole needs two grants: the caller's own policy must allow ``sts:AssumeRole``
(and ``sts:TagSession``, ``sts:SetSourceIdentity`` for session tags and a SourceIdentity) on the
role, and the role's trust policy must allow the same actions from the caller. A rehearsal that
checked only the first would pass with a trust policy that production refuses, and every write of
an attributed run would fail there with ``AccessDenied``. The sandbox evaluates
deploy/role-trust-policy.json (option ``trust_policy``) for every AssumeRole, whatever role it
names.

What is evaluated: ``Allow`` and ``Deny`` statements, ``Action`` with wildcards, and ``Principal``
``"*"`` or ``{"AWS": ARN or [ARNs]}`` where an ARN is the account's root (every principal of the
account, the caller's own policy then decides), a role (its sessions:
``arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION``), or an exact ARN. The placeholder
``ACCOUNT_ID`` is the sandbox's account. Anything else (conditions, ``NotPrincipal``, other
principal types) is refused when the file is loaded, naming the statement.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from bot.sim.iam import ACCOUNT, PolicyFileError, policy_file

DEFAULT_TRUST = Path(__file__).resolve().parents[2] / "deploy" / "role-trust-policy.json"
KNOWN = {"Sid", "Effect", "Principal", "Action"}


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


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
    statements: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]  # (effect, principals, actions)

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
            out.append((str(st["Effect"]), tuple(principals), tuple(_listed(st.get("Action") or []))))
        if not out:
            raise PolicyFileError(f"{path}: no Statement")
        return cls(tuple(out))

    def refuses(self, action: str, caller: str, role: str) -> str:
        """Why the role's trust policy refuses ``action`` to ``caller`` ("" when it allows it)."""
        allowed = False
        for effect, principals, actions in self.statements:
            if not any(fnmatchcase(action.lower(), a.lower()) for a in actions):
                continue
            if not any(_trusts(p, caller) for p in principals):
                continue
            if effect == "Deny":
                return (f"User: {caller} is not authorized to perform: {action} on resource: {role} "
                        "with an explicit deny in the role's trust policy")
            allowed = True
        if allowed:
            return ""
        return (f"User: {caller} is not authorized to perform: {action} on resource: {role}: the "
                "role's trust policy does not allow it")


def sandbox_trust(options: dict[str, Any]) -> TrustPolicy | None:
    """The trust policy STS enforces: option ``trust_policy`` (a path), deploy/role-trust-policy.json
    by default; None with ``enforce_iam=false`` or when the file is not there."""
    path = policy_file(options, "trust_policy", DEFAULT_TRUST)
    return None if path is None else TrustPolicy.load(path)
