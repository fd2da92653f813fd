"""``WatchHub.follow``: a follower sees every object of a feed (pods created later, pods deleted,
the namespace's Jobs), through the same feeds as the per-pod subscriptions; the last reader of a
feed stops it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from kubernetes import client

from airflow_k8s_retry.kube.config import ClusterConfig, sync_api_client
from airflow_k8s_retry.kube.hub import CollectionSubscription, WatchHub
from airflow_k8s_retry_testing import FakeCluster
from tests.simulated.sensor.test_following_a_target import create, job, pod
from tests.support.lab import cluster_reaches


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster(
        {"images": {"long:1": {"run": {"duration_seconds": 100_000}}}}, time_scale=0.02
    ) as running:
        yield running


async def until(follower: CollectionSubscription, predicate: object, within: float = 10) -> None:
    async def wait() -> None:
        while not predicate(follower.objects):  # type: ignore[operator]
            await follower.wait()
            follower.drain()

    await asyncio.wait_for(wait(), within)


async def test_followers_and_subscribers_share_one_feed_and_the_last_one_stops_it(
    cluster: FakeCluster,
) -> None:
    config = ClusterConfig(kube_config_path=str(cluster.kubeconfig))
    hub = WatchHub.current()
    everything = await hub.follow(config, "default")
    one = await hub.subscribe(config, "default", "report-1", None, label_selector=None, events=False)
    jobs_a = await hub.follow(config, "default", jobs=True)
    jobs_b = await hub.follow(config, "default", jobs=True)
    feeds = {(s.kind, s.selector): s.subscribers for s in hub.stats()}
    assert feeds == {("pods", None): 2, ("jobs", None): 2}
    watches = {("watch", "pods"), ("watch", "jobs")}
    await cluster_reaches(cluster, lambda c: all(c.request_counts()[w] for w in watches), within=10)

    create(cluster, "pod", pod("report-1", "long:1"))
    await until(everything, lambda objects: "report-1" in objects)
    create(cluster, "job", job("etl", "long:1"))
    await until(jobs_a, lambda objects: "etl" in objects)
    await until(jobs_b, lambda objects: "etl" in objects)
    await until(everything, lambda objects: any(name.startswith("etl-") for name in objects))
    assert [cluster.request_counts()[w] for w in sorted(watches)] == [1, 1]  # one each, shared

    # A deleted pod leaves the follower's view.
    api = sync_api_client(config)
    client.CoreV1Api(api).delete_namespaced_pod("report-1", "default", grace_period_seconds=0)
    api.close()
    await until(everything, lambda objects: "report-1" not in objects)

    for sub in (everything, one, jobs_a, jobs_b):
        await sub.close()
    assert hub.stats() == []
    await cluster_reaches(cluster, lambda c: not c.store.watchers, within=10)


async def test_a_follower_that_comes_late_is_given_what_the_feed_already_has(cluster: FakeCluster) -> None:
    config = ClusterConfig(kube_config_path=str(cluster.kubeconfig))
    hub = WatchHub.current()
    create(cluster, "pod", pod("report-1", "long:1", labels={"app": "report"}))
    first = await hub.follow(config, "default", label_selector="app=report")
    await until(first, lambda objects: "report-1" in objects)
    assert first.synced
    late = await hub.follow(config, "default", label_selector="app=report")
    assert "report-1" in late.objects and late.pending
    assert cluster.request_counts()[("list", "pods")] == 1
    await first.close()
    await late.close()
