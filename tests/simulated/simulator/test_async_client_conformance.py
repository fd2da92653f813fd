"""``kubernetes_asyncio`` (the deferrable operators' client) works unchanged against the simulator."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kubernetes_asyncio import watch
from kubernetes_asyncio.client import ApiException

from airflow_k8s_retry_testing import FakeCluster
from tests.simulated.simulator.pods import LONG, phase, pod_body, pod_is


async def reached(cluster: FakeCluster, predicate: Any, within: float = 5) -> bool:
    return await asyncio.to_thread(cluster.wait_for, predicate, within)


async def test_read_pod_logs_and_events(acore: Any, cluster: FakeCluster) -> None:
    created = await acore.create_namespaced_pod("default", pod_body("a1", labels={"run": "r1"}))
    assert await reached(cluster, pod_is("a1", lambda p: phase(p) == "Succeeded"))
    pod = await acore.read_namespaced_pod("a1", "default")
    assert pod.metadata.uid == created.metadata.uid and pod.status.phase == "Succeeded"
    assert pod.status.container_statuses[0].state.terminated.reason == "Completed"
    listed = await acore.list_namespaced_pod("default", label_selector="run=r1")
    assert [p.metadata.name for p in listed.items] == ["a1"]
    events = await acore.list_namespaced_event("default", field_selector="involvedObject.name=a1")
    assert {e.reason for e in events.items} >= {"Scheduled", "Pulled", "Started"}
    logs = await acore.read_namespaced_pod_log("a1", "default", container="base")
    assert logs == ""
    with pytest.raises(ApiException) as caught:
        await acore.read_namespaced_pod("missing", "default")
    assert caught.value.status == 404
    assert json.loads(caught.value.body)["reason"] == "NotFound"


async def test_follow_logs_stream_while_running() -> None:
    scenario = {
        "images": {
            "talk:1": {"run": {"log": "\n".join(f"line {i}" for i in range(5)), "duration_seconds": 20}}
        }
    }
    import kubernetes_asyncio

    with FakeCluster(scenario, time_scale=0.02) as cluster:
        client = await kubernetes_asyncio.config.new_client_from_config(str(cluster.kubeconfig))
        api = kubernetes_asyncio.client.CoreV1Api(client)
        try:
            await api.create_namespaced_pod("default", pod_body("t", "talk:1"))
            assert await reached(cluster, pod_is("t", lambda p: phase(p) == "Running"))
            response = await api.read_namespaced_pod_log(
                "t", "default", container="base", follow=True, timestamps=True, _preload_content=False
            )
            lines = []
            async for raw in response.content:
                lines.append(raw.decode().rstrip("\n"))
            assert [line.split(" ", 1)[1] for line in lines] == [f"line {i}" for i in range(5)]
            assert phase(cluster.pod("t")) == "Succeeded"
        finally:
            await client.close()


async def test_watch_resumes_and_relists_on_410(acore: Any, cluster: FakeCluster) -> None:
    start = (await acore.list_namespaced_pod("default")).metadata.resource_version
    await acore.create_namespaced_pod("default", pod_body("w", LONG))
    seen: list[tuple[str, str]] = []
    w = watch.Watch()
    async with w.stream(
        acore.list_namespaced_pod, "default", resource_version=start, timeout_seconds=2
    ) as stream:
        async for event in stream:
            seen.append((event["type"], event["object"].status.phase))
            if event["object"].status.phase == "Running":
                w.stop()
    assert seen[0] == ("ADDED", "Pending") and seen[-1] == ("MODIFIED", "Running")
    cluster.compact()
    with pytest.raises(ApiException) as caught:
        async with watch.Watch().stream(
            acore.list_namespaced_pod, "default", resource_version=start, timeout_seconds=2
        ) as stream:
            async for _ in stream:
                pass
    assert caught.value.status == 410


async def test_async_delete_sends_deleted_event(acore: Any, cluster: FakeCluster) -> None:
    created = await acore.create_namespaced_pod("default", pod_body("gone", LONG))
    assert await reached(cluster, pod_is("gone", lambda p: phase(p) == "Running"))
    rv = (await acore.read_namespaced_pod("gone", "default")).metadata.resource_version
    await acore.delete_namespaced_pod("gone", "default", grace_period_seconds=5)
    types = []
    async with watch.Watch().stream(
        acore.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=3
    ) as stream:
        async for event in stream:
            types.append(event["type"])
            if event["type"] == "DELETED":
                assert event["object"].metadata.uid == created.metadata.uid
                break
    assert types[-1] == "DELETED" and "MODIFIED" in types
