"""Two hundred triggers in one event loop cost one LIST+WATCH for the cluster, and nothing while pods run.

Also measures the API requests of one pod's whole life, for the figures in docs/trigger.md.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_k8s_retry.classification import Outcome
from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.config import ClusterConfig, sync_api_client
from airflow_k8s_retry.kube.hub import WatchHub
from airflow_k8s_retry.kube.naming import TryIdentity
from airflow_k8s_retry.triggers import PodStateTrigger
from airflow_k8s_retry_testing import FakeCluster
from tests.support.lab import Run, cluster_reaches, create_pod, pod_body, trigger_for, use_cluster

PODS = 200
#: 60 simulated seconds of running at 0.05 real seconds per simulated second: 3 real seconds.
#: The 200 pods run 300 simulated seconds (15 real seconds), so that all of them are running at
#: once even when creating and scheduling them is slow (a busy machine took more than 3 real
#: seconds to start the last one).
SCENARIO = {
    "images": {
        "job:1": {"pull": "ok", "run": {"exit_code": 0, "duration_seconds": 60}},
        "job:many": {"pull": "ok", "run": {"exit_code": 0, "duration_seconds": 300}},
        "ghost:1": {"pull": "not_found"},
    }
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    with FakeCluster(SCENARIO, time_scale=0.05, audit=tmp_path / "audit.jsonl") as running:
        running.add_namespace("second")
        yield running


def trigger_requests(cluster: FakeCluster) -> Counter[tuple[str, str]]:
    """Requests made by the triggers: everything but the test's own pod creations."""
    counts = cluster.request_counts()
    return Counter({key: n for key, n in counts.items() if key[0] != "create"})


def delete_pods(cluster: FakeCluster, pods: list[dict[str, Any]]) -> None:
    """Delete the pods at once, as the workers resuming their tasks would."""
    from kubernetes import client as k

    api = sync_api_client(ClusterConfig(kube_config_path=str(cluster.kubeconfig)))
    try:
        for pod in pods:
            meta = pod["metadata"]
            k.CoreV1Api(api).delete_namespaced_pod(meta["name"], meta["namespace"], grace_period_seconds=0)
    finally:
        api.close()


def phases(cluster: FakeCluster) -> Counter[str]:
    return Counter(p["status"].get("phase", "") for p in cluster.all_pods())


async def test_one_pod_whole_life_requests(cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    use_cluster(monkeypatch, cluster)
    identity = TryIdentity("measure", "single", "run-1")
    pod = create_pod(cluster, pod_body(identity, "job:1"))
    event = await Run(trigger_for(pod, identity)).start().finish(within=30)
    assert event.verdict.outcome is Outcome.SUCCEED
    requests = trigger_requests(cluster)
    print(f"\none pod, whole life: {dict(sorted(requests.items()))}")
    # One LIST and one WATCH each for pods and events; at most one history annotation patch
    # (first seen pending); no GET, because nothing failed and needed a last look.
    assert requests[("list", "pods")] == 1 and requests[("watch", "pods")] == 1
    assert requests[("list", "events")] == 1 and requests[("watch", "events")] == 1
    assert requests[("get", "pods")] == 0
    assert requests[("patch", "pods")] <= 1
    assert sum(requests.values()) <= 5


async def test_one_failing_pod_whole_life_requests(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, manual_clock: ManualClock
) -> None:
    use_cluster(monkeypatch, cluster)
    monkeypatch.setattr(PodStateTrigger, "clock", manual_clock)
    identity = TryIdentity("measure", "failing", "run-1")
    pod = create_pod(cluster, pod_body(identity, "ghost:1"))
    run = Run(trigger_for(pod, identity)).start()
    await manual_clock.wait_for_sleeper(manual_clock.now() + 90)
    manual_clock.advance(90)
    event = await run.finish(within=30)
    assert event.verdict.reason.value == "image.not_found"
    requests = trigger_requests(cluster)
    print(f"\none failing pod (image not found), whole life: {dict(sorted(requests.items()))}")
    # The shared feeds, one GET for the last look, and a PATCH each time a new signal is first seen.
    assert requests[("get", "pods")] == 1
    assert 1 <= requests[("patch", "pods")] <= 3
    assert requests[("list", "pods")] == 1 and requests[("watch", "pods")] == 1


async def test_two_hundred_triggers_in_two_namespaces_share_one_watch(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, manual_clock: ManualClock
) -> None:
    use_cluster(monkeypatch, cluster)
    monkeypatch.setattr(PodStateTrigger, "clock", manual_clock)
    pods = []
    for i in range(PODS):
        identity = TryIdentity("measure", f"task{i}", "run-1")
        namespace = "default" if i % 2 == 0 else "second"
        pods.append((identity, create_pod(cluster, pod_body(identity, "job:many"), namespace=namespace)))
    runs = [Run(trigger_for(pod, identity)).start() for identity, pod in pods]

    # Steady state: every pod runs and every trigger is subscribed. From here until the first pod
    # finishes, the triggers must not touch the API at all.
    await cluster_reaches(cluster, lambda c: phases(c)["Running"] == PODS, 30)
    # Every trigger has seen its pod running and sleeps until its next re-check.
    await manual_clock.wait_for_sleeper(manual_clock.now() + 600, count=PODS, within=30)
    hub = WatchHub.current()
    assert sum(s.subscribers for s in hub.stats() if s.kind == "pods") == PODS
    before = trigger_requests(cluster)
    await cluster_reaches(cluster, lambda c: phases(c)["Succeeded"] >= 1, 30)
    during = trigger_requests(cluster) - before
    # Nothing per pod: no GET, no LIST, no PATCH. (A feed's first WATCH may still be opening; the
    # totals below show there is one per namespace and kind for the whole run.)
    assert {k: n for k, n in during.items() if k[0] != "watch"} == {}, f"while {PODS} pods ran: {during}"

    events = await asyncio.gather(*(run.finish(within=60) for run in runs))
    assert [e.verdict.outcome for e in events] == [Outcome.SUCCEED] * PODS
    assert {e.pod_uid for e in events} == {pod["metadata"]["uid"] for _, pod in pods}

    requests = trigger_requests(cluster)
    print(f"\n{PODS} pods in 2 namespaces: {dict(sorted(requests.items()))}")
    # One cluster-wide feed for pods and one for their Events, whatever the number of pods and
    # namespaces (tests/watching/test_watch_scope.py: one per namespace where RBAC says so).
    assert requests[("watch", "pods")] == 1 and requests[("list", "pods")] == 1
    assert requests[("watch", "events")] == 1 and requests[("list", "events")] == 1
    assert requests[("get", "pods")] == 0
    # The only per-pod requests: saving the classifier history when a pod is first seen pending.
    assert requests[("patch", "pods")] <= PODS
    # The triggers' after-firing checks follow their pods on the feeds, with no request, until the
    # pods are gone (deleted by the workers that resume the tasks, here by the test); the last one
    # out closes the feeds.
    assert sum(s.subscribers for s in hub.stats() if s.kind == "pods") == PODS
    await asyncio.to_thread(delete_pods, cluster, [pod for _, pod in pods])
    await cluster_reaches(
        cluster,
        lambda c: not any(c.pod(p["metadata"]["name"], p["metadata"]["namespace"]) for _, p in pods),
        30,
    )
    manual_clock.advance(5.0)
    for _ in range(200):
        if not hub.stats():
            break
        await asyncio.sleep(0.05)
    assert hub.stats() == []
    assert trigger_requests(cluster) - Counter({("delete", "pods"): PODS}) == requests
