"""Who is calling the fake API server, and may they: bearer tokens and RBAC from ``deploy/rbac.yaml``.

The bot's permissions in production are exactly what ``deploy/rbac.yaml`` grants its
ServiceAccount. The sandbox authorizes the bot's identity against that same file, so a rehearsal
fails with 403 where production would refuse, instead of passing on an admin token. People (the
kubeconfig's default context) are cluster admins, as an on-call engineer on EKS usually is.

Authentication is by bearer token: the admin token, the bot's ServiceAccount token, or none
(``system:anonymous``, which may read only ``/version`` and the health endpoints, as with the
``system:public-info-viewer`` role). With ``eks`` set (``Sandbox.accept_eks_tokens``), an EKS token
(``k8s-aws-v1.``) is the identity its access entry names once the sandbox's STS vouched for it
(``bot.sim.eks_auth``), as on EKS. Any other token is 401. Every authenticated identity may read
discovery and OpenAPI (``system:discovery``).

A ``TokenReview`` (``review``) answers for the same tokens, as an API server does: users added
with ``add_user`` and the static tokens are audience-agnostic (authenticated only for the API
server's own audience, ``SERVER_AUDIENCES``); ServiceAccount tokens from ``issue_token`` carry
the audiences they were issued for (``kubectl create token SA --audience A``) and authenticate
only for those, and one issued for another audience is 401 on the API server itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from bot.sim.eks_auth import EksTokenReview, TokenRefused
from bot.sim.errors import ApiError

ADMIN_TOKEN = "sandbox-token"
BOT_TOKEN = "runbook-bot-token"
SERVER_AUDIENCES = ("https://kubernetes.default.svc",)  # the API server's own (--api-audiences)
RBAC_FILE = Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml"

PUBLIC_PATHS = ("/version", "/healthz", "/livez", "/readyz")
DISCOVERY_PREFIXES = ("/api", "/apis", "/openapi", "/version", "/healthz", "/livez", "/readyz")


@dataclass(frozen=True)
class Identity:
    user: str
    groups: tuple[str, ...] = ()

    @property
    def admin(self) -> bool:
        return "system:masters" in self.groups

    @property
    def authenticated(self) -> bool:
        return "system:authenticated" in self.groups


ANONYMOUS = Identity("system:anonymous", ("system:unauthenticated",))
ADMIN = Identity("kubernetes-admin", ("system:masters", "system:authenticated"))


@dataclass(frozen=True)
class Rule:
    api_groups: frozenset[str]
    resources: frozenset[str]
    verbs: frozenset[str]
    names: frozenset[str] = frozenset()

    def allows(self, *, verb: str, group: str, resource: str, name: str | None) -> bool:
        def has(values: frozenset[str], value: str) -> bool:
            return "*" in values or value in values
        if not (has(self.verbs, verb) and has(self.api_groups, group) and has(self.resources, resource)):
            return False
        return not self.names or (name is not None and name in self.names)


@dataclass
class Grants:
    """The rules bound to each subject: cluster-wide, and per namespace (RoleBindings)."""

    cluster: dict[str, list[Rule]] = field(default_factory=dict)  # subject -> rules
    namespaced: dict[tuple[str, str], list[Rule]] = field(default_factory=dict)  # (subject, ns)

    def allows(self, who: Identity, *, verb: str, group: str, resource: str, namespace: str | None,
               name: str | None) -> bool:
        subjects = (f"User:{who.user}", *(f"Group:{g}" for g in who.groups))
        for s in subjects:
            rules = list(self.cluster.get(s, ()))
            if namespace:
                rules += self.namespaced.get((s, namespace), ())
            if any(r.allows(verb=verb, group=group, resource=resource, name=name) for r in rules):
                return True
        return False


def _subject(s: dict[str, Any], default_ns: str | None) -> str:
    kind = s.get("kind", "")
    if kind == "ServiceAccount":
        return f"User:system:serviceaccount:{s.get('namespace') or default_ns}:{s['name']}"
    return f"{kind}:{s['name']}"


def _rules(role: dict[str, Any], *, where: str) -> list[Rule]:
    out = []
    for i, r in enumerate(role.get("rules") or []):
        if not isinstance(r, dict) or "verbs" not in r:
            raise ValueError(f"{where}: rules[{i}] has no verbs")
        if r.get("nonResourceURLs"):
            continue
        out.append(Rule(frozenset(r.get("apiGroups") or [""]), frozenset(r.get("resources") or []),
                        frozenset(r["verbs"]), frozenset(r.get("resourceNames") or [])))
    return out


def load_grants(path: Path = RBAC_FILE) -> Grants:
    """Roles and bindings from a multi-document RBAC manifest; a binding to a missing role is an error."""
    if not path.is_file():
        raise FileNotFoundError(f"RBAC manifest {path} not found: the sandbox authorizes the bot's "
                                "identity against it (option rbac=PATH names another)")
    docs = [d for d in YAML(typ="safe").load_all(path.read_text()) if isinstance(d, dict)]
    roles: dict[tuple[str, str | None], list[Rule]] = {}
    for d in docs:
        if d.get("kind") in ("ClusterRole", "Role"):
            ns = d["metadata"].get("namespace") if d["kind"] == "Role" else None
            roles[(d["metadata"]["name"], ns)] = _rules(
                d, where=f"{path}: {d['kind']} {d['metadata']['name']}")
    grants = Grants()
    for d in docs:
        kind = d.get("kind")
        if kind not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        ns = d["metadata"].get("namespace") if kind == "RoleBinding" else None
        ref = d["roleRef"]
        key = (ref["name"], None if ref["kind"] == "ClusterRole" else ns)
        if key not in roles:
            raise ValueError(f"{path}: {kind} {d['metadata']['name']} refers to {ref['kind']} "
                             f"{ref['name']!r}, which the file does not define")
        for s in d.get("subjects") or []:
            subject = _subject(s, ns)
            if ns is None:
                grants.cluster.setdefault(subject, []).extend(roles[key])
            else:
                grants.namespaced.setdefault((subject, ns), []).extend(roles[key])
    return grants


class Authorizer:
    """Maps a request's bearer token to an identity and decides, as RBAC would, whether it may act."""

    def __init__(self, grants: Grants, *, bot_namespace: str = "runbook-bot",
                 bot_name: str = "runbook-bot") -> None:
        self.grants = grants
        self.bot = Identity(f"system:serviceaccount:{bot_namespace}:{bot_name}",
                            ("system:serviceaccounts", f"system:serviceaccounts:{bot_namespace}",
                             "system:authenticated"))
        self.tokens = {ADMIN_TOKEN: ADMIN, BOT_TOKEN: self.bot}
        self.audiences: dict[str, tuple[str, ...]] = {}  # token -> its audiences, when bound
        self.eks: EksTokenReview | None = None  # EKS tokens (``k8s-aws-v1.``), as on EKS
        self.refused: list[str] = []  # why each token was refused, as an API server logs it

    def _eks(self, token: str) -> Identity | None:
        """The identity of an EKS token (None: not one, or EKS tokens are not accepted here)."""
        if self.eks is None or not self.eks.owns(token):
            return None
        try:
            user, groups = self.eks.identify(token)
        except TokenRefused as e:
            self.refused.append(str(e))
            return None
        return Identity(user, (*groups, "system:authenticated"))

    def add_user(self, token: str, user: str, groups: tuple[str, ...] = ()) -> Identity:
        """A person (or any user an authenticator of the cluster vouches for) with ``token``."""
        who = Identity(user, (*groups, "system:authenticated"))
        self.tokens[token] = who
        return who

    def issue_token(self, namespace: str, name: str, *, audiences: tuple[str, ...] = ()) -> str:
        """A ServiceAccount token bound to ``audiences`` (default: the API server's own)."""
        token = f"sandbox-sa.{namespace}.{name}.{len(self.tokens)}"
        self.tokens[token] = Identity(f"system:serviceaccount:{namespace}:{name}", (
            "system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"))
        self.audiences[token] = audiences or SERVER_AUDIENCES
        return token

    def review(self, token: str, audiences: list[str]) -> dict[str, Any]:
        """A TokenReview's status for ``token`` and the audiences asked for (none: the server's)."""
        who = self.tokens.get(token) or self._eks(token)
        if who is None:
            return {"authenticated": False, "error": "invalid bearer token"}
        wanted = audiences or list(SERVER_AUDIENCES)
        has = self.audiences.get(token, SERVER_AUDIENCES)
        matched = [a for a in wanted if a in has]
        if not matched:
            return {"authenticated": False, "error": "token audiences are invalid for the target "
                    f"audiences {wanted}"}
        return {"authenticated": True, "audiences": matched,
                "user": {"username": who.user, "groups": list(who.groups)}}

    def identify(self, authorization: str) -> Identity:
        if not authorization:
            return ANONYMOUS
        scheme, _, token = authorization.partition(" ")
        who = (self.tokens.get(token.strip()) or self._eks(token.strip())) \
            if scheme.lower() == "bearer" else None
        if who is None or not set(self.audiences.get(token.strip(), SERVER_AUDIENCES)) & set(
                SERVER_AUDIENCES):
            raise ApiError(401, "Unauthorized", "Unauthorized")
        return who

    def check_path(self, who: Identity, path: str) -> None:
        """Non-resource URLs: health and version for everyone, discovery for the authenticated."""
        p = path.rstrip("/") or "/"
        if p in PUBLIC_PATHS or who.admin:
            return
        if who.authenticated and p.startswith(DISCOVERY_PREFIXES):
            return
        raise ApiError(403, "Forbidden", f'forbidden: User "{who.user}" cannot get path "{path}"')

    def check(self, who: Identity, *, verb: str, group: str, resource: str, namespace: str | None,
              name: str | None) -> None:
        if who.admin or self.grants.allows(who, verb=verb, group=group, resource=resource,
                                           namespace=namespace, name=name):
            return
        base = resource.split("/", 1)[0]
        subject = f'{base}.{group} "{name}"' if group and name else (
            f'{base} "{name}"' if name else (f"{base}.{group}" if group else base))
        scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        raise ApiError(403, "Forbidden",
                       f'{subject} is forbidden: User "{who.user}" cannot {verb} resource '
                       f'"{resource}" in API group "{group}" {scope}',
                       details={"name": name or "", "group": group, "kind": base})


def verb_of(method: str, *, named: bool, watch: bool) -> str:
    if method == "GET":
        return "watch" if watch else ("get" if named else "list")
    return {"POST": "create", "PUT": "update", "PATCH": "patch",
            "DELETE": "delete" if named else "deletecollection"}.get(method, method.lower())
