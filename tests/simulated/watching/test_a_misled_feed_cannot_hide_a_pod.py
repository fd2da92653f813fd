"""The shared feed can be stuck or wrong about a pod; the trigger still reaches the right verdict.

* A feed that can no longer watch (a proxy that breaks watches, a starved pool, a token the watch
  never refreshes) delivers nothing: the trigger's re-check reads the pod itself.
* A feed that calls a live pod gone (a label edited off the selector, a re-list that misses it):
  once the last look withdraws that, the subscription follows the pod again.
* A disrupted pod is replaced only once its containers stopped: no two copies of one try.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from airflow_k8s_retry.classification import Outcome
from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.config import ClusterConfig, sync_api_client
from airflow_k8s_retry.kube.naming import MANAGED_LABEL, TryIdentity
from airflow_k8s_retry.kube.watch_settings import HubSettings
from airflow_k8s_retry.triggers import PodEvent, PodStateTrigger
from airflow_k8s_retry_testing import FakeCluster
from tests.support.lab import Run, cluster_reaches, create_pod, pod_body, trigger_for, use_cluster


def phase(cluster: FakeCluster, name: str) -> str | None:
    return ((cluster.pod(name) or {}).get("status") or {}).get("phase")


def set_managed_label(cluster: FakeCluster, name: str, value: str | None) -> None:
    client = sync_api_client(ClusterConfig(kube_config_path=str(cluster.kubeconfig)))
    try:
        from kubernetes import client as k

        body = {"metadata": {"labels": {MANAGED_LABEL: value}}}
        k.CoreV1Api(client).patch_namespaced_pod(name, "default", body)
    finally:
        client.close()


async def test_a_stuck_feed_does_not_hide_a_finished_pod(
    monkeypatch: pytest.MonkeyPatch, manual_clock: ManualClock, hub_settings: Callable[..., HubSettings]
) -> None:
    # The container runs until the test ends it (a scripted end could come before the fault).
    scenario = {"images": {"job:1": {"run": {"exit_code": 0, "duration_seconds": 10**7}}}}
    with FakeCluster(scenario, time_scale=0.01) as cluster:
        use_cluster(monkeypatch, cluster)
        monkeypatch.setattr(PodStateTrigger, "clock", manual_clock)
        hub_settings(watch_timeout=(1, 1), backoff_cap=0.2)
        identity = TryIdentity("stuck", "feed", "run-1")
        pod = create_pod(cluster, pod_body(identity, "job:1"))
        name = pod["metadata"]["name"]
        await cluster_reaches(cluster, lambda c: phase(c, name) == "Running", 10)
        run = Run(trigger_for(pod, identity)).start()
        # Seen running: the next re-check is due in 10 minutes.
        await manual_clock.wait_for_sleeper(manual_clock.now() + 600)
        # From now on the feed can neither watch nor re-list; GET still works. Then the pod ends.
        due = manual_clock.now() + 600
        cluster.add_fault(verb="watch", resource="pods", status=500, times=None)
        cluster.add_fault(verb="list", resource="pods", status=500, times=None)
        cluster.drop_watches("pods")
        cluster.exit_container(name, 0)
        await cluster_reaches(cluster, lambda c: phase(c, name) == "Succeeded", 20)
        assert run.events == [], "no feed could have told the trigger"
        gets = cluster.request_counts()[("get", "pods")]
        # The trigger is asleep until its re-check (not busy elsewhere) when the clock moves.
        await manual_clock.wait_for_sleeper(due)
        manual_clock.advance(600)
        event = await run.finish(within=20)
        assert event.verdict.outcome is Outcome.SUCCEED
        assert cluster.request_counts()[("get", "pods")] > gets, "the re-check read the pod"


async def test_a_live_pod_the_feed_called_gone_is_followed_again(
    monkeypatch: pytest.MonkeyPatch, manual_clock: ManualClock
) -> None:
    # The container runs until the test ends it, after the label dance.
    scenario = {"images": {"job:1": {"run": {"exit_code": 0, "duration_seconds": 10**7}}}}
    with FakeCluster(scenario, time_scale=0.01) as cluster:
        use_cluster(monkeypatch, cluster)
        monkeypatch.setattr(PodStateTrigger, "clock", manual_clock)
        identity = TryIdentity("misled", "feed", "run-1")
        pod = create_pod(cluster, pod_body(identity, "job:1"))
        name = pod["metadata"]["name"]
        await cluster_reaches(cluster, lambda c: phase(c, name) == "Running", 10)
        run = Run(trigger_for(pod, identity)).start()
        await manual_clock.wait_for_sleeper(manual_clock.now() + 600)
        # A webhook takes the label off: the feed's re-list (forced by a compaction) no longer
        # sees the pod and reports it deleted; the last look finds it alive and withdraws that.
        gets = cluster.request_counts()[("get", "pods")]
        set_managed_label(cluster, name, None)
        cluster.compact()
        cluster.drop_watches("pods")
        await cluster_reaches(cluster, lambda c: c.request_counts()[("get", "pods")] > gets, 10)
        await manual_clock.wait_for_sleeper(manual_clock.now() + 600)
        assert run.events == []
        # The label comes back; the pod's later changes must reach the trigger through the feed
        # (the clock does not move, so no re-check reads the pod).
        set_managed_label(cluster, name, "true")
        cluster.exit_container(name, 0)
        await cluster_reaches(cluster, lambda c: phase(c, name) == "Succeeded", 30)
        event = await run.finish(within=20)
        assert event.verdict.outcome is Outcome.SUCCEED


async def test_a_relaunch_waits_until_the_disrupted_pod_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    # A checkpointing job: after SIGTERM it takes 400 s to exit, within its 600 s of grace (4 and
    # 6 real seconds); a replacement started in that time would run beside it.
    run_spec = {"exit_code": 0, "duration_seconds": 100_000, "stop_seconds": 400}
    scenario = {"images": {"long:1": {"run": run_spec}}}
    with FakeCluster(scenario, time_scale=0.01) as cluster:
        use_cluster(monkeypatch, cluster)
        identity = TryIdentity("overlap", "task", "run-1")
        pod = create_pod(cluster, pod_body(identity, "long:1", spec={"terminationGracePeriodSeconds": 600}))
        name = pod["metadata"]["name"]
        await cluster_reaches(cluster, lambda c: phase(c, name) == "Running", 10)
        trigger = trigger_for(pod, identity)
        seen: list[tuple[PodEvent, dict[str, Any] | None]] = []

        async def consume() -> None:
            async for event in trigger.run():
                # The old pod as it is the moment the verdict leaves the trigger.
                seen.append((PodEvent.from_payload(event.payload), cluster.pod(name)))

        task = asyncio.get_running_loop().create_task(consume())
        await cluster_reaches(cluster, lambda c: c.request_counts()[("watch", "pods")] >= 1, 10)
        await asyncio.sleep(0)
        await asyncio.to_thread(cluster.disrupt, name, "preempt")
        await asyncio.wait_for(task, 30)
        [(event, old)] = seen
        assert event.verdict.outcome is Outcome.RELAUNCH
        running = [
            c["name"]
            for c in ((old or {}).get("status") or {}).get("containerStatuses") or []
            if "running" in (c.get("state") or {})
        ]
        assert old is None or not running, f"RELAUNCH fired while {running} still ran in the old pod"
