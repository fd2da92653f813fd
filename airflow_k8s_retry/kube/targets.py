"""Before a sensor defers: can what it waits for ever be seen? Asked once, synchronously.

A sensor may wait days for a pod to appear, so a mistake that no waiting can fix must be caught
before it waits: a label selector the API server cannot parse, credentials that may not read pods
(or Jobs), a namespace that does not exist. Each is one request and, when it fails, one
:class:`TargetError` with a one-line message naming the problem and the fix. Transient failures
(5xx, timeouts) are not the target's fault: they are raised as the ordinary :class:`KubeError` and
the caller decides (the sensor defers anyway; the watch rides them out).

The namespace itself is read only when listing its pods was refused or found none. Reading a
namespace is cluster-scoped, which the namespaced Role (``deploy/rbac/``) does not grant, so
reading it at every start would be refused every time; a 403 there says nothing about the
namespace and is not an error. A namespace that does not exist can have no RoleBinding, so under
namespaced RBAC listing its pods is refused: there the read tells "no such namespace" (404) from
"no such grant". Credentials that may list pods everywhere see a namespace that does not exist as
an empty one: there the read tells it from a namespace whose pods have not appeared yet.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow_k8s_retry.kube.errors import BadRequest, Forbidden, KubeError, NotFound
from airflow_k8s_retry.kube.pods import translated

if TYPE_CHECKING:
    import kubernetes.client

_RBAC_HINT = "grant get, list and watch on {what} in that namespace (see docs/sensor.md)"


class TargetError(KubeError):
    """What a sensor waits for can never be seen; no retry can change that."""


def check_target(
    api_client: kubernetes.client.ApiClient,
    namespace: str,
    *,
    pod_name: str | None = None,
    label_selector: str | None = None,
    job_name: str | None = None,
) -> None:
    """Raise :class:`TargetError` when the target cannot be watched; return quietly otherwise.

    Example::

        check_target(api_client, "etl", label_selector="app=export,run=42")
    """
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    # 1. Listing pods, as the watch will (with the selector: the API server checks its syntax).
    try:
        with translated():
            listed = core.list_namespaced_pod(
                namespace, label_selector=label_selector or "", limit=1, _request_timeout=(10, 30)
            )
    except BadRequest as exc:
        raise TargetError(
            f"label_selector {label_selector!r} is not a valid label selector: {exc}; "
            "write it as key=value, key!=value, key in (a,b), key or !key, joined by commas",
            status=400,
        ) from None
    except Forbidden as exc:
        _exists(core, namespace)
        raise TargetError(
            f"the connection may not list pods in namespace {namespace!r} ({exc}); check that the "
            "namespace exists (no grant can be bound in one that does not), or "
            + _RBAC_HINT.format(what="pods"),
            status=403,
        ) from None
    if not getattr(listed, "items", None):
        _exists(core, namespace)  # an empty list is also what a namespace that does not exist gives
    # 2. Reading the one pod, or the Job (a missing one is what the sensor waits for).
    if pod_name:
        _readable(
            lambda: core.read_namespaced_pod(pod_name, namespace, _request_timeout=(10, 30)),
            "pods",
            namespace,
        )
    if job_name:
        batch = client.BatchV1Api(api_client)
        _readable(
            lambda: batch.list_namespaced_job(namespace, limit=1, _request_timeout=(10, 30)),
            "jobs (API group batch)",
            namespace,
        )


def _exists(core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    """Raise :class:`TargetError` if the API says ``namespace`` does not exist. Reading it needs a
    cluster-scoped grant many credentials lack: any other answer says nothing about it."""
    try:
        with translated():
            core.read_namespace(namespace, _request_timeout=(10, 30))
    except NotFound:
        raise TargetError(
            f"namespace {namespace!r} does not exist; check the sensor's namespace "
            "(or the connection's default namespace)",
            status=404,
        ) from None
    except KubeError:
        pass


def _readable(fn: Callable[[], Any], what: str, namespace: str) -> None:
    try:
        with translated():
            fn()
    except NotFound:
        return
    except Forbidden as exc:
        raise TargetError(
            f"the connection may not read {what} in namespace {namespace!r} ({exc}); "
            + _RBAC_HINT.format(what=what),
            status=403,
        ) from None
