"""Before a failure leaves, the trigger reads the pod once more and withdraws it if the pod recovered.

The watch is kept down (every reconnection fails) while a rate-limited pull recovers and the pod
starts running, so the trigger's view is stale when the grace ends: the last look must catch it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

from airflow_k8s_retry.classification import Outcome
from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.naming import HISTORY_ANNOTATION, TryIdentity
from airflow_k8s_retry.kube.watch_settings import HubSettings
from airflow_k8s_retry.triggers import PodStateTrigger
from airflow_k8s_retry_testing import FakeCluster
from tests.support.lab import Run, cluster_reaches, create_pod, pod_body, trigger_for, use_cluster

SIGNAL = "image.rate_limited:base"
GRACE = 900.0  # the default for a rate-limited registry
SCENARIO = {
    "images": {
        # Rate-limited for 100 simulated seconds (1 real second), then pulls and runs for 2 s.
        "busy:1": {
            "pull": "rate_limited",
            "for_seconds": 100,
            "run": {"exit_code": 0, "duration_seconds": 200},
        }
    }
}


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster(SCENARIO, time_scale=0.01) as running:
        yield running


def stamped(cluster: FakeCluster, name: str) -> dict[str, float]:
    raw = (((cluster.pod(name) or {}).get("metadata") or {}).get("annotations") or {}).get(HISTORY_ANNOTATION)
    return dict(json.loads(raw)["first_seen"]) if raw else {}


async def test_a_failure_seen_on_a_stale_watch_is_withdrawn(
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    manual_clock: ManualClock,
    hub_settings: Callable[..., HubSettings],
) -> None:
    use_cluster(monkeypatch, cluster)
    monkeypatch.setattr(PodStateTrigger, "clock", manual_clock)
    hub_settings(watch_timeout=(1, 1), backoff_cap=0.2)
    identity = TryIdentity("last", "look", "run-1")
    pod = create_pod(cluster, pod_body(identity, "busy:1"))
    name = pod["metadata"]["name"]
    run = Run(trigger_for(pod, identity)).start()
    await cluster_reaches(cluster, lambda c: SIGNAL in stamped(c, name), 10)
    started = stamped(cluster, name)[SIGNAL]
    await manual_clock.wait_for_sleeper(started + GRACE)

    # Cut the watch, and let the pull recover behind the trigger's back.
    watches = cluster.request_counts()[("watch", "pods")]
    cluster.add_fault(verb="watch", resource="pods", status=500, times=None)
    await cluster_reaches(cluster, lambda c: c.request_counts()[("watch", "pods")] > watches + 1, 10)
    await cluster_reaches(cluster, lambda c: (c.pod(name) or {})["status"].get("phase") == "Running", 10)
    gets = cluster.request_counts()[("get", "pods")]

    # The grace ends on stale evidence: the trigger decides "retry", looks once more, sees the pod
    # running, withdraws, and goes back to waiting (now on the running pod's re-check timer).
    manual_clock.advance(GRACE)
    await manual_clock.wait_for_sleeper(manual_clock.now() + 600)
    assert run.events == []
    assert cluster.request_counts()[("get", "pods")] == gets + 1

    # The watch comes back; the pod finishes; the one event is the success.
    cluster.clear_faults()
    event = await run.finish(within=15)
    assert event.verdict.outcome is Outcome.SUCCEED
