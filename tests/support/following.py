"""The sensor's trigger (``PodTargetTrigger``) run in the test's event loop as a triggerer runs it, and
the pods and Jobs it follows, created in a FakeCluster (or a real control plane) through the real
``kubernetes`` client."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes.config import new_client_from_config

from airflow_k8s_retry.kube.pods import PodClient
from airflow_k8s_retry.triggers.target import PodTargetTrigger, Target, TargetEvent
from airflow_k8s_retry_testing import FakeCluster
from tests.support.lab import CONN_ID


def following(target: Target, **kwargs: Any) -> PodTargetTrigger:
    return PodTargetTrigger(kubernetes_conn_id=CONN_ID, target=target.to_payload(), policy=None, **kwargs)


class Following:
    """A following trigger running in the test's loop, like the triggerer runs it."""

    def __init__(self, trigger: PodTargetTrigger) -> None:
        self.trigger = trigger
        self.events: list[TargetEvent] = []
        self.task = asyncio.get_running_loop().create_task(self._consume())

    async def _consume(self) -> None:
        async for event in self.trigger.run():
            self.events.append(TargetEvent.from_payload(event.payload))

    async def finish(self, within: float) -> TargetEvent:
        await asyncio.wait_for(asyncio.shield(self.task), within)
        assert len(self.events) == 1, self.events
        return self.events[0]


def create(cluster: FakeCluster, kind: str, body: dict[str, Any]) -> dict[str, Any]:
    from kubernetes import client

    api = new_client_from_config(config_file=str(cluster.kubeconfig), persist_config=False)
    try:
        if kind == "job":
            made = client.BatchV1Api(api).create_namespaced_job("default", body)
        else:
            made = client.CoreV1Api(api).create_namespaced_pod("default", body)
        return dict(api.sanitize_for_serialization(made))
    finally:
        api.close()


def pod(name: str, image: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {"app": "report"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": image}]},
    }


def job(name: str, image: str, *, backoff_limit: int = 6) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": backoff_limit,
            "template": {
                "metadata": {"labels": {"app": "etl"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": image}]},
            },
        },
    }


def external_pod(
    cluster: Any, name: str, labels: dict[str, str], image: str = "busybox:1.36"
) -> dict[str, Any]:
    client = PodClient(new_client_from_config(config_file=str(cluster.kubeconfig), persist_config=False))
    body = {
        "metadata": {"name": name, "labels": labels},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": image}]},
    }
    client.core.create_namespaced_pod("default", body)
    pod = client.read("default", name)
    assert pod is not None
    return pod
