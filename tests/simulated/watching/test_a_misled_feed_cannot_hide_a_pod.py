"""The shared feed can be stuck or wrong about a pod; the trigger still reaches the right verdict.

* A feed that can no longer watch (a proxy that breaks watches, a starved pool, a token the watch
  never refreshes) delivers nothing: the trigger's re-check reads the pod itself.
* A feed that calls a live pod gone (a label edited off the selector, a re-list that misses it):
  once the last look withdraws that, the subscription follows the pod again.
* A disrupted pod is replaced only once its containers stopped: no two copies of one try.

Nothing waits on real time: the cluster runs on a manual clock (its kubelet acts only when the test
advances it), the hub's feeds wait (backoff) on a clock the test advances one wait at a time, and
the trigger's clock moves only where a test says so. The tests assert the exact requests, from the
simulator's audit.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes.config import new_client_from_config

from airflow_k8s_retry.classification import Outcome
from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.naming import MANAGED_LABEL, TryIdentity
from airflow_k8s_retry.triggers.pod import PodEvent
from airflow_k8s_retry_testing import FakeCluster
from tests.support.feeds import feed_requests, mark, requests, until_watching
from tests.support.lab import Run, cluster_reaches, create_pod, pod_body, trigger_for, use_cluster

#: Simulated seconds from a pod's creation until it runs.
STARTED = 0.3
#: When a trigger that has seen its pod running looks again (on its own clock).
RECHECK = 600.0


def phase(cluster: FakeCluster, name: str) -> str | None:
    return ((cluster.pod(name) or {}).get("status") or {}).get("phase")


def set_managed_label(cluster: FakeCluster, name: str, value: str | None) -> None:
    client = new_client_from_config(config_file=str(cluster.kubeconfig), persist_config=False)
    try:
        from kubernetes import client as k

        body = {"metadata": {"labels": {MANAGED_LABEL: value}}}
        k.CoreV1Api(client).patch_namespaced_pod(name, "default", body)
    finally:
        client.close()


async def backs_off(hub: ManualClock) -> float:
    """Until a feed waits on the hub's clock for a time still ahead; that time."""
    return await hub.wait_for_sleeper(later_than=hub.now(), within=30)


async def running_and_followed(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, trigger_clock: ManualClock, task: str
) -> tuple[dict[str, Any], TryIdentity, Run]:
    """A running pod, and a trigger that has seen it running (it waits for its re-check) through
    feeds that list and watch."""
    use_cluster(monkeypatch, cluster)
    identity = TryIdentity(task, "feed", "run-1")
    pod = create_pod(cluster, pod_body(identity, "job:1"))
    cluster.advance(STARTED)
    assert phase(cluster, pod["metadata"]["name"]) == "Running"
    run = Run(trigger_for(pod, identity)).start()
    await until_watching(cluster)
    await trigger_clock.wait_for_sleeper(trigger_clock.now() + RECHECK)
    return pod, identity, run


async def test_a_stuck_feed_does_not_hide_a_finished_pod(
    monkeypatch: pytest.MonkeyPatch, trigger_clock: ManualClock, held_hub: ManualClock
) -> None:
    # The container runs until the test ends it.
    scenario = {"images": {"job:1": {"run": {"exit_code": 0, "duration_seconds": 10**7}}}}
    with FakeCluster(scenario, clock="manual") as cluster:
        pod, _, run = await running_and_followed(cluster, monkeypatch, trigger_clock, "stuck")
        name = pod["metadata"]["name"]
        listed = str(cluster.resource_version)
        # From now on the feed can neither watch nor re-list; GET still works. Its watch ends
        # with nothing in it: it backs off, tries once more in vain, and backs off again.
        cluster.add_fault(verb="watch", resource="pods", status=500, times=None)
        cluster.add_fault(verb="list", resource="pods", status=500, times=None)
        cluster.drop_watches("pods")
        held_hub.set(await backs_off(held_hub))
        await backs_off(held_hub)
        assert feed_requests(cluster, "pods") == [
            ("list", "cluster", 200, None),
            ("watch", "cluster", 200, listed),
            ("watch", "cluster", 500, listed),
        ]
        # The pod ends; no feed could tell the trigger.
        cluster.exit_container(name, 0)
        assert phase(cluster, name) == "Succeeded"
        assert run.events == []
        # Its re-check falls due: with no news for that long, the trigger reads the pod itself,
        # once, and the one event is the success.
        first = mark(cluster)
        trigger_clock.advance(RECHECK)
        event = await run.finish(within=30)
        assert event.verdict.outcome is Outcome.SUCCEED
        assert requests(cluster, first) == [("get", "pods", "default", 200)]


