"""Pods as the simulator's own tests write them (a minimal manifest; the scenario's images and pace)
and read them back (phase, container states, a state caught while it lasts), and a client that
does not retry on its own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes

from airflow_k8s_retry_testing import FakeCluster

FAST = 0.01  # real seconds per simulated second
LONG = "example.com/long:1"  # runs for ten simulated minutes
BASE_SCENARIO: dict[str, Any] = {"images": {LONG: {"run": {"duration_seconds": 600}}}}


def pod_body(
    name: str,
    image: str = "busybox:1.36",
    *,
    labels: dict[str, str] | None = None,
    restart_policy: str = "Never",
    **container: Any,
) -> dict[str, Any]:
    """A minimal pod manifest, as a pod launcher would send it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": "sim-test"}},
        "spec": {
            "restartPolicy": restart_policy,
            "containers": [{"name": "base", "image": image, **container}],
        },
    }


def container_state(pod: dict[str, Any] | None, name: str = "base") -> dict[str, Any]:
    """The state dict of one container ({} when the pod or the status is missing)."""
    if not pod:
        return {}
    status = pod.get("status") or {}
    for cs in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        if cs["name"] == name:
            return dict(cs["state"])
    return {}


def waiting_reason(pod: dict[str, Any] | None, name: str = "base") -> str | None:
    return (container_state(pod, name).get("waiting") or {}).get("reason")


def phase(pod: dict[str, Any] | None) -> str | None:
    return ((pod or {}).get("status") or {}).get("phase")


def pod_is(name: str, check: Callable[[dict[str, Any] | None], bool]) -> Callable[[FakeCluster], bool]:
    return lambda cluster: check(cluster.pod(name))


def snapshot_when(
    cluster: FakeCluster, name: str, check: Callable[[dict[str, Any] | None], bool], timeout: float = 5
) -> dict[str, Any]:
    """The pod as it was when ``check`` first held (states such as ErrImagePull are brief)."""
    seen: dict[str, dict[str, Any]] = {}

    def predicate(c: FakeCluster) -> bool:
        pod = c.pod(name)
        if pod is not None and check(pod):
            seen["pod"] = pod
            return True
        return False

    assert cluster.wait_for(predicate, timeout), f"pod {name} never reached the expected state"
    return seen["pod"]


def api_for(kubeconfig: Path) -> kubernetes.client.CoreV1Api:
    """A client without urllib3's own retries (which would retry a 429 carrying Retry-After)."""
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    configuration.retries = False
    return kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(configuration))
