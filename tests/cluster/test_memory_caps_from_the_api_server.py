"""The caps on memory growth as a real kube-apiserver serves them: a LimitRange, a ResourceQuota
whose status the real quota controller keeps, and the KWOK nodes' allocatable memory; and a read
the service account may not make skips its cap."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from kubernetes import client as k

from airflow_k8s_retry.kube.pods import PodClient
from airflow_k8s_retry.kube.quantity import parse_memory
from airflow_k8s_retry.memory_growth import MemoryGrowth, format_memory, next_size, read_caps
from airflow_k8s_retry.memory_growth import Size as MemorySize
from tests.cluster.kube import core_api


@pytest.fixture
def namespace(kubeconfig: Path) -> Iterator[tuple[k.CoreV1Api, str]]:
    name = f"caps-{uuid.uuid4().hex[:8]}"
    with core_api(kubeconfig) as api:
        api.create_namespace({"metadata": {"name": name}})
        try:
            yield api, name
        finally:
            api.delete_namespace(name)


def test_limit_range_quota_and_node_caps_read_from_the_api_server(namespace: tuple[k.CoreV1Api, str]) -> None:
    api, ns = namespace
    api.create_namespaced_limit_range(
        ns,
        {
            "metadata": {"name": "per-container"},
            "spec": {"limits": [{"type": "Container", "max": {"memory": "6Gi"}}]},
        },
    )
    api.create_namespaced_resource_quota(
        ns, {"metadata": {"name": "team"}, "spec": {"hard": {"limits.memory": "5Gi", "pods": "10"}}}
    )
    # The quota controller fills in the status (hard and used) shortly after the quota is made.
    deadline = time.monotonic() + 60
    while not (api.read_namespaced_resource_quota("team", ns).status or k.V1ResourceQuotaStatus()).used:
        assert time.monotonic() < deadline, "the quota controller never wrote the quota's status"
        time.sleep(0.5)
    pod = {
        "metadata": {"namespace": ns},
        "spec": {
            "containers": [
                {"name": "base", "resources": {"limits": {"memory": "2Gi"}}},
                {"name": "helper", "resources": {"limits": {"memory": "1Gi"}}},
            ]
        },
    }
    lines: list[str] = []
    client = PodClient(api.api_client)
    caps = read_caps(client.list_sizing, ns, pod, "base", lambda msg, *a: lines.append(msg % a))
    nodes = api.list_node().items
    largest = max(
        (n for n in nodes if not n.spec.unschedulable),
        key=lambda n: parse_memory(n.status.allocatable["memory"], "node"),
    )
    largest_bytes = parse_memory(largest.status.allocatable["memory"], "node")
    node = f"{largest.metadata.name}: {format_memory(largest_bytes)}"
    assert lines == []
    assert [(c.name, c.bytes) for c in caps] == [
        ("LimitRange per-container (max 6Gi per container)", parse_memory("6Gi", "")),
        ("ResourceQuota team (5Gi of limits.memory left)", parse_memory("4Gi", "")),
        (f"the largest node's allocatable memory ({node})", largest_bytes - parse_memory("1Gi", "")),
    ]
    step = next_size(MemoryGrowth(factor=3), "base", MemorySize(parse_memory("2Gi", "")), 1, caps)
    assert step is not None and step.size is not None
    assert step.size.limit == min(Decimal(6 * 2**30), parse_memory("4Gi", ""), largest_bytes - 2**30)
