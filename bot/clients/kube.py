"""The Kubernetes client: the only importer of the ``kubernetes`` SDK in the product.

Actions never touch SDK models. Every method here returns plain dicts exactly as the API server sent
them (``_preload_content=False`` plus ``json``), which is faster than the SDK's deserialiser and
keeps field names identical to ``kubectl get -o json``.

Three things the SDK leaves to its callers are done here, once:
- **Error translation.** ``ApiException`` and urllib3 errors become ``bot.errors``: 409, 429, 5xx and
  timeouts are ``RetryableError``; other 4xx are ``PermanentError`` (404 with ``code="NotFound"``).
- **Audit records.** Every request, including each page of a list and each attempt of a
  read-modify-write, is appended as an ``ApiCall`` to the recorder the action passed (``bound``),
  with the API server's ``Audit-Id`` as its request id, so a record can be matched against the
  cluster's own audit log. Error texts and records are passed through ``redact()``.
- **Pagination.** Lists are read in pages of ``page_size`` with ``continue`` tokens; when a token
  expires (410 Gone, the server compacted past it) the list starts again from the first page, once.
- **Dry runs.** A read-only view (``bound(calls, read_only=True)``) refuses every write before it
  is sent.
- **Shared reads.** A view bound to a pass's ``SharedReads`` (``bound(calls, reads=...)``) answers
  a read it already made in that pass from there, and a narrower read from a wider list it made:
  a node from the list of all nodes, a node's pods from the list of all pods. What is served so is
  recorded with the outcome ``cached`` (and the request id of the read it came from), never as a
  request. Every write, whatever its outcome, clears the shared reads first and again after, so a
  read after a write is sent, and a 409 Conflict's re-read is live; the one exception is the
  object an ``update()`` wrote, which the API server's answer gives as fresh as a read would.
- **Optimistic concurrency.** ``update()`` reads, applies a pure mutation, and writes back with the
  read ``resourceVersion`` (a full PUT), retrying on 409 Conflict. Taints have no merge key, so a
  patch without a version would silently drop a taint another controller added in between.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from bot.clients.kube_errors import SERVICE, translate
from bot.clients.kube_watch import follow
from bot.clients.redact import redact
from bot.engine.plan import ApiCall
from bot.engine.ports import SharedReads
from bot.errors import ConfigError, PermanentError, PolicyError, RetryableError

NODE_LEASES = "kube-node-lease"  # the namespace of the kubelets' heartbeat Leases
Obj = dict[str, Any]
Mutation = Callable[[Obj], Obj | None]  # returns the new object, or None when nothing to change


def _named(obj: Obj, name: str) -> bool:
    return bool((obj.get("metadata") or {}).get("name") == name)


NODECLAIMS = ("karpenter.sh", "v1", "nodeclaims")  # group, version, plural


@dataclass
class KubeClient:
    """One cluster's API, returning plain dicts and recording every request.

    ``bound(calls)`` gives a view that shares the connection pool but records into ``calls`` (a
    step's ``StepContext.calls``), so one client per cluster serves every step.
    """

    api: Any  # kubernetes.client.ApiClient
    request_timeout: float = 30.0
    page_size: int = 500
    conflict_retries: int = 5
    read_retries: int = 2  # extra attempts for reads on 429/5xx/timeouts; writes are not retried here
    sleep: Callable[[float], None] = time.sleep
    recorder: list[ApiCall] | None = None
    read_only: bool = False
    context_name: str = ""  # the kubeconfig context it was built from ("in-cluster" in a pod)
    reads: SharedReads | None = None
    _apis: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_config(
        cls, *, kubeconfig: str | None = None, context: str | None = None,
        request_timeout: float = 30.0, pool: Any = None,
        configure: Callable[[Any], str] | None = None, **options: Any) -> KubeClient:
        """From a kubeconfig file and context, else the default kubeconfig, else in-cluster; or set
        up by ``configure`` (given the SDK's Configuration, it returns a name: EKS tokens,
        ``bot.clients.cluster``). ``pool`` replaces the connection pool (an object with urllib3's
        ``request``: the sandbox's in-process transport); requests are otherwise those of HTTP."""
        cfg = k8s.Configuration()
        name = context or ""
        try:
            if configure is not None:
                name = configure(cfg)
            elif kubeconfig is None and context is None:
                try:
                    k8s_config.load_kube_config(client_configuration=cfg, persist_config=False)
                except ConfigException:
                    k8s_config.load_incluster_config(client_configuration=cfg)
                    name = "in-cluster"
            else:
                k8s_config.load_kube_config(config_file=kubeconfig, context=context,
                                            client_configuration=cfg, persist_config=False)
            if not name:  # the kubeconfig's current context
                name = str(k8s_config.list_kube_config_contexts(config_file=kubeconfig)[1]["name"])
        except (ConfigException, OSError) as e:
            raise ConfigError(f"cannot load Kubernetes config (kubeconfig={kubeconfig!r}, "
                              f"context={context!r}): {e}") from e
        # urllib3 would otherwise retry 429/503 silently; only connection failures are retried
        # there, every HTTP answer comes back here so it is recorded and translated
        cfg.retries = urllib3.Retry(total=2, connect=2, read=0, status=0, other=0, redirect=0,
                                    respect_retry_after_header=False)
        api = k8s.ApiClient(configuration=cfg)
        api.rest_client.pool_manager = pool or api.rest_client.pool_manager
        return cls(api=api, request_timeout=request_timeout, context_name=name, **options)

    @property
    def api_server(self) -> str:
        """The API server's URL, as the kubeconfig (or the pod's environment) gives it."""
        return str(self.api.configuration.host)

    def bound(self, calls: list[ApiCall], *, read_only: bool = False,
              reads: SharedReads | None = None) -> KubeClient:
        view = KubeClient(api=self.api, request_timeout=self.request_timeout,
                          page_size=self.page_size, conflict_retries=self.conflict_retries,
                          read_retries=self.read_retries, sleep=self.sleep, recorder=calls,
                          read_only=read_only, context_name=self.context_name, reads=reads)
        view._apis = self._apis
        return view

    def close(self) -> None:
        self.api.close()

    # -- plumbing -----------------------------------------------------------------------------

    def _group(self, name: str) -> Any:
        if name not in self._apis:
            self._apis[name] = {"core": k8s.CoreV1Api, "storage": k8s.StorageV1Api,
                                "coordination": k8s.CoordinationV1Api, "apps": k8s.AppsV1Api,
                                "batch": k8s.BatchV1Api,
                                "authentication": k8s.AuthenticationV1Api,
                                "custom": k8s.CustomObjectsApi}[name](self.api)
        return self._apis[name]

    def _record(self, operation: str, targets: tuple[str, ...], outcome: str,
                headers: Any = None) -> None:
        if self.recorder is not None:
            audit_id = headers.get("Audit-Id") if hasattr(headers, "get") else None
            self.recorder.append(ApiCall(service=SERVICE, operation=operation,
                                         targets=tuple(redact(t) for t in targets),
                                         outcome=redact(outcome), request_id=str(audit_id or "")))

    # -- shared reads -------------------------------------------------------------------------

    def _key(self, operation: str, *parts: Any) -> tuple[Any, ...]:
        return (SERVICE, id(self.api), operation, *parts)

    def _served(self, operation: str, targets: tuple[str, ...], request_id: str) -> None:
        """Record a read answered from the pass's shared reads: not a request."""
        assert self.reads is not None
        self.reads.served += 1
        if self.recorder is not None:
            self.recorder.append(ApiCall(service=SERVICE, operation=operation,
                                         targets=tuple(redact(t) for t in targets),
                                         outcome="cached", request_id=request_id))

    def _listed(self, operation: str, *args: Any) -> tuple[list[Obj], str] | None:
        """The items of a whole, unfiltered list read in this pass, and its request id."""
        if self.reads is None:
            return None
        hit = self.reads.get(self._key(operation, args, ()))
        return None if hit is None else (_items(hit[0]), hit[1])

    def _clear_reads(self) -> None:
        if self.reads is not None:
            self.reads.clear()

    def _get(self, group: str, operation: str, targets: tuple[str, ...], *args: Any,
             within: tuple[str, Callable[[Obj], bool]] | None = None,
             within_args: tuple[Any, ...] = ()) -> Obj:
        """A read of one object, shared in the pass; ``within`` names a list operation whose
        cached result holds the object too (and the test that finds it there)."""
        if self.reads is not None:
            key = self._key(operation, args)
            hit = self.reads.get(key)
            if hit is not None:
                self._served(operation, targets, hit[1])
                return dict(json.loads(hit[0]))
            listed = self._listed(within[0], *within_args) if within else None
            if within is not None and listed is not None:
                items, request_id = listed
                self._served(operation, targets, request_id)
                found = next((o for o in items if within[1](o)), None)
                if found is None:
                    raise PermanentError(f"{operation}: HTTP 404 NotFound: {', '.join(targets)} "
                                         "not found", service=SERVICE, operation=operation,
                                         code="NotFound")
                return found
        headers: list[Any] = []
        bodies: list[bytes] = []
        obj = self._request(group, operation, targets, *args, headers_out=headers,
                            body_out=bodies)
        if self.reads is not None:  # the answer as it came: the caller may change ``obj``
            self.reads.put(self._key(operation, args),
                           (bodies[0] if bodies else json.dumps(obj), self._audit_id(headers)))
        return obj

    @staticmethod
    def _audit_id(headers: list[Any]) -> str:
        h = headers[0] if headers else None
        return str((h.get("Audit-Id") if h is not None and hasattr(h, "get") else None) or "")

    def _request(self, group: str, operation: str, targets: tuple[str, ...], *args: Any,
                 read: bool = True, headers_out: list[Any] | None = None,
                 body_out: list[bytes] | None = None, **kwargs: Any) -> Obj:
        if not read and self.read_only:
            raise PolicyError(f"{operation} {', '.join(targets)}: refused, this is a read-only "
                              "(dry-run) client")
        if not read:
            self._clear_reads()
            try:
                return self._send(group, operation, targets, *args, read=False,
                                  headers_out=headers_out, **kwargs)
            finally:
                self._clear_reads()
        return self._send(group, operation, targets, *args, read=True, headers_out=headers_out,
                          body_out=body_out, **kwargs)

    def _send(self, group: str, operation: str, targets: tuple[str, ...], *args: Any,
              read: bool, headers_out: list[Any] | None = None,
              body_out: list[bytes] | None = None, **kwargs: Any) -> Obj:
        fn = getattr(self._group(group), operation)
        attempts = 1 + (self.read_retries if read else 0)
        for attempt in range(attempts):
            try:
                resp = fn(*args, _preload_content=False, _request_timeout=self.request_timeout,
                          **kwargs)
                body = resp.data
                self._record(operation, targets, "ok", getattr(resp, "headers", None))
                if headers_out is not None:
                    headers_out.append(getattr(resp, "headers", None))
                if body_out is not None and body:
                    body_out.append(body)
                return json.loads(body) if body else {}
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as e:
                err = translate(e, operation=operation)
                self._record(operation, targets, getattr(err, "code", "") or type(e).__name__,
                             getattr(e, "headers", None))
                # a conflict needs a fresh read, an expired list token a fresh list: not this call
                retry = (isinstance(err, RetryableError)
                         and getattr(err, "code", "") not in {"Conflict", "Expired"}
                         and attempt + 1 < attempts)
                if not retry:
                    raise err from e
                # brief, bounded backoff: the engine's step retries handle longer outages
                after = getattr(err, "retry_after", None)
                self.sleep(min(after if after is not None else 0.2 * 2**attempt, 2.0))
        raise AssertionError("unreachable")

    @staticmethod
    def _list_targets(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, ...]:
        # what was listed: the namespace and the selectors; none means the whole cluster
        return tuple(str(a) for a in args) + tuple(
            str(kwargs[k]) for k in ("field_selector", "label_selector") if kwargs.get(k))

    def _list(self, group: str, operation: str, *args: Any,
              within: tuple[str, Callable[[Obj], bool]] | None = None, **kwargs: Any) -> list[Obj]:
        """A whole list, shared in the pass; ``within`` names a wider list whose cached result
        holds these items too (and the test that picks them from it)."""
        key = self._key(operation, args, tuple(sorted(kwargs.items())))
        if self.reads is not None:
            hit = self.reads.get(key)
            wider = self._listed(within[0]) if within and hit is None else None
            if hit is not None or wider is not None:
                items, request_id = (_items(hit[0]), hit[1]) if hit is not None else (
                    [o for o in wider[0] if within[1](o)] if within and wider else [],
                    wider[1] if wider else "")
                self._served(operation, self._list_targets(args, kwargs), request_id)
                return list(items)
        ids: list[str] = []
        bodies: list[bytes] = []
        try:
            items = list(self._pages(group, operation, *args, request_ids=ids, bodies=bodies,
                                     **kwargs))
        except RetryableError as e:
            if e.code != "Expired":
                raise
            ids.clear()
            bodies.clear()
            items = list(self._pages(group, operation, *args, request_ids=ids, bodies=bodies,
                                     **kwargs))
        if self.reads is not None:  # one page: kept as it came (the caller may change ``items``)
            self.reads.put(key, (bodies[0] if len(bodies) == 1 else json.dumps(items),
                                 ids[0] if ids else ""))
        return items

    def _pages(self, group: str, operation: str, *args: Any, request_ids: list[str],
               bodies: list[bytes] | None = None, **kwargs: Any) -> Iterator[Obj]:
        targets = self._list_targets(args, kwargs)
        token: str | None = None
        while True:
            page_args = dict(kwargs, limit=self.page_size)
            if token:
                page_args["_continue"] = token
            headers: list[Any] = []
            page = self._request(group, operation, targets, *args, headers_out=headers,
                                 body_out=bodies, **page_args)
            request_ids.append(self._audit_id(headers))
            yield from page.get("items") or ()
            token = (page.get("metadata") or {}).get("continue") or None
            if not token:
                return

    # -- reads --------------------------------------------------------------------------------

    def get_node(self, name: str) -> Obj:
        return self._get("core", "read_node", (name,), name,
                         within=("list_node", lambda o: _named(o, name)))

    def list_nodes(self, *, label_selector: str | None = None) -> list[Obj]:
        kw: dict[str, Any] = {"label_selector": label_selector} if label_selector else {}
        return self._list("core", "list_node", **kw)

    def get_node_lease(self, node: str) -> Obj | None:
        """The kubelet's Lease in ``kube-node-lease`` (renewed every 10 s while it runs), or None."""
        return self.find(lambda: self._get(
            "coordination", "read_namespaced_lease", (f"{NODE_LEASES}/{node}",), node, NODE_LEASES,
            within=("list_namespaced_lease", lambda o: _named(o, node)),
            within_args=(NODE_LEASES,)))

    def list_node_leases(self) -> list[Obj]:
        """Every kubelet's Lease: one list, for a scan or a batch of nodes."""
        return self._list("coordination", "list_namespaced_lease", NODE_LEASES)

    def watch_nodes(self, *, resource_version: str, timeout: int) -> Iterator[Obj]:
        """One list (no version) or bounded watch pass over Nodes (``clients/kube_watch.py``)."""
        return self._follow("list_node", (), resource_version, timeout)

    def watch_node_leases(self, *, resource_version: str, timeout: int) -> Iterator[Obj]:
        return self._follow("list_namespaced_lease", (NODE_LEASES,), resource_version, timeout)

    def _follow(self, op: str, args: tuple[str, ...], rv: str, timeout: int) -> Iterator[Obj]:
        fn, t = getattr(self._group("core" if args == () else "coordination"), op), self.request_timeout
        return follow(lambda **kw: fn(*args, _preload_content=False, _request_timeout=(t, t + timeout), **kw),
                      operation=op, resource_version=rv, timeout=timeout, translate=translate,
                      page_size=self.page_size, record=lambda o, out, h: self._record(o, args, out, h))

    def list_pods(self, *, node: str | None = None, namespace: str | None = None,
                  label_selector: str | None = None) -> list[Obj]:
        kw: dict[str, Any] = {}
        if node:
            kw["field_selector"] = f"spec.nodeName={node}"
        if label_selector:
            kw["label_selector"] = label_selector

        def picked(o: Obj) -> bool:  # the same pods, picked from the list of every pod
            return ((not node or (o.get("spec") or {}).get("nodeName") == node)
                    and (not namespace or (o.get("metadata") or {}).get("namespace") == namespace))
        within = None if label_selector else ("list_pod_for_all_namespaces", picked)
        if namespace:
            return self._list("core", "list_namespaced_pod", namespace, within=within, **kw)
        return self._list("core", "list_pod_for_all_namespaces", within=within if node else None,
                          **kw)

    def list_pod_events(self, *, namespace: str, pod: str) -> list[Obj]:
        selector = f"involvedObject.name={pod},involvedObject.namespace={namespace}"
        return self._list("core", "list_namespaced_event", namespace, field_selector=selector)

    def list_events(self) -> list[Obj]:
        """Every event in every namespace: one paginated list, joined with the objects in memory."""
        return self._list("core", "list_event_for_all_namespaces")

    def list_object_events(self, *, kind: str, name: str, namespace: str | None = None) -> list[Obj]:
        """Events about one object; a cluster-scoped object's (a PV's) are kept in ``default``."""
        ns = namespace or "default"
        selector = f"involvedObject.kind={kind},involvedObject.name={name}"
        return self._list("core", "list_namespaced_event", ns, field_selector=selector)

    def get_pod(self, *, namespace: str, name: str) -> Obj:
        return self._get("core", "read_namespaced_pod", (f"{namespace}/{name}",), name, namespace)

    def list_volume_attachments(self) -> list[Obj]:
        """All VolumeAttachments; the only field selector is metadata.name, so filter client-side."""
        return self._list("storage", "list_volume_attachment")

    def get_volume_attachment(self, name: str) -> Obj:
        return self._get("storage", "read_volume_attachment", (name,), name,
                         within=("list_volume_attachment", lambda o: _named(o, name)))

    def get_pv(self, name: str) -> Obj:
        return self._get("core", "read_persistent_volume", (name,), name,
                         within=("list_persistent_volume", lambda o: _named(o, name)))

    def list_pvs(self) -> list[Obj]:
        return self._list("core", "list_persistent_volume")

    def get_pvc(self, *, namespace: str, name: str) -> Obj:
        return self._get("core", "read_namespaced_persistent_volume_claim",
                         (f"{namespace}/{name}",), name, namespace)

    def list_pvcs(self) -> list[Obj]:
        """Every PersistentVolumeClaim in every namespace."""
        return self._list("core", "list_persistent_volume_claim_for_all_namespaces")

    def list_storage_classes(self) -> list[Obj]:
        return self._list("storage", "list_storage_class")

    def list_csinodes(self) -> list[Obj]:
        return self._list("storage", "list_csi_node")

    # The workloads that would recreate a claim's consumer (k8s.claims.status): lists of one
    # namespace, read only when a claim has no live pod left to tell.

    def list_deployments(self, *, namespace: str) -> list[Obj]:
        return self._list("apps", "list_namespaced_deployment", namespace)

    def list_replica_sets(self, *, namespace: str) -> list[Obj]:
        return self._list("apps", "list_namespaced_replica_set", namespace)

    def list_stateful_sets(self, *, namespace: str) -> list[Obj]:
        return self._list("apps", "list_namespaced_stateful_set", namespace)

    def list_jobs(self, *, namespace: str) -> list[Obj]:
        return self._list("batch", "list_namespaced_job", namespace)

    # Karpenter's (and EKS Auto Mode's) NodeClaims, karpenter.sh/v1: how an Auto Mode machine is
    # fenced, since EC2 lets only EKS stop or terminate it.

    def list_nodeclaims(self) -> list[Obj]:
        return self._list("custom", "list_cluster_custom_object", *NODECLAIMS)

    def delete_nodeclaim(self, *, name: str, uid: str) -> Obj:
        """A DELETE of exactly this NodeClaim (``preconditions.uid``): Karpenter, whose finalizer
        holds it, drains the node, terminates the instance, then lets it go."""
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        return self._request("custom", "delete_cluster_custom_object", (name,), *NODECLAIMS, name,
                             body=body, read=False)

    # -- authentication -------------------------------------------------------------------------

    def create_token_review(self, token: str, audiences: Sequence[str]) -> Obj:
        """Who the API server says ``token`` belongs to, for ``audiences`` (empty: the API
        server's own): the ``TokenReview``'s status, ``authenticated``, ``user`` (``username``,
        ``groups``), ``audiences`` and ``error``. Nothing is stored; the token is never recorded
        (the request's target is the review, not the token), and an error never quotes it."""
        body: Obj = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                     "spec": {"token": token, "audiences": list(audiences)}}
        try:
            review = self._send("authentication", "create_token_review", ("TokenReview",),
                                body, read=True)
        except (RetryableError, PermanentError) as e:
            e.args = tuple(str(a).replace(token, "[REDACTED]") for a in e.args)
            raise
        return dict(review.get("status") or {})

    def find(self, read: Callable[[], Obj]) -> Obj | None:
        """``read()``, or None when the object does not exist."""
        try:
            return read()
        except PermanentError as e:
            if e.code == "NotFound":
                return None
            raise

    # -- writes -------------------------------------------------------------------------------

    def delete_pod(self, *, namespace: str, name: str, uid: str,
                   grace_period_seconds: int | None = None) -> Obj:
        """A graceful delete of exactly this pod (``preconditions.uid``: never its replacement).

        The pod's own grace period applies unless one is given; zero (a force delete, which only
        removes the API object and frees no volume) is refused before it is sent."""
        if grace_period_seconds is not None and grace_period_seconds < 1:
            raise PolicyError(f"delete pod {namespace}/{name}: a grace period below 1 s is a force "
                              "delete, which the bot never sends")
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        return self._request("core", "delete_namespaced_pod", (f"{namespace}/{name}",), name,
                             namespace, body=body, read=False)

    def delete_volume_attachment(self, *, name: str, uid: str) -> Obj:
        """A DELETE of exactly this VolumeAttachment (``preconditions.uid``); the attacher's
        finalizer is left for the attacher."""
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        return self._request("storage", "delete_volume_attachment", (name,), name, body=body,
                             read=False)

    _KINDS: ClassVar[dict[str, tuple[str, str, str]]] = {  # kind -> (group, read, replace)
        "Node": ("core", "read_node", "replace_node"),
        "PersistentVolume": ("core", "read_persistent_volume", "replace_persistent_volume"),
        "PersistentVolumeClaim": ("core", "read_namespaced_persistent_volume_claim",
                                  "replace_namespaced_persistent_volume_claim"),
        "VolumeAttachment": ("storage", "read_volume_attachment", "replace_volume_attachment"),
    }

    def update(self, *, kind: str, name: str, mutate: Mutation, namespace: str | None = None,
               current: Obj | None = None) -> tuple[Obj, bool]:
        """Read-modify-write checked by resourceVersion, retried on 409. Returns (object, changed).

        ``mutate`` gets a fresh copy of the live object on every attempt and returns the desired
        object, or None when the live object already satisfies it (then nothing is written).
        ``current``, an object just read, saves the first read; if it is stale the write gets a 409
        and the loop re-reads, so it can never cause a lost update.
        """
        group, read_op, replace_op = self._KINDS[kind]
        args: tuple[str, ...] = (name,) if namespace is None else (name, namespace)
        target = name if namespace is None else f"{namespace}/{name}"
        last: RetryableError | None = None
        for attempt in range(1 + self.conflict_retries):
            live = current if attempt == 0 and current is not None else self._request(
                group, read_op, (target,), *args)
            desired = mutate(json.loads(json.dumps(live)))
            if desired is None:
                return live, False
            desired.setdefault("metadata", {})["resourceVersion"] = live["metadata"]["resourceVersion"]
            headers: list[Any] = []
            try:
                written = self._request(group, replace_op, (target,), *args, body=desired,
                                        read=False, headers_out=headers)
            except RetryableError as e:
                if e.code != "Conflict":
                    raise
                last = e  # someone wrote in between: re-read and re-apply the mutation
                continue
            if self.reads is not None and written and not (
                    written.get("metadata") or {}).get("deletionTimestamp"):
                # the object as the write left it is as fresh as a read: a step that reads it
                # again in this pass is answered with it (any other read was cleared); not one
                # being deleted, which the API server removes once its last finalizer goes
                self.reads.put(self._key(read_op, args),
                               (json.dumps(written), self._audit_id(headers)))
            return written, True
        assert last is not None
        raise RetryableError(
            f"{replace_op} {target}: still conflicting after {1 + self.conflict_retries} attempts; "
            "another controller keeps writing this object", service=SERVICE, operation=replace_op,
            code="Conflict") from last


def _items(kept: str | bytes) -> list[Obj]:
    """A list's items, from what the pass's shared reads kept of it: the items (a list read in
    several pages) or the one page's body."""
    value = json.loads(kept)
    return list(value.get("items") or ()) if isinstance(value, dict) else list(value)


def bearer_token(*, kubeconfig: str | None = None, context: str | None = None) -> str:
    """The bearer token a kubeconfig context authenticates with: its ``token``, or what its exec
    plugin prints (``aws eks get-token``, ``gke-gcloud-auth-plugin``...), run as kubectl runs it.

    The terminal sends it to the bot's API (``server.token: kubeconfig``), which checks it with a
    TokenReview; a context that authenticates otherwise (client certificates) has none to send."""
    cfg = k8s.Configuration()
    try:
        k8s_config.load_kube_config(config_file=kubeconfig, context=context,
                                    client_configuration=cfg, persist_config=False)
    except (ConfigException, OSError) as e:
        raise ConfigError(f"cannot read a bearer token from the kubeconfig (kubeconfig="
                          f"{kubeconfig!r}, context={context!r}): {e}") from e
    value = str(cfg.api_key.get("authorization") or cfg.api_key.get("BearerToken") or "")
    scheme, _, token = value.strip().partition(" ")
    token = token.strip() if scheme.lower() == "bearer" else ""
    if not token:
        raise ConfigError(
            f"the kubeconfig context {context or '(current)'} yields no bearer token (client "
            "certificates are not sent to the bot): set server.token to env:VAR or file:PATH, or "
            "use a context with a token or an exec plugin such as `aws eks get-token`")
    return token
