"""Two hundred triggers in one event loop cost one LIST+WATCH for the cluster, and nothing while pods run.

Also measures the API requests of one pod's whole life, for the figures in docs/trigger.md.

The cluster runs on a manual clock (the pods move only as far as the test advances them), the hub's
feeds wait on a clock nobody advances, and the triggers' clock moves only where a test says so: the
requests asserted are exactly those the triggers made, from the simulator's audit.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import AsyncMock

import pytest
from kubernetes.config import new_client_from_config

from airflow_k8s_retry.classification import Outcome
from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.hub import WatchHub
from airflow_k8s_retry.kube.naming import TryIdentity
from airflow_k8s_retry.triggers.tracker import HISTORY_SETTLE
from airflow_k8s_retry_testing import FakeCluster
from tests.support.feeds import Request, mark, probe, requests, until_watching, version
from tests.support.lab import Run, cluster_reaches, create_pod, kill_work, pod_body, trigger_for, use_cluster

PODS = 200
SCENARIO = {
    "images": {
        "job:1": {"pull": "ok", "run": {"exit_code": 0, "duration_seconds": 60}},
        "job:many": {"pull": "ok", "run": {"exit_code": 0, "duration_seconds": 300}},
        "ghost:1": {"pull": "not_found"},
    }
}
#: Simulated seconds from a pod's creation: it runs; its first pull is refused.
STARTED, PULL_REFUSED = 0.3, 0.4
#: How long a pending pod's trigger waits at most (the deadline of a pod that never starts).
PENDING_WAIT = 900.0
#: When a trigger that has seen its pod running looks again (on its own clock).
RECHECK = 600.0
#: The feeds of one loop: a LIST and a WATCH each for pods and their Events, over the whole cluster.
FEEDS = [
    ("list", "events", "cluster", 200),
    ("list", "pods", "cluster", 200),
    ("watch", "events", "cluster", 200),
    ("watch", "pods", "cluster", 200),
]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    with FakeCluster(SCENARIO, clock="manual", audit=tmp_path / "audit.jsonl") as running:
        running.add_namespace("second")
        yield running


def trigger_requests(cluster: FakeCluster, since: int = 0, until: int | None = None) -> list[Request]:
    """Requests made by the triggers: everything but the test's own pod creations."""
    return [r for r in requests(cluster, since, until) if r[0] != "create"]


def counted(made: list[Request]) -> dict[tuple[str, str], int]:
    """How many requests of each (verb, resource), for the figures in docs/trigger.md."""
    return dict(sorted(Counter(r[:2] for r in made).items()))


def annotate(cluster: FakeCluster, pod: dict[str, Any]) -> None:
    from kubernetes import client as k

    api = new_client_from_config(config_file=str(cluster.kubeconfig), persist_config=False)
    try:
        body = {"metadata": {"annotations": {"example.com/probe": "1"}}}
        k.CoreV1Api(api).patch_namespaced_pod(pod["metadata"]["name"], pod["metadata"]["namespace"], body)
    finally:
        api.close()


def phases(cluster: FakeCluster) -> Counter[str]:
    return Counter(p["status"].get("phase", "") for p in cluster.all_pods())


async def test_one_pod_whole_life_requests(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, trigger_clock: ManualClock, held_hub: ManualClock
) -> None:
    use_cluster(monkeypatch, cluster)  # the triggers' clock held still: the pod starts at once
    identity = TryIdentity("measure", "single", "run-1")
    pod = create_pod(cluster, pod_body(identity, "job:1"))
    run = Run(trigger_for(pod, identity)).start()
    await until_watching(cluster)
    await trigger_clock.wait_for_sleeper(trigger_clock.now() + PENDING_WAIT)
    cluster.advance(61)  # started within a second, then 60 s of running
    event = await run.finish(within=30)
    assert event.verdict.outcome is Outcome.SUCCEED
    made = trigger_requests(cluster)
    print(f"\none pod, whole life: {counted(made)}")
    # One LIST and one WATCH each for pods and events; no GET, because nothing failed and needed a
    # last look; no stamp, because the pod started before its first-seen time was due to be written.
    assert sorted(made) == FEEDS


