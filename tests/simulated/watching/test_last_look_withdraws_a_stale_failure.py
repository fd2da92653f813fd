"""Before a failure leaves, the trigger reads the pod once more and withdraws it if the pod recovered.

The watch is kept down (every reconnection fails) while a rate-limited pull recovers and the pod
starts running, so the trigger's view is stale when the grace ends: the last look must catch it.

The cluster runs on a manual clock, the hub's feeds wait (backoff) on a clock only the test
advances, and the trigger's clock moves only by the grace: every step has one outcome, and the test
asserts the exact requests, from the simulator's audit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from airflow_k8s_retry.classification import Outcome
from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.naming import HISTORY_ANNOTATION, TryIdentity
from airflow_k8s_retry_testing import FakeCluster
from tests.support.feeds import feed_requests, mark, requests, until_watching
from tests.support.lab import Run, cluster_reaches, create_pod, pod_body, trigger_for, use_cluster

SIGNAL = "image.rate_limited:base"
GRACE = 900.0  # the default for a rate-limited registry
#: How long a pending pod's trigger waits at most (the deadline of a pod that never starts).
PENDING_WAIT = 900.0
#: When a trigger that has seen its pod running looks again (on its own clock).
RECHECK = 600.0
#: Simulated seconds from the pod's creation: its first pull is refused; it runs (a later pull,
#: past the 100 s of rate limiting); it has run its 200 s.
PULL_REFUSED, RECOVERED, RUN = 0.4, 160.0, 200.0
#: The trigger's poll interval (used only if RBAC forbade watching); three of them are its quiet limit.
QUIET_POLL = 400.0
SCENARIO = {
    "images": {
        # Rate-limited for 100 simulated seconds, then pulls and runs for 200.
        "busy:1": {
            "pull": "rate_limited",
            "for_seconds": 100,
            "run": {"exit_code": 0, "duration_seconds": 200},
        }
    }
}


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster(SCENARIO, clock="manual") as running:
        yield running


def stamped(cluster: FakeCluster, name: str) -> dict[str, float]:
    raw = (((cluster.pod(name) or {}).get("metadata") or {}).get("annotations") or {}).get(HISTORY_ANNOTATION)
    return dict(json.loads(raw)["first_seen"]) if raw else {}


def phase(cluster: FakeCluster, name: str) -> str:
    return str((cluster.pod(name) or {})["status"].get("phase"))


async def test_a_failure_seen_on_a_stale_watch_is_withdrawn(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, trigger_clock: ManualClock, held_hub: ManualClock
) -> None:
    use_cluster(monkeypatch, cluster)
    identity = TryIdentity("last", "look", "run-1")
    pod = create_pod(cluster, pod_body(identity, "busy:1"))
    name = pod["metadata"]["name"]
    # Its quiet limit (three poll intervals) ends after the grace: no read of the trigger's own for
    # lack of news comes first, only the last look can see the recovery.
    run = Run(trigger_for(pod, identity, poll_interval=QUIET_POLL)).start()
    await until_watching(cluster)
    await trigger_clock.wait_for_sleeper(trigger_clock.now() + PENDING_WAIT)
    # The first pull is refused; the trigger stamps when it first saw that and waits out the grace.
    cluster.advance(PULL_REFUSED)
    await cluster_reaches(cluster, lambda c: SIGNAL in stamped(c, name), 30)
    started = stamped(cluster, name)[SIGNAL]
    await trigger_clock.wait_for_sleeper(started + GRACE)

    # Cut the watch, and let the pull recover behind the trigger's back: the feed's watch ends,
    # its next one fails, and it backs off (its clock does not move until the watch is let back).
    listed = feed_requests(cluster, "pods")[1][3]
    cluster.add_fault(verb="watch", resource="pods", status=500, times=None)
    cluster.drop_watches("pods")
    resumes_at = await held_hub.wait_for_sleeper(later_than=held_hub.now())
    seen = feed_requests(cluster, "pods")[-1][3]  # the version the feed saw last
    assert feed_requests(cluster, "pods") == [
        ("list", "cluster", 200, None),
        ("watch", "cluster", 200, listed),
        ("watch", "cluster", 500, seen),
    ]
    cluster.advance(RECOVERED - PULL_REFUSED)
    assert phase(cluster, name) == "Running"

    # The grace ends on stale evidence: the trigger decides "retry", looks once more, sees the pod
    # running, withdraws, and goes back to waiting (now on the running pod's re-check timer).
    first = mark(cluster)
    trigger_clock.advance(GRACE)
    await trigger_clock.wait_for_sleeper(trigger_clock.now() + RECHECK)
    assert run.events == []
    assert requests(cluster, first) == [("get", "pods", "default", 200)]

    # The watch comes back, from where it was; the pod finishes; the one event is the success.
    cluster.clear_faults()
    held_hub.set(resumes_at)
    cluster.advance(RUN)
    event = await run.finish(within=30)
    assert event.verdict.outcome is Outcome.SUCCEED
    assert feed_requests(cluster, "pods", verbs=("list", "watch"))[3:] == [("watch", "cluster", 200, seen)]
    assert requests(cluster, first, verbs=("get", "list")) == [("get", "pods", "default", 200)]
