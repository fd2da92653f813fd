"""``airflow dags test`` runs every trigger in its own ``asyncio.run``: feeds and clients must follow
the running event loop, never outlive it, and never be shared across loops.

The cluster runs on a manual clock (the pod starts only when the test advances it), the hubs' waits
on a clock nobody advances and the trigger's clock stands still, so each loop makes exactly the
requests asserted here, from the simulator's audit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

from airflow_k8s_retry.classification import Outcome
from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.hub import WatchHub
from airflow_k8s_retry.kube.naming import TryIdentity
from airflow_k8s_retry.kube.watch_settings import HubSettings
from airflow_k8s_retry_testing import FakeCluster
from tests.support.feeds import feed_requests, hold_hub, mark, requests, until_watching
from tests.support.lab import Run, create_pod, pod_body, trigger_for, use_cluster

SCENARIO = {"images": {"job:1": {"pull": "ok", "run": {"exit_code": 0, "duration_seconds": 10}}}}
#: Simulated seconds from a pod's creation to its success (started within half a second, runs 10).
LIFE = 11.0
#: How long a pending pod's trigger waits at most (the deadline of a pod that never starts).
PENDING_WAIT = 900.0


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster(SCENARIO, clock="manual") as running:
        yield running


def test_one_asyncio_run_per_trigger_like_dags_test(
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    hub_settings: Callable[..., HubSettings],
    trigger_clock: ManualClock,
) -> None:
    use_cluster(monkeypatch, cluster)
    hold_hub(hub_settings)  # every loop's hub waits on it; nobody advances it
    hubs: list[WatchHub] = []

    async def one(task: str) -> tuple[Outcome, str]:
        identity = TryIdentity("loops", task, "run-1")
        pod = create_pod(cluster, pod_body(identity, "job:1"))
        hubs.append(WatchHub.current())
        run = Run(trigger_for(pod, identity)).start()
        # This loop's feeds list and watch; its trigger has the pending pod and waits.
        await until_watching(cluster, since=since)
        await trigger_clock.wait_for_sleeper(trigger_clock.now() + PENDING_WAIT)
        cluster.advance(LIFE)
        event = await run.finish(within=30)
        return event.verdict.outcome, pod["metadata"]["resourceVersion"]

    def opened_its_own_feeds(created: str) -> None:
        """The loop's requests: its feeds, from the cluster as its pod was created (nothing reused
        from a closed loop), and nothing else."""
        for kind in ("pods", "events"):
            listed = [("list", "cluster", 200, None), ("watch", "cluster", 200, created)]
            assert feed_requests(cluster, kind, since) == listed
        assert sorted(requests(cluster, since)) == [
            ("create", "pods", "default", 201),
            ("list", "events", "cluster", 200),
            ("list", "pods", "cluster", 200),
            ("watch", "events", "cluster", 200),
            ("watch", "pods", "cluster", 200),
        ]

    # The trigger closes its feeds as it returns; nothing of it outlives the loop.
    since = mark(cluster)
    outcome, created = asyncio.run(one("first"))
    assert outcome is Outcome.SUCCEED
    assert hubs[0].stats() == []
    opened_its_own_feeds(created)
    since = mark(cluster)
    outcome, created = asyncio.run(one("second"))
    assert outcome is Outcome.SUCCEED
    assert hubs[1].stats() == []
    assert hubs[0] is not hubs[1]
    opened_its_own_feeds(created)
