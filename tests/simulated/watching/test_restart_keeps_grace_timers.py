"""A trigger re-created from its kwargs (a triggerer restart) keeps its grace timers and fires once."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from airflow_k8s_retry.classification import Outcome, Reason, Verdict
from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.config import ClusterConfig, sync_api_client
from airflow_k8s_retry.kube.hub import WatchHub
from airflow_k8s_retry.kube.naming import HISTORY_ANNOTATION, VERDICT_ANNOTATION, TryIdentity
from airflow_k8s_retry.triggers import PodStateTrigger
from airflow_k8s_retry_testing import FakeCluster
from tests.support.lab import Run, cluster_reaches, create_pod, pod_body, trigger_for, use_cluster

SIGNAL = "image.not_found:base"
GRACE = 90.0  # the default for an image that is not found
SCENARIO = {
    "images": {
        "ghost:1": {"pull": "not_found"},
        "long:1": {"pull": "ok", "run": {"exit_code": 0, "duration_seconds": 100_000}},
    }
}


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster(SCENARIO, time_scale=0.01) as running:
        yield running


def first_seen(cluster: FakeCluster, name: str) -> dict[str, float]:
    pod = cluster.pod(name) or {}
    raw = (pod.get("metadata", {}).get("annotations") or {}).get(HISTORY_ANNOTATION)
    return dict(json.loads(raw)["first_seen"]) if raw else {}


async def test_a_restart_in_the_middle_of_a_grace_keeps_the_timer(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, manual_clock: ManualClock
) -> None:
    use_cluster(monkeypatch, cluster)
    monkeypatch.setattr(PodStateTrigger, "clock", manual_clock)
    identity = TryIdentity("restart", "task", "run-1")
    pod = create_pod(cluster, pod_body(identity, "ghost:1"))
    name = pod["metadata"]["name"]
    first = Run(trigger_for(pod, identity)).start()
    await cluster_reaches(cluster, lambda c: SIGNAL in first_seen(c, name), 10)
    started = first_seen(cluster, name)[SIGNAL]
    await manual_clock.wait_for_sleeper(started + GRACE)

    # Two thirds into the grace the triggerer goes away; another one re-creates the trigger from
    # the kwargs stored at deferral time (which know nothing of the signal).
    manual_clock.advance(60)
    await first.stop()
    assert first.events == []
    assert WatchHub.current().stats() == []  # the last subscriber out closed the feeds
    _, kwargs = first.trigger.serialize()
    assert kwargs["history"] is None
    second = Run(PodStateTrigger(**kwargs)).start()

    # The timer is where it was, not 90 s after the restart.
    await manual_clock.wait_for_sleeper(started + GRACE)
    manual_clock.advance(GRACE - 60)
    event = await second.finish(within=10)
    assert (event.verdict.outcome, event.verdict.reason) == (Outcome.RETRY, Reason.IMAGE_NOT_FOUND)
    assert event.verdict.history.first_seen[SIGNAL] == started


async def test_a_pod_that_cannot_be_annotated_keeps_its_timers_in_memory(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, manual_clock: ManualClock
) -> None:
    # A sensor watching someone else's pod, with RBAC that allows reading but not patching.
    kubeconfig = cluster.restrict("read-only", verbs=["get", "list", "watch"])
    use_cluster(monkeypatch, cluster, kubeconfig)
    monkeypatch.setattr(PodStateTrigger, "clock", manual_clock)
    theirs = pod_body(TryIdentity("other", "team", "r"), "ghost:1", labels={"app": "theirs"})
    pod = create_pod(cluster, theirs)
    run = Run(trigger_for(pod, None, owned=False)).start()
    await manual_clock.wait_for_sleeper(manual_clock.now() + GRACE)
    manual_clock.advance(GRACE)
    event = await run.finish(within=10)
    assert event.verdict.reason is Reason.IMAGE_NOT_FOUND
    assert cluster.request_counts()[("patch", "pods")] == 1  # tried once, answered 403, never again


async def test_a_stamped_pod_is_finished_business(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, manual_clock: ManualClock
) -> None:
    use_cluster(monkeypatch, cluster)
    monkeypatch.setattr(PodStateTrigger, "clock", manual_clock)
    identity = TryIdentity("stamped", "task", "run-1")
    pod = create_pod(cluster, pod_body(identity, "long:1"))
    name = pod["metadata"]["name"]
    await cluster_reaches(cluster, lambda c: (c.pod(name) or {})["status"].get("phase") == "Running", 10)
    # An earlier trigger decided and the operator stamped the verdict, then the triggerer restarted.
    stamp = Verdict(Outcome.RETRY, Reason.CONTAINER_OOM, "container base was OOM-killed", "oom_killed")
    client = sync_api_client(ClusterConfig(kube_config_path=str(cluster.kubeconfig)))
    try:
        from kubernetes import client as k

        annotations = {VERDICT_ANNOTATION: json.dumps(stamp.to_payload())}
        k.CoreV1Api(client).patch_namespaced_pod(name, "default", {"metadata": {"annotations": annotations}})
    finally:
        client.close()
    event = await Run(trigger_for(pod, identity)).start().finish(within=10)
    # The running pod is not re-classified: the stamped verdict is the verdict.
    assert event.verdict == stamp