async def test_a_live_pod_the_feed_called_gone_is_followed_again(
    monkeypatch: pytest.MonkeyPatch, trigger_clock: ManualClock, held_hub: ManualClock
) -> None:
    # The container runs until the test ends it, after the label dance.
    scenario = {"images": {"job:1": {"run": {"exit_code": 0, "duration_seconds": 10**7}}}}
    with FakeCluster(scenario, clock="manual") as cluster:
        pod, _, run = await running_and_followed(cluster, monkeypatch, trigger_clock, "misled")
        name = pod["metadata"]["name"]
        listed = str(cluster.resource_version)
        # A webhook takes the label off: the watch no longer shows the pod. The history is
        # compacted and the watch cut; the feed's next watch is answered 410 and its re-list no
        # longer has the pod: it reports it deleted.
        set_managed_label(cluster, name, None)
        cluster.compact()
        cluster.drop_watches("pods")
        first = mark(cluster)
        held_hub.set(await backs_off(held_hub))  # the watch ended with nothing in it
        # The trigger's clock moves a second (no timer of its falls due), so that the wait that
        # follows the last look is one of its own.
        trigger_clock.advance(1)
        held_hub.set(await backs_off(held_hub))  # 410: gone again before anything came through
        # The last look finds the pod alive and withdraws the deletion; the trigger waits for the
        # running pod's re-check again.
        await trigger_clock.wait_for_sleeper(trigger_clock.now() + RECHECK)
        assert run.events == []
        relisted = str(cluster.resource_version)
        # The feed watches again from its listing (the trigger's look may come first or not).
        await cluster_reaches(
            cluster, lambda c: len(feed_requests(c, "pods", first, verbs=("watch",))) == 2, 30
        )
        assert feed_requests(cluster, "pods", first, verbs=("list", "watch")) == [
            ("watch", "cluster", 200, listed),  # its stream's one event: 410 Expired
            ("list", "cluster", 200, None),
            ("watch", "cluster", 200, relisted),
        ]
        assert requests(cluster, first, verbs=("get",)) == [("get", "pods", "default", 200)]
        # The label comes back; the pod's later changes must reach the trigger through the feed
        # (the clock does not move, so no re-check reads the pod).
        set_managed_label(cluster, name, "true")
        cluster.exit_container(name, 0)
        event = await run.finish(within=30)
        assert event.verdict.outcome is Outcome.SUCCEED
        assert requests(cluster, first, verbs=("get", "list")) == [
            ("list", "pods", "cluster", 200),
            ("get", "pods", "default", 200),
        ]


async def test_a_relaunch_waits_until_the_disrupted_pod_stopped(
    monkeypatch: pytest.MonkeyPatch, trigger_clock: ManualClock, held_hub: ManualClock
) -> None:
    # A checkpointing job: after SIGTERM it takes 400 s to exit, within its 600 s of grace; a
    # replacement started in that time would run beside it.
    run_spec = {"exit_code": 0, "duration_seconds": 100_000, "stop_seconds": 400}
    scenario = {"images": {"long:1": {"run": run_spec}}}
    with FakeCluster(scenario, clock="manual") as cluster:
        use_cluster(monkeypatch, cluster)
        identity = TryIdentity("overlap", "task", "run-1")
        pod = create_pod(cluster, pod_body(identity, "long:1", spec={"terminationGracePeriodSeconds": 600}))
        name = pod["metadata"]["name"]
        cluster.advance(STARTED)
        trigger = trigger_for(pod, identity)
        seen: list[tuple[PodEvent, dict[str, Any] | None]] = []

        async def consume() -> None:
            async for event in trigger.run():
                # The old pod as it is the moment the verdict leaves the trigger.
                seen.append((PodEvent.from_payload(event.payload), cluster.pod(name)))

        task = asyncio.get_running_loop().create_task(consume())
        await until_watching(cluster)
        await trigger_clock.wait_for_sleeper(trigger_clock.now() + RECHECK)
        # Preempted: the pod is marked for deletion and its container told to stop. The trigger
        # sees the container still running and holds the relaunch, at most the pod's grace and a
        # margin (600 + 30 s on its clock, which does not move here).
        cluster.disrupt(name, "preempt")
        await trigger_clock.wait_for_sleeper(trigger_clock.now() + 630)
        assert seen == []
        # The container exits 400 s after its SIGTERM; only then does the relaunch leave, while
        # the old pod (its deletion not confirmed yet) shows no container running.
        first = mark(cluster)
        cluster.advance(400)
        await asyncio.wait_for(task, 30)
        [(event, old)] = seen
        assert event.verdict.outcome is Outcome.RELAUNCH
        assert old is not None and old["status"]["phase"] == "Failed"
        assert [c["state"]["terminated"]["exitCode"] for c in old["status"]["containerStatuses"]] == [143]
        assert requests(cluster, first) == [("get", "pods", "default", 200)]  # the last look
