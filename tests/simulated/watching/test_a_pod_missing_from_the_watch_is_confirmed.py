"""A subscribed pod the shared feed has not seen is read once before anything is concluded: a pod
created a moment ago is not mistaken for a deleted one, and a pod that is really gone is reported.

Nothing here waits on real time: the cluster's pods stand still (manual clock), the hub's feeds wait
for the confirming read's delay on a clock only the test advances, and the trigger's clock never
moves. The tests assert the exact requests, from the simulator's audit.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airflow_k8s_retry.classification import Outcome, Reason
from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.config import ClusterConfig
from airflow_k8s_retry.kube.hub import WatchHub
from airflow_k8s_retry.kube.naming import MANAGED_SELECTOR, TryIdentity
from airflow_k8s_retry.kube.watch_settings import HubSettings
from airflow_k8s_retry_testing import FakeCluster
from tests.support.feeds import Recorder, feed_counts, feed_requests, requests, until_watching, woken
from tests.support.lab import Run, create_pod, pod_body, trigger_for, use_cluster

SCENARIO = {"images": {"long:1": {"pull": "ok", "run": {"exit_code": 0, "duration_seconds": 100_000}}}}
#: How long a pending pod's trigger waits at most (the deadline of a pod that never starts).
PENDING_WAIT = 900.0
#: The simulated seconds a trigger waits without any news before it reads the pod itself.
QUIET_LIMIT = 300.0

pytestmark = pytest.mark.usefixtures("trigger_clock")


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster(SCENARIO, clock="manual") as running:
        yield running


async def test_a_pod_created_after_the_feed_started_arrives_through_the_watch(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, trigger_clock: ManualClock, held_hub: ManualClock
) -> None:
    use_cluster(monkeypatch, cluster)
    first_identity = TryIdentity("late", "first", "run-1")
    first = create_pod(cluster, pod_body(first_identity, "long:1"))
    first_run = Run(trigger_for(first, first_identity)).start()
    # The feeds have listed (the first pod in it) and watch; the trigger has its pod and waits.
    await until_watching(cluster)
    waits_until = await trigger_clock.wait_for_sleeper(trigger_clock.now() + PENDING_WAIT)

    second_identity = TryIdentity("late", "second", "run-1")
    second = create_pod(cluster, pod_body(second_identity, "long:1"))
    name, uid = second["metadata"]["name"], second["metadata"]["uid"]
    # Subscribed before the loop turns again: the feed cannot have read the new pod off its watch
    # yet, so it gives nothing and waits its confirm_delay before a read of its own.
    config = ClusterConfig(kube_config_path=str(cluster.kubeconfig))
    probe = Recorder(
        await WatchHub.current().subscribe(config, "default", name, uid, label_selector=MANAGED_SELECTOR)
    )
    assert probe.take() == []
    confirm_at = await held_hub.wait_for_sleeper(held_hub.now() + HubSettings().confirm_delay)
    second_run = Run(trigger_for(second, second_identity)).start()
    # The watch delivers the pod as it was created, to the probe and the second trigger alike.
    created = int(second["metadata"]["resourceVersion"])
    assert await probe.until(created) == [created]
    await trigger_clock.wait_for_sleeper(waits_until, count=2)  # both triggers wait on their pods
    # The confirm_delay runs out: the pods are in the feed's cache by then, so nothing is read.
    held_hub.set(confirm_at)
    await woken(held_hub)
    assert feed_counts("pods")["get"] == 0  # counted as sent: no read is under way either
    assert probe.take() == [] and first_run.events == second_run.events == []
    assert requests(cluster, verbs=("get",)) == []
    # One LIST (the first pod's creation was the last change before it), then the watch from there.
    listed = first["metadata"]["resourceVersion"]
    assert feed_requests(cluster, "pods") == [
        ("list", "cluster", 200, None),
        ("watch", "cluster", 200, listed),
    ]
    await probe.sub.close()
    await first_run.stop()
    await second_run.stop()


async def test_a_pod_that_is_already_gone_is_reported_as_deleted(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, trigger_clock: ManualClock, held_hub: ManualClock
) -> None:
    use_cluster(monkeypatch, cluster)
    identity = TryIdentity("gone", "task", "run-1")
    pod = pod_body(identity, "long:1")
    pod["metadata"]["uid"] = "3a0c6a52-0000-4000-8000-000000000000"  # never created
    run = Run(trigger_for(pod, identity)).start()
    # The first listing lacks the pod: the feed waits its confirm_delay before it reads the pod;
    # the trigger, with nothing to go on, waits for news (at most its quiet limit).
    await until_watching(cluster)
    listed = str(cluster.resource_version)  # nothing changes in the cluster from here on
    confirm_at = await held_hub.wait_for_sleeper(held_hub.now() + HubSettings().confirm_delay)
    await trigger_clock.wait_for_sleeper(trigger_clock.now() + QUIET_LIMIT)
    assert requests(cluster, verbs=("get",)) == [] and run.events == []
    held_hub.set(confirm_at)
    event = await run.finish(within=30)
    assert (event.verdict.outcome, event.verdict.reason) == (Outcome.RETRY, Reason.DELETED_EXTERNALLY)
    # Exactly two reads, both 404: the feed's confirming read, which concludes "deleted", then the
    # trigger's last look before a failure leaves.
    assert requests(cluster, verbs=("get",)) == [("get", "pods", "default", 404)] * 2
    assert feed_requests(cluster, "pods") == [
        ("list", "cluster", 200, None),
        ("watch", "cluster", 200, listed),
        ("get", "default", 404, None),
        ("get", "default", 404, None),
    ]
