"""``WatchHub.follow``: a follower sees every object of a feed (pods created later, pods deleted,
the namespace's Jobs), through the same feeds as the per-pod subscriptions; the last reader of a
feed stops it.

The cluster runs on a manual clock (its pods stand still unless a test advances it) and the hub's
feeds wait on a ``ManualClock`` that never moves (a poll, a reconnect or a confirming GET would
wait for ever), so the tests can assert exactly which requests the feeds made, from the simulator's
audit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client
from kubernetes.config import new_client_from_config

from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.config import ClusterConfig
from airflow_k8s_retry.kube.hub import CollectionSubscription, WatchHub
from airflow_k8s_retry.kube.watch_settings import HubSettings
from airflow_k8s_retry_testing import FakeCluster
from tests.simulated.sensor.stepping import WATCHED, made, requests
from tests.support.feeds import hold_hub
from tests.support.following import create, job, pod
from tests.support.lab import cluster_reaches


@pytest.fixture
def hub_clock(hub_settings: Callable[..., HubSettings]) -> ManualClock:
    return hold_hub(hub_settings)


@pytest.fixture
def cluster(hub_clock: ManualClock) -> Iterator[FakeCluster]:
    with FakeCluster(
        {"images": {"long:1": {"run": {"duration_seconds": 100_000}}}}, clock="manual"
    ) as running:
        yield running


async def until(follower: CollectionSubscription, predicate: object, within: float = 10) -> None:
    async def wait() -> None:
        while not predicate(follower.objects):  # type: ignore[operator]
            await follower.wait()
            follower.drain()

    await asyncio.wait_for(wait(), within)


async def test_followers_and_subscribers_share_one_feed_and_the_last_one_stops_it(
    cluster: FakeCluster, hub_clock: ManualClock
) -> None:
    config = ClusterConfig(kube_config_path=str(cluster.kubeconfig))
    hub = WatchHub.current()
    everything = await hub.follow(config, "default")
    one = await hub.subscribe(config, "default", "report-1", None, label_selector=None, events=False)
    jobs_a = await hub.follow(config, "default", jobs=True)
    jobs_b = await hub.follow(config, "default", jobs=True)
    feeds = {(s.kind, s.selector): s.subscribers for s in hub.stats()}
    assert feeds == {("pods", None): 2, ("jobs", None): 2}
    one_each = {"pods in default": WATCHED, "jobs in default": WATCHED}
    await made(cluster, one_each)

    created = create(cluster, "pod", pod("report-1", "long:1"))
    await until(everything, lambda objects: "report-1" in objects)
    create(cluster, "job", job("etl", "long:1"))
    await until(jobs_a, lambda objects: "etl" in objects)
    await until(jobs_b, lambda objects: "etl" in objects)
    await until(everything, lambda objects: any(name.startswith("etl-") for name in objects))
    assert sorted(everything.objects) == sorted(p["metadata"]["name"] for p in cluster.pods())
    assert requests(cluster) == one_each  # one LIST and one WATCH per feed, shared by all its readers

    # A deleted pod leaves the follower's view. The pod's subscriber, on the same feed, was given
    # it as created, as marked for deletion, then as deleted (grace 0: it never ran).
    api = new_client_from_config(config_file=str(cluster.kubeconfig), persist_config=False)
    client.CoreV1Api(api).delete_namespaced_pod("report-1", "default", grace_period_seconds=0)
    api.close()
    await until(everything, lambda objects: "report-1" not in objects)
    assert await one.wait(within=10)
    given = [
        (change.deleted, meta["uid"], "deletionTimestamp" in meta)
        for change in one.drain()
        for meta in [(change.pod or {}).get("metadata") or {}]
    ]
    uid = created["metadata"]["uid"]
    assert given == [(False, uid, False), (False, uid, True), (True, uid, True)]

    for sub in (everything, one, jobs_a, jobs_b):
        await sub.close()
    assert hub.stats() == []
    # The server ends a watch whose client went away when it next writes to it: at the latest,
    # its bookmark a minute later on the cluster's clock.
    cluster.advance(60)
    await cluster_reaches(cluster, lambda c: not c.store.watchers, within=10)
    # Nothing waited on the hub's clock (no poll, no reconnect, no GET of the awaited pod) and
    # nothing asked more.
    assert hub_clock.deadlines == [] and requests(cluster) == one_each


async def test_a_follower_that_comes_late_is_given_what_the_feed_already_has(cluster: FakeCluster) -> None:
    config = ClusterConfig(kube_config_path=str(cluster.kubeconfig))
    hub = WatchHub.current()
    create(cluster, "pod", pod("report-1", "long:1", labels={"app": "report"}))
    first = await hub.follow(config, "default", label_selector="app=report")
    await until(first, lambda objects: "report-1" in objects)
    assert first.synced
    listed = {"pods in default (app=report)": WATCHED}
    await made(cluster, listed)
    late = await hub.follow(config, "default", label_selector="app=report")
    assert late.objects == first.objects and list(late.objects) == ["report-1"] and late.pending
    assert requests(cluster) == listed  # the late one is given the feed's objects without a LIST
    await first.close()
    await late.close()
