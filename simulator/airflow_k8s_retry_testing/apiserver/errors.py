"""API errors and the ``Status`` bodies a Kubernetes API server answers them with."""

from __future__ import annotations

from airflow_k8s_retry_testing.store import Obj

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
}

Cause = tuple[str, str, str]  # (reason, field, message)


class ApiError(Exception):
    """Answer the request with a Status body (``metadata``: its list metadata, such as the
    ``continue`` token an expired one is answered with)."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        details: Obj | None = None,
        metadata: Obj | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = details
        self.metadata = metadata


def status_body(
    code: int, message: str, reason: str, details: Obj | None = None, metadata: Obj | None = None
) -> Obj:
    body: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": metadata or {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


def success(name: str, kind: str, uid: str) -> Obj:
    """The ``Status`` a DELETE of an object without graceful deletion answers."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": name, "kind": kind, "uid": uid},
    }


def not_found(resource: str, name: str) -> ApiError:
    return ApiError(404, f'{resource} "{name}" not found', details={"name": name, "kind": resource})


def no_such_resource() -> ApiError:
    return ApiError(404, "the server could not find the requested resource", details={})


def not_allowed(verb: str) -> ApiError:
    return ApiError(405, f"the server does not allow this method on the requested resource ({verb})")


def invalid(kind: str, name: str, causes: list[Cause]) -> ApiError:
    text = "; ".join(f"{f}: {m}" for _, f, m in causes)
    summary = text if len(causes) == 1 else f"[{', '.join(f'{f}: {m}' for _, f, m in causes)}]"
    return ApiError(
        422,
        f'{kind} "{name}" is invalid: {summary}',
        details={
            "name": name,
            "kind": kind,  # the Kind, as the API server writes it for Invalid (not the resource)
            "causes": [{"reason": r, "message": m, "field": f} for r, f, m in causes],
        },
    )
