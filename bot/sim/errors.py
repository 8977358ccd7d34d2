"""API errors as the Kubernetes API server reports them: an HTTP code plus a ``Status`` body."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A request the fake API server refuses; rendered as a ``Status`` object."""

    def __init__(self, code: int, reason: str, message: str, *,
                 details: dict[str, Any] | None = None, metadata: dict[str, Any] | None = None,
                 retry_after: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}
        self.metadata = metadata or {}
        self.retry_after = retry_after

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": dict(self.metadata),
                                "status": "Failure", "message": self.message,
                                "reason": self.reason, "code": self.code}
        if self.details:
            body["details"] = self.details
        return body


def not_found(kind_plural: str, group: str, name: str) -> ApiError:
    qual = f"{kind_plural}.{group}" if group else kind_plural
    return ApiError(404, "NotFound", f'{qual} "{name}" not found',
                    details={"name": name, "group": group, "kind": kind_plural})


def conflict(kind_plural: str, group: str, name: str) -> ApiError:
    qual = f"{kind_plural}.{group}" if group else kind_plural
    return ApiError(409, "Conflict",
                    f'Operation cannot be fulfilled on {qual} "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again",
                    details={"name": name, "group": group, "kind": kind_plural})


def already_exists(kind_plural: str, group: str, name: str) -> ApiError:
    qual = f"{kind_plural}.{group}" if group else kind_plural
    return ApiError(409, "AlreadyExists", f'{qual} "{name}" already exists',
                    details={"name": name, "group": group, "kind": kind_plural})


def invalid(kind: str, group: str, name: str, field: str, value: Any, why: str) -> ApiError:
    qual = f"{kind}.{group}" if group else kind
    return ApiError(422, "Invalid",
                    f'{qual} "{name}" is invalid: {field}: Invalid value: {value!r}: {why}',
                    details={"name": name, "group": group, "kind": kind,
                             "causes": [{"reason": "FieldValueInvalid", "message": why,
                                         "field": field}]})
