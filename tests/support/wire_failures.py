"""The package's ``KubeError`` for each way a request to the API server can fail, made as ``kube/``
makes it: the client library's own exception (aiohttp's) translated, or an answer's status."""

from __future__ import annotations

import aiohttp

from airflow_k8s_retry.kube.errors import KubeError, error_for_status, translate


def refused() -> KubeError:
    """What a request to a stopped API server raises: aiohttp cannot connect (errno 111)."""
    cause = aiohttp.ClientConnectorError(
        aiohttp.client_reqrep.ConnectionKey("127.0.0.1", 6443, True, True, None, None, None),
        ConnectionRefusedError(111, "Connection refused"),
    )
    try:
        raise translate(cause) from cause
    except KubeError as exc:
        return exc


def dropped() -> KubeError:
    """An open watch whose server went away mid-stream."""
    cause = aiohttp.ServerDisconnectedError()
    try:
        raise translate(cause) from cause
    except KubeError as exc:
        return exc


def timed_out() -> KubeError:
    cause = aiohttp.ServerTimeoutError("Timeout on reading data from socket")
    try:
        raise translate(cause) from cause
    except KubeError as exc:
        return exc


def unavailable() -> KubeError:
    return error_for_status(503, "the server is currently unable to handle the request")
