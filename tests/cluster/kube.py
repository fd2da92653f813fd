"""Small helpers the cluster tests share: an admin client, pods, and waiting on a real watch."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kubernetes import client as k
from kubernetes import config as kconfig
from kubernetes import watch


@contextmanager
def core_api(kubeconfig: Path) -> Iterator[k.CoreV1Api]:
    api_client = kconfig.new_client_from_config(str(kubeconfig))
    try:
        yield k.CoreV1Api(api_client)
    finally:
        api_client.close()


def pod_body(name: str, image: str, **spec: Any) -> dict[str, Any]:
    containers = spec.pop("containers", None) or [{"name": "base", "image": image}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"test": "cluster-tier"}},
        "spec": {"restartPolicy": "Never", "containers": containers, **spec},
    }


def as_json(api: k.CoreV1Api, obj: Any) -> dict[str, Any]:
    return dict(api.api_client.sanitize_for_serialization(obj))


def wait_for_pod(
    api: k.CoreV1Api,
    name: str,
    predicate: Callable[[dict[str, Any]], bool],
    *,
    namespace: str = "default",
    timeout: float = 60.0,
) -> dict[str, Any]:
    """Watch one pod until ``predicate(pod_json)`` holds; returns that pod, or fails with the last seen."""
    deadline = time.monotonic() + timeout
    last: dict[str, Any] | None = None
    pod = api.read_namespaced_pod(name, namespace)
    last = as_json(api, pod)
    if predicate(last):
        return last
    rv = pod.metadata.resource_version
    while (left := deadline - time.monotonic()) > 0:
        w = watch.Watch()
        for event in w.stream(
            api.list_namespaced_pod,
            namespace,
            field_selector=f"metadata.name={name}",
            resource_version=rv,
            timeout_seconds=max(1, int(left)),
        ):
            obj = as_json(api, event["object"])
            rv = obj["metadata"]["resourceVersion"]
            if event["type"] == "DELETED":
                raise AssertionError(f"pod {name} was deleted while waiting; last seen: {last}")
            last = obj
            if predicate(obj):
                w.stop()
                return obj
    raise AssertionError(f"pod {name}: condition not reached in {timeout} s; last seen: {last}")


def waiting_reason(pod: dict[str, Any]) -> str | None:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return (statuses[0].get("state", {}).get("waiting") or {}).get("reason") if statuses else None


def terminated(pod: dict[str, Any]) -> dict[str, Any] | None:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return (statuses[0].get("state", {}).get("terminated")) if statuses else None


def delete_now(api: k.CoreV1Api, name: str, namespace: str = "default") -> None:
    from kubernetes.client.exceptions import ApiException

    try:
        api.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    except ApiException as exc:
        if exc.status != 404:
            raise


def eventually(check: Callable[[], bool], *, timeout: float, interval: float = 0.05) -> bool:
    """Re-check ``check`` until it holds (for state only a request can observe, such as RBAC)."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)


def wait_for_node_ready(api: k.CoreV1Api, name: str, timeout: float = 60.0) -> bool:
    """Watch one node until its Ready condition is True."""
    w = watch.Watch()
    selector = f"metadata.name={name}"
    for event in w.stream(api.list_node, field_selector=selector, timeout_seconds=int(timeout)):
        conditions = {c.type: c.status for c in (event["object"].status.conditions or [])}
        if conditions.get("Ready") == "True":
            w.stop()
            return True
    return False