async def test_one_failing_pod_whole_life_requests(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, trigger_clock: ManualClock, held_hub: ManualClock
) -> None:
    use_cluster(monkeypatch, cluster)
    identity = TryIdentity("measure", "failing", "run-1")
    pod = create_pod(cluster, pod_body(identity, "ghost:1"))
    run = Run(trigger_for(pod, identity)).start()
    await until_watching(cluster)
    await trigger_clock.wait_for_sleeper(trigger_clock.now() + PENDING_WAIT)
    watching = mark(cluster)
    cluster.advance(PULL_REFUSED)
    await trigger_clock.wait_for_sleeper(trigger_clock.now() + 90)
    trigger_clock.advance(90)
    event = await run.finish(within=30)
    assert event.verdict.reason.value == "image.not_found"
    made = trigger_requests(cluster)
    print(f"\none failing pod (image not found), whole life: {counted(made)}")
    # The shared feeds; then a PATCH when the refused pull is first seen (its grace timer starts),
    # and one GET for the last look.
    assert sorted(trigger_requests(cluster, 0, watching)) == FEEDS
    assert trigger_requests(cluster, watching) == [
        ("patch", "pods", "default", 200),
        ("get", "pods", "default", 200),
    ]


async def test_two_hundred_triggers_in_two_namespaces_share_one_watch(
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    trigger_clock: ManualClock,
    held_hub: ManualClock,
    task_state_lookup: AsyncMock,
) -> None:
    use_cluster(monkeypatch, cluster)
    task_state_lookup.return_value = "running"
    pods = []
    for i in range(PODS):
        identity = TryIdentity("measure", f"task{i}", "run-1")
        namespace = "default" if i % 2 == 0 else "second"
        pods.append((identity, create_pod(cluster, pod_body(identity, "job:many"), namespace=namespace)))
    runs = [Run(trigger_for(pod, identity)).start() for identity, pod in pods]
    await until_watching(cluster)
    started = trigger_clock.now()
    await trigger_clock.wait_for_sleeper(started + PENDING_WAIT, count=PODS, within=60)
    # 5 s on, each trigger stamps when it first saw its pod pending (a history that bears on no
    # grace timer waits that long): the one request per pod.
    trigger_clock.advance(HISTORY_SETTLE)
    await cluster_reaches(cluster, lambda c: len(requests(c, verbs=("patch",))) == PODS, 60)
    # Steady state: every pod runs and every trigger has seen it running (it sleeps until its next
    # re-check). From here until the pods finish, the triggers must not touch the API at all.
    cluster.advance(STARTED)
    assert phases(cluster)["Running"] == PODS
    await trigger_clock.wait_for_sleeper(started + HISTORY_SETTLE + RECHECK, count=PODS, within=60)
    hub = WatchHub.current()
    assert sum(s.subscribers for s in hub.stats() if s.kind == "pods") == PODS
    steady = mark(cluster)
    # The pods run 299 s more (bookmarks come every 60 s meanwhile); a change of the test's own,
    # delivered on the same watch after them, shows the feed has read all that came before.
    follower = await probe(cluster, pods[0][1])
    cluster.advance(299)
    assert phases(cluster)["Running"] == PODS
    own = mark(cluster)
    annotate(cluster, pods[0][1])
    own_end = mark(cluster)
    await follower.until(version(cluster, pods[0][1]["metadata"]["name"]))
    await follower.sub.close()
    # Nothing per pod while they ran: no GET, no LIST, no PATCH, no re-watch.
    assert requests(cluster, steady) == [("patch", "pods", "default", 200)]  # the test's own
    assert requests(cluster, own, own_end) == [("patch", "pods", "default", 200)]

    cluster.advance(1)
    assert phases(cluster)["Succeeded"] == PODS
    events = await asyncio.gather(*(run.finish(within=60) for run in runs))
    assert [e.verdict.outcome for e in events] == [Outcome.SUCCEED] * PODS
    assert {e.pod_uid for e in events} == {pod["metadata"]["uid"] for _, pod in pods}

    made = trigger_requests(cluster, 0, own) + trigger_requests(cluster, own_end)
    print(f"\n{PODS} pods in 2 namespaces: {counted(made)}")
    # One cluster-wide feed for pods and one for their Events, whatever the number of pods and
    # namespaces (test_watch_scope_and_connections.py: one per namespace where RBAC says so); the
    # only per-pod requests: saving the classifier history when a pod is first seen pending.
    stamps = [("patch", "pods", "default", 200), ("patch", "pods", "second", 200)] * (PODS // 2)
    assert sorted(made) == sorted(FEEDS + stamps)
    # Each trigger ends with its event: the last one out closed the feeds, and nothing of them is
    # left on the loop (the workers that resume the tasks delete the pods).
    assert kill_work() == set()
    assert hub.stats() == []
    task_state_lookup.assert_not_awaited()
