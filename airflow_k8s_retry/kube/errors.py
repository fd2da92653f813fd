"""This package's own API errors, by HTTP status.

Everything in ``kube/`` translates ``kubernetes.client.ApiException``,
``kubernetes_asyncio.client.ApiException``, ``aiohttp`` and timeout errors into these classes with
:func:`translate`; nothing above ``kube/`` catches a client-library exception.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable, Iterator
from typing import Any


class KubeError(Exception):
    """An API call failed. ``status`` is the HTTP status, or None when no answer came back."""

    status: int | None = None
    transient = False

    def __init__(
        self, message: str, *, status: int | None = None, reason: str = "", body: Any = None
    ) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status
        self.reason = reason
        self.body = body

    @property
    def message(self) -> str:
        return str(self)


class BadRequest(KubeError):
    status = 400


class Unauthorized(KubeError):
    status = 401


class Forbidden(KubeError):
    status = 403


class NotFound(KubeError):
    status = 404


class Conflict(KubeError):
    status = 409


class Gone(KubeError):
    status = 410


class Invalid(KubeError):
    status = 422


class TooManyRequests(KubeError):
    status = 429
    transient = True


class ServerError(KubeError):
    status = 500
    transient = True


class TransportError(KubeError):
    """No HTTP answer: connection refused or reset, DNS failure, timeout."""

    transient = True


class CertificateError(TransportError):
    """The server's TLS certificate did not verify: a wrong CA, which no retry fixes."""

    transient = False


def connection_refused(exc: BaseException) -> bool:
    """Whether ``exc`` is a :class:`TransportError` for a connection the server refused, reset or
    closed without an answer (it is down or restarting), judged by its causes; not a timeout (a
    server too slow to answer), not a certificate failure, not an HTTP answer."""
    if not isinstance(exc, TransportError) or isinstance(exc, CertificateError):
        return False
    import aiohttp

    causes = list(_chain([exc.__cause__, exc.__context__], lambda item: [getattr(item, "os_error", None)]))
    if any(isinstance(item, TimeoutError) for item in causes):
        return False
    return any(isinstance(item, ConnectionError | aiohttp.ClientConnectionError) for item in causes)


def _certificate_failure(exc: BaseException) -> bool:
    """Whether a certificate verification failure is anywhere in ``exc``'s causes (urllib3 keeps it
    in ``reason``, aiohttp in ``os_error`` or ``__cause__``)."""
    return any(
        isinstance(item, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(item)
        for item in _chain(
            [exc], lambda item: [getattr(item, "reason", None), getattr(item, "os_error", None), *item.args]
        )
    )


def _chain(first: list[object], more: Callable[[BaseException], list[Any]]) -> Iterator[BaseException]:
    """Each exception reachable from ``first`` once, through causes, contexts and ``more(it)``."""
    seen: set[int] = set()
    pending = list(first)
    while pending:
        item = pending.pop()
        if isinstance(item, BaseException) and id(item) not in seen:
            seen.add(id(item))
            yield item
            pending += [item.__cause__, item.__context__, *more(item)]


_BY_STATUS: dict[int, type[KubeError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def error_for_status(status: int, message: str, *, reason: str = "", body: Any = None) -> KubeError:
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else KubeError)
    return cls(message, status=status, reason=reason, body=body)


def status_fields(body: Any, fallback: str) -> tuple[str, str, Any]:
    """``message``, ``reason`` and the parsed body of a Kubernetes ``Status`` answer."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            return (body.strip() or fallback), "", body
    if isinstance(body, dict):
        return str(body.get("message") or fallback), str(body.get("reason") or ""), body
    return fallback, "", body


def translate(exc: BaseException) -> KubeError:
    """Turn a client-library or transport exception into a :class:`KubeError`."""
    if isinstance(exc, KubeError):
        return exc
    status = getattr(exc, "status", None)
    # kubernetes>=32 raises subclasses such as NotFoundException; match the whole hierarchy.
    is_api_exception = any(cls.__name__ == "ApiException" for cls in type(exc).__mro__)
    if isinstance(status, int) and status > 0 and is_api_exception:
        body = getattr(exc, "body", None)
        message, reason, _ = status_fields(body, getattr(exc, "reason", None) or f"HTTP {status}")
        return error_for_status(status, message, reason=reason, body=body)
    if _certificate_failure(exc):
        return CertificateError(f"{type(exc).__name__}: {exc}".rstrip(": "))
    return TransportError(f"{type(exc).__name__}: {exc}".rstrip(": "))
