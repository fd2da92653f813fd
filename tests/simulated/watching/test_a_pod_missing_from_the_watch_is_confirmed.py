"""A subscribed pod the shared feed has not seen is read once before anything is concluded: a pod
created a moment ago is not mistaken for a deleted one, and a pod that is really gone is reported."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from airflow_k8s_retry.classification import Outcome, Reason
from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.naming import TryIdentity
from airflow_k8s_retry.kube.watch_settings import HubSettings
from airflow_k8s_retry.triggers import PodStateTrigger
from airflow_k8s_retry_testing import FakeCluster
from tests.support.lab import Run, create_pod, pod_body, run_trigger, trigger_for, use_cluster

SCENARIO = {"images": {"long:1": {"pull": "ok", "run": {"exit_code": 0, "duration_seconds": 100_000}}}}


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster(SCENARIO, time_scale=0.01) as running:
        yield running


async def test_a_pod_created_after_the_feed_started_arrives_through_the_watch(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, manual_clock: ManualClock
) -> None:
    use_cluster(monkeypatch, cluster)
    monkeypatch.setattr(PodStateTrigger, "clock", manual_clock)
    first_identity = TryIdentity("late", "first", "run-1")
    first = create_pod(cluster, pod_body(first_identity, "long:1"))
    first_run = Run(trigger_for(first, first_identity)).start()
    # The trigger has seen its pod running (it sleeps until the running re-check): the feed is up.
    recheck = manual_clock.now() + 600
    await manual_clock.wait_for_sleeper(recheck)

    second_identity = TryIdentity("late", "second", "run-1")
    second = create_pod(cluster, pod_body(second_identity, "long:1"))
    second_run = Run(trigger_for(second, second_identity)).start()
    await manual_clock.wait_for_sleeper(recheck, count=2)  # both triggers have seen their pods
    assert second_run.events == []
    assert cluster.request_counts()[("get", "pods")] == 0  # the watch delivered it, no read needed
    assert cluster.request_counts()[("list", "pods")] == 1
    await first_run.stop()
    await second_run.stop()


async def test_a_pod_that_is_already_gone_is_reported_as_deleted(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, hub_settings: Callable[..., HubSettings]
) -> None:
    use_cluster(monkeypatch, cluster)
    hub_settings(confirm_delay=0.05)
    identity = TryIdentity("gone", "task", "run-1")
    pod = pod_body(identity, "long:1")
    pod["metadata"]["uid"] = "3a0c6a52-0000-4000-8000-000000000000"  # never created
    event = await run_trigger(trigger_for(pod, identity), within=10)
    assert (event.verdict.outcome, event.verdict.reason) == (Outcome.RETRY, Reason.DELETED_EXTERNALLY)
    # Exactly two reads, both 404: the feed's confirming read, which concludes "deleted", then the
    # trigger's last look before a failure leaves.
    gets = [r for r in cluster.audit_records() if r.get("kind") == "request" and r.get("verb") == "get"]
    assert [(r["resource"], r["status"]) for r in gets] == [("pods", 404), ("pods", 404)]
