"""Running one probe against both backends and reading what a client reads.

A probe is a function of a :class:`Side` (a backend's name and an admin ``CoreV1Api``) that returns
what a client observes, with the names, UIDs, resourceVersions and times that necessarily differ
replaced by placeholders. Both sides run at the same time (two threads), so a probe that waits
costs its wait once.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client as k
from kubernetes import config as kconfig
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from airflow_k8s_retry_testing import FakeCluster
from tools.controlplane import ControlPlane

T = TypeVar("T")

_VERSION = re.compile(r"\((\d+)\)")  # "(1234)": a resourceVersion quoted in a message
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass
class Side:
    name: str  # "fake" or "real"
    api: k.CoreV1Api
    kubeconfig: Path
    backend: FakeCluster | ControlPlane

    def unique(self, prefix: str) -> str:
        return f"{prefix}{uuid.uuid4().hex[:6]}"


@dataclass
class Backends:
    fake: FakeCluster
    real: ControlPlane

    def run(self, probe: Callable[[Side], T]) -> dict[str, T]:
        """``probe`` against both backends at once; returns ``{"fake": ..., "real": ...}``."""
        with ThreadPoolExecutor(2) as pool:
            futures = {
                "fake": pool.submit(_on, "fake", self.fake.kubeconfig, self.fake, probe),
                "real": pool.submit(_on, "real", self.real.kubeconfig, self.real, probe),
            }
            return {name: f.result() for name, f in futures.items()}


def _on(name: str, kubeconfig: Path, backend: FakeCluster | ControlPlane, probe: Callable[[Side], T]) -> T:
    with core_api(kubeconfig) as api:
        return probe(Side(name, api, kubeconfig, backend))


@contextmanager
def core_api(kubeconfig: Path) -> Iterator[k.CoreV1Api]:
    api_client = kconfig.new_client_from_config(str(kubeconfig))
    try:
        yield k.CoreV1Api(api_client)
    finally:
        api_client.close()


def pod_body(name: str, image: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"test": "fidelity"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "base", "image": image}], **spec},
    }


def as_json(api: k.CoreV1Api, obj: Any) -> dict[str, Any]:
    return dict(api.api_client.sanitize_for_serialization(obj))


def masked(value: Any, **names: str) -> Any:
    """``value`` with UIDs and the given names (``NAME=actual``) replaced by placeholders."""
    text = json.dumps(value)
    for placeholder, actual in names.items():
        text = text.replace(actual, placeholder)
    return json.loads(_VERSION.sub("(RV)", _UID.sub("UID", text)))


def status_of(exc: ApiException, **names: str) -> dict[str, Any]:
    """The HTTP code and the Status body a client decodes from an error answer, masked."""
    body = json.loads(exc.body)
    return {"http": exc.status, "body": masked(body, **names)}


def error_of(call: Callable[[], object], **names: str) -> dict[str, Any]:
    try:
        call()
    except ApiException as exc:
        return status_of(exc, **names)
    raise AssertionError("the call succeeded; the probe expects an error answer")


def delete_now(api: k.CoreV1Api, name: str, namespace: str = "default") -> None:
    try:
        api.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    except ApiException as exc:
        if exc.status != 404:
            raise


def follow(
    api: k.CoreV1Api,
    name: str,
    until: Callable[[str, dict[str, Any]], bool],
    *,
    resource_version: str,
    timeout: float,
    namespace: str = "default",
) -> list[tuple[str, dict[str, Any]]]:
    """Watch one pod from ``resource_version`` until ``until(type, pod)`` holds or ``timeout``
    passes; returns every (type, pod) seen, the last one included."""
    seen: list[tuple[str, dict[str, Any]]] = []
    deadline = time.monotonic() + timeout
    rv = resource_version
    while (left := deadline - time.monotonic()) > 0:
        w = watch.Watch()
        for event in w.stream(
            api.list_namespaced_pod,
            namespace,
            field_selector=f"metadata.name={name}",
            resource_version=rv,
            timeout_seconds=max(1, int(left)),
        ):
            pod = as_json(api, event["object"])
            rv = pod["metadata"]["resourceVersion"]
            seen.append((event["type"], pod))
            if until(event["type"], pod):
                w.stop()
                return seen
    return seen


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in pod.get("status", {}).get("conditions") or []:
        if c["type"] == kind:
            return dict(c)
    return None


def assert_same(seen: dict[str, Any]) -> None:
    """The probe read the same on both backends (both shown when it did not)."""
    assert seen["fake"] == seen["real"], "FakeCluster and the real control plane differ:\n" + json.dumps(
        seen, indent=1, sort_keys=True, default=str
    )
