"""``airflow dags test`` runs every trigger in its own ``asyncio.run``: feeds and clients must follow
the running event loop, never outlive it, and never be shared across loops."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from airflow_k8s_retry.classification import Outcome
from airflow_k8s_retry.kube.hub import WatchHub
from airflow_k8s_retry.kube.naming import TryIdentity
from airflow_k8s_retry_testing import FakeCluster
from tests.support.lab import create_pod, pod_body, run_trigger, trigger_for, use_cluster

SCENARIO = {"images": {"job:1": {"pull": "ok", "run": {"exit_code": 0, "duration_seconds": 10}}}}


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster(SCENARIO, time_scale=0.01) as running:
        yield running


def test_one_asyncio_run_per_trigger_like_dags_test(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_cluster(monkeypatch, cluster)
    hubs: list[WatchHub] = []

    async def one(task: str) -> Outcome:
        identity = TryIdentity("loops", task, "run-1")
        pod = create_pod(cluster, pod_body(identity, "job:1"))
        hubs.append(WatchHub.current())
        event = await run_trigger(trigger_for(pod, identity), within=20)
        return event.verdict.outcome

    # The trigger's after-firing check still follows its pod when the trigger returns; the end of
    # the loop ends it, and its feeds with it (nothing outlives the loop).
    assert asyncio.run(one("first")) is Outcome.SUCCEED
    assert hubs[0].stats() == []
    assert asyncio.run(one("second")) is Outcome.SUCCEED
    assert hubs[1].stats() == []
    assert hubs[0] is not hubs[1]
    # Each loop opened its own feeds (nothing reused from a closed loop).
    assert cluster.request_counts()[("list", "pods")] == 2
