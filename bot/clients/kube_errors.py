"""How the Kubernetes client's failures read: an ``ApiException`` or a transport error from the
SDK becomes the ``bot.errors`` exception the engine acts on (``translate``), with the API server's
Status reason and message, redacted, and its ``Retry-After``.

A module apart from ``bot/clients/kube.py``, which calls in here, to keep that one within the size
budget; with it, the only importer of the ``kubernetes`` SDK in the product.
"""

from __future__ import annotations

import json

import urllib3
from kubernetes.client.exceptions import ApiException

from bot.clients.redact import redact
from bot.errors import PermanentError, RetryableError

SERVICE = "kubernetes"


def _status_reason(e: ApiException) -> tuple[str, str]:
    """The API server's Status ``reason`` and ``message`` when the body carries one."""
    try:
        body = json.loads(e.body or b"{}")
    except (ValueError, TypeError):
        return e.reason or "", redact(str(e.body or "")[:300])
    if not isinstance(body, dict):
        return e.reason or "", redact(str(body)[:300])
    return str(body.get("reason") or e.reason or ""), redact(str(body.get("message") or ""))


def _retry_after(e: ApiException) -> float | None:
    headers = e.headers or {}
    raw = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


def translate(e: Exception, *, operation: str) -> Exception:
    """The ``bot.errors`` exception for an SDK or transport failure (raise it ``from e``)."""
    if isinstance(e, ApiException):
        status = int(e.status or 0)
        reason, message = _status_reason(e)
        text = f"{operation}: HTTP {status} {reason}: {message}".strip()
        if status == 0:  # no HTTP response at all (TLS failure, refused request)
            return RetryableError(text, service=SERVICE, operation=operation, code="NoResponse")
        if status == 409:
            return RetryableError(text, service=SERVICE, operation=operation, code="Conflict")
        if status == 410:  # a list's continue token expired: listing again from the start works
            return RetryableError(text, service=SERVICE, operation=operation, code="Expired")
        if status == 429:
            return RetryableError(text, service=SERVICE, operation=operation, code="TooManyRequests",
                                  retry_after=_retry_after(e))
        if status >= 500:
            return RetryableError(text, service=SERVICE, operation=operation,
                                  code=reason or "ServerError", retry_after=_retry_after(e))
        if status == 404:
            return PermanentError(text, service=SERVICE, operation=operation, code="NotFound")
        return PermanentError(text, service=SERVICE, operation=operation, code=reason or str(status))
    if isinstance(e, urllib3.exceptions.HTTPError | OSError):
        cause = e.reason if isinstance(e, urllib3.exceptions.MaxRetryError) else e
        timeout = isinstance(cause, urllib3.exceptions.TimeoutError | TimeoutError)
        return RetryableError(redact(f"{operation}: cannot reach the API server: {e}"), service=SERVICE,
                              operation=operation, code="Timeout" if timeout else "ConnectionError")
    return e
