"""A write whose body arrives after the object went answers 404 and brings nothing back.

kube-apiserver reads, changes and writes an object in one step (a guaranteed update), so a PATCH,
PUT, DELETE or eviction of a pod that a confirmed deletion removed meanwhile answers 404 NotFound.
The simulator read the pod when the request's headers arrived and wrote it when its body did: the
kubelet could remove the pod in between, and a late stamp (the worker's PATCH of a pod the trigger
had just deleted at its execution deadline) stored the stale copy again, a pod no kubelet would
ever remove.

Each case holds a write's body back until the pod is gone (a manual clock: the kubelet stops the
containers and confirms the deletion only when the test advances it), then sends it.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest

from airflow_k8s_retry_testing import FakeCluster
from tests.simulated.simulator.pods import BASE_SCENARIO, LONG, phase, pod_body

NAME = "late-write"


@pytest.fixture
def manual() -> Iterator[FakeCluster]:
    with FakeCluster(BASE_SCENARIO, clock="manual") as running:
        yield running


def running_pod_under_deletion(cluster: FakeCluster) -> dict[str, Any]:
    """A running pod, deleted with its grace: the kubelet stops it when the clock next moves."""
    api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(cluster.kubeconfig)))
    api.create_namespaced_pod("default", pod_body(NAME, LONG))
    while phase(cluster.pod(NAME)) != "Running":
        assert cluster.advance(cluster.pending_timers()[0] - cluster.sim_time) >= 1
    api.delete_namespaced_pod(NAME, "default")
    pod = cluster.pod(NAME)
    assert pod is not None and pod["metadata"].get("deletionTimestamp")
    api.api_client.close()
    return pod


def held_request(
    cluster: FakeCluster, method: str, path: str, body: bytes, content_type: str
) -> socket.socket:
    """Send a request's headers only, and return once the simulator has taken the request in."""
    before = sum(cluster.request_counts().values())
    sock = socket.create_connection(("127.0.0.1", cluster.port))
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {cluster.token}\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    sock.sendall(head.encode())
    deadline = time.monotonic() + 10
    while sum(cluster.request_counts().values()) == before:  # counted as the headers are read
        assert time.monotonic() < deadline, "the simulator never took the request in"
        time.sleep(0.001)
    return sock


def answer(sock: socket.socket, body: bytes) -> int:
    """Send the held body and return the response's status code."""
    sock.sendall(body)
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    sock.close()
    return int(received.split(b" ", 2)[1])


def stamp(pod: dict[str, Any]) -> tuple[bytes, str]:
    return json.dumps(
        {"metadata": {"annotations": {"stamp": "late"}}}
    ).encode(), "application/merge-patch+json"


def replace(pod: dict[str, Any]) -> tuple[bytes, str]:
    new = {k: pod[k] for k in ("apiVersion", "kind", "metadata", "spec")}
    new["metadata"] = {k: v for k, v in pod["metadata"].items() if k != "resourceVersion"}
    new["metadata"]["annotations"] = {"stamp": "late"}
    return json.dumps(new).encode(), "application/json"


def delete_options(pod: dict[str, Any]) -> tuple[bytes, str]:
    return json.dumps({"preconditions": {"uid": pod["metadata"]["uid"]}}).encode(), "application/json"


def eviction(pod: dict[str, Any]) -> tuple[bytes, str]:
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": NAME, "namespace": "default"}}
    return json.dumps(body).encode(), "application/json"


POD = f"/api/v1/namespaces/default/pods/{NAME}"
WRITES = [
    pytest.param("PATCH", POD, stamp, id="patch"),
    pytest.param("PUT", POD, replace, id="update"),
    pytest.param("DELETE", POD, delete_options, id="delete"),
    pytest.param("POST", f"{POD}/eviction", eviction, id="eviction"),
]


@pytest.mark.parametrize(("method", "path", "body_of"), WRITES)
def test_a_write_of_a_pod_removed_before_its_body_arrived_answers_not_found(
    manual: FakeCluster, method: str, path: str, body_of: Any
) -> None:
    pod = running_pod_under_deletion(manual)
    body, content_type = body_of(pod)
    sock = held_request(manual, method, path, body, content_type)
    manual.advance(pod["spec"].get("terminationGracePeriodSeconds", 30))  # stop, then confirm
    assert manual.pod(NAME) is None
    assert answer(sock, body) == 404
    assert manual.pod(NAME) is None
    assert manual.pods() == []
