"""The shared watch loses nothing and repeats nothing through 410 Gone, 5xx, 429, dropped connections
and RBAC that forbids watching.

Each test follows one pod's life with a trigger and, on the same shared feed, a plain subscription
that records every change it is given. After the pod is done, a fresh watch from before the pod's
creation (the simulator keeps the history) gives the reference sequence of the pod's versions.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from airflow_k8s_retry.classification import Outcome
from airflow_k8s_retry.kube.aio import AsyncKube
from airflow_k8s_retry.kube.config import ClusterConfig
from airflow_k8s_retry.kube.hub import PodChange, PodSubscription, WatchHub
from airflow_k8s_retry.kube.naming import MANAGED_SELECTOR, TryIdentity
from airflow_k8s_retry.kube.watch_settings import HubSettings
from airflow_k8s_retry_testing import FakeCluster
from tests.support.lab import Run, cluster_reaches, create_pod, pod_body, trigger_for, use_cluster

#: A pod with many changes: pulls rate-limited for 20 simulated seconds (1 real second), then runs
#: for 30 (1.5 real seconds); long enough for several watch reconnections in its life.
SCENARIO = {
    "images": {
        "job:1": {"pull": "rate_limited", "for_seconds": 20, "run": {"exit_code": 0, "duration_seconds": 30}}
    }
}


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster(SCENARIO, time_scale=0.05) as running:
        yield running


@pytest.fixture(autouse=True)
def quick_reconnects(hub_settings: Callable[..., HubSettings]) -> None:
    # Watches end every second, so faults armed during a pod's life hit the reconnections.
    hub_settings(watch_timeout=(1, 1), backoff_base=0.05, backoff_cap=0.2)


class Recorder:
    """Drains a subscription into a list of the pod states it was given."""

    def __init__(self, sub: PodSubscription) -> None:
        self.sub = sub
        self.changes: list[PodChange] = []

    async def first_state(self, within: float) -> None:
        """Wait for the subscription's first delivery of the pod."""
        assert await self.sub.wait(within=within), "the subscription delivered nothing in time"
        self.changes.extend(self.sub.drain())

    async def until_done(self, within: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while not self.finished:
            assert await self.sub.wait(within=max(0.0, deadline - loop.time())), "no final state in time"
            self.changes.extend(self.sub.drain())
        await self.sub.close()

    @property
    def finished(self) -> bool:
        done = ("Succeeded", "Failed")
        return any(c.pod is not None and c.pod["status"].get("phase") in done for c in self.changes)

    @property
    def versions(self) -> list[int]:
        return [int(c.pod["metadata"]["resourceVersion"]) for c in self.changes if c.pod is not None]

    def check_against(self, reference: list[int], *, complete: bool) -> None:
        """Versions strictly increasing (no duplicate), ending at the pod's last version; with
        ``complete``, every version after the first one seen (no loss)."""
        versions = self.versions
        assert versions == sorted(set(versions)), f"duplicate or out of order: {versions}"
        assert versions[-1] == reference[-1]
        if complete:
            assert versions == [v for v in reference if v >= versions[0]]
        else:
            assert set(versions) <= set(reference)


async def reference_versions(cluster: FakeCluster, name: str, uid: str, since: int) -> list[int]:
    """Every version of the pod, from a fresh watch over the simulator's history."""
    kube = await AsyncKube.connect(ClusterConfig(kube_config_path=str(cluster.kubeconfig)))
    try:
        versions = []
        stream = kube.watch_pods("default", resource_version=str(since), timeout_seconds=1)
        async with contextlib.aclosing(stream):
            async for event in stream:
                meta = event.object.get("metadata") or {}
                if meta.get("uid") == uid and event.type in ("ADDED", "MODIFIED"):
                    versions.append(int(meta["resourceVersion"]))
        return versions
    finally:
        await kube.close()


async def follow(
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    arm: Any,
    kubeconfig: Any = None,
    poll_interval: float = 10.0,
    history_kept: bool = True,
) -> tuple[Recorder, list[int], dict[str, Any]]:
    """Create a pod, follow it with a trigger and a recorder, arm the faults once the recorder has
    been given the pod's first state (so everything after it is the recorder's to lose)."""
    use_cluster(monkeypatch, cluster, kubeconfig)
    start_rv = cluster.resource_version
    identity = TryIdentity("faults", "task", "run-1")
    pod = create_pod(cluster, pod_body(identity, "job:1"))
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    config = ClusterConfig(kube_config_path=str(kubeconfig or cluster.kubeconfig))
    sub = await WatchHub.current().subscribe(
        config, "default", name, uid, label_selector=MANAGED_SELECTOR, poll_interval=poll_interval
    )
    recorder = Recorder(sub)
    run = Run(trigger_for(pod, identity, poll_interval=poll_interval)).start()
    await recorder.first_state(within=30)
    armed = arm(cluster)
    if inspect.isawaitable(armed):
        await armed
    await recorder.until_done(within=30)
    event = await run.finish(within=30)
    assert event.verdict.outcome is Outcome.SUCCEED
    if history_kept:
        reference = await reference_versions(cluster, name, uid, start_rv)
    else:
        reference = [int((cluster.pod(name) or {})["metadata"]["resourceVersion"])]
    return recorder, reference, pod


@pytest.mark.parametrize("status", [500, 429, "reset"])
async def test_transient_errors_resume_without_loss_or_duplicate(
    status: int | str, cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    changed_while_down: list[int] = []

    async def arm(c: FakeCluster) -> None:
        # The watch fails from its next reconnection on; while it is down the pod changes three
        # times; it comes back only after two more failed reconnections. An exact order, whatever
        # the machine's load: the changes are made after the first failure and before the faults go.
        watches = c.request_counts()[("watch", "pods")]
        c.add_fault(verb="watch", resource="pods", status=status, times=None)
        await cluster_reaches(c, lambda c: c.request_counts()[("watch", "pods")] >= watches + 1, 10)
        (pod_name,) = [p["metadata"]["name"] for p in c.pods("default")]
        kube = await AsyncKube.connect(ClusterConfig(kube_config_path=str(c.kubeconfig)))
        try:
            for n in range(3):
                patched = await kube.patch_pod_annotations("default", pod_name, {"example.com/step": str(n)})
                changed_while_down.append(int(patched["metadata"]["resourceVersion"]))
        finally:
            await kube.close()
        await cluster_reaches(c, lambda c: c.request_counts()[("watch", "pods")] >= watches + 3, 10)
        c.clear_faults()
        c.add_fault(verb="list", resource="events", status=status, times=2)

    recorder, reference, _ = await follow(cluster, monkeypatch, arm)
    # Resumed from the last resourceVersion: every version of the pod, once each, in order, from
    # the first one the recorder was given (before the outage), so the changes made while the
    # watch was down are among them.
    recorder.check_against(reference, complete=True)
    assert recorder.versions[0] < changed_while_down[0]
    assert set(changed_while_down) <= set(recorder.versions)


async def test_410_gone_relists_and_delivers_the_latest_state_once(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    def arm(c: FakeCluster) -> None:
        c.add_fault(verb="watch", resource="pods", status=410, times=1)

    lists_before = cluster.request_counts()[("list", "pods")]
    recorder, reference, _ = await follow(cluster, monkeypatch, arm)
    assert cluster.request_counts()[("list", "pods")] > lists_before + 1  # re-listed after 410
    recorder.check_against(reference, complete=False)


async def test_a_watch_behind_compacted_history_relists(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def arm(c: FakeCluster) -> None:
        # Keep the watch down while the pod changes, compact the history, then let it reconnect:
        # the version it resumes from is gone.
        c.add_fault(verb="watch", resource="pods", status=500, times=None)
        await cluster_reaches(c, lambda c: c.request_counts()[("watch", "pods")] >= 2, 10)
        changed_from = c.resource_version
        await cluster_reaches(c, lambda c: c.resource_version >= changed_from + 2, 10)
        c.compact()
        c.clear_faults()

    lists_before = cluster.request_counts()[("list", "pods")]
    recorder, reference, _ = await follow(cluster, monkeypatch, arm, history_kept=False)
    assert cluster.request_counts()[("list", "pods")] > lists_before + 1
    versions = recorder.versions
    assert versions == sorted(set(versions)) and versions[-1] == reference[-1]


async def test_forbidden_watch_falls_back_to_listing(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig = cluster.restrict("no-watch-token", verbs=["get", "list", "patch"])
    recorder, reference, _ = await follow(cluster, monkeypatch, lambda c: None, kubeconfig, poll_interval=0.2)
    recorder.check_against(reference, complete=False)
    assert cluster.request_counts()[("list", "pods")] >= 3  # polled


async def test_forbidden_list_falls_back_to_reading_each_pod(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig = cluster.restrict("get-only-token", verbs=["get", "patch"])
    recorder, reference, _ = await follow(cluster, monkeypatch, lambda c: None, kubeconfig, poll_interval=0.2)
    recorder.check_against(reference, complete=False)
    assert cluster.request_counts()[("get", "pods")] >= 3
