"""Shared fixtures: a running simulator with fast timings (the plugin's ``make_fake_cluster``), and
both real clients pointed at it. What the tests build and read is in ``pods.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import kubernetes
import pytest
import pytest_asyncio

from airflow_k8s_retry_testing import FakeCluster
from tests.simulated.simulator.pods import BASE_SCENARIO, FAST


@pytest.fixture
def cluster(make_fake_cluster: Callable[..., FakeCluster]) -> FakeCluster:
    return make_fake_cluster(BASE_SCENARIO, time_scale=FAST, bookmark_interval=0.2)


@pytest.fixture
def core(cluster: FakeCluster) -> Iterator[kubernetes.client.CoreV1Api]:
    client = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
    yield kubernetes.client.CoreV1Api(client)
    client.close()


@pytest_asyncio.fixture
async def acore(cluster: FakeCluster) -> AsyncIterator[Any]:
    import kubernetes_asyncio

    client = await kubernetes_asyncio.config.new_client_from_config(str(cluster.kubeconfig))
    try:
        yield kubernetes_asyncio.client.CoreV1Api(client)
    finally:
        await client.close()
