"""A trigger re-created from its kwargs (a triggerer restart) keeps its grace timers and fires once.

The cluster runs on a manual clock (a pull is refused only once the test advances it), the hub's
waits on a clock nobody advances, and grace timers only on the trigger's clock, which the test
moves: every step has one outcome, and the tests assert the exact requests from the simulator's audit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kubernetes.config import new_client_from_config

from airflow_k8s_retry.classification import Outcome, Reason, Verdict
from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.hub import WatchHub
from airflow_k8s_retry.kube.naming import HISTORY_ANNOTATION, VERDICT_ANNOTATION, TryIdentity
from airflow_k8s_retry.triggers import PodStateTrigger
from airflow_k8s_retry_testing import FakeCluster
from tests.support.feeds import feed_requests, mark, requests, until_watching
from tests.support.lab import (
    Run,
    TriggerLog,
    cluster_reaches,
    create_pod,
    pod_body,
    trigger_for,
    use_cluster,
)

SIGNAL = "image.not_found:base"
GRACE = 90.0  # the default for an image that is not found
#: How long a pending pod's trigger waits at most (the deadline of a pod that never starts).
PENDING_WAIT = 900.0
#: Simulated seconds from a pod's creation: its first pull is refused; a pod that pulls runs.
PULL_REFUSED, STARTED = 0.4, 0.3
SCENARIO = {
    "images": {
        "ghost:1": {"pull": "not_found"},
        "long:1": {"pull": "ok", "run": {"exit_code": 0, "duration_seconds": 100_000}},
    }
}


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster(SCENARIO, clock="manual") as running:
        yield running


def first_seen(cluster: FakeCluster, name: str) -> dict[str, float]:
    pod = cluster.pod(name) or {}
    raw = (pod.get("metadata", {}).get("annotations") or {}).get(HISTORY_ANNOTATION)
    return dict(json.loads(raw)["first_seen"]) if raw else {}


async def pull_refused(
    cluster: FakeCluster, trigger_clock: ManualClock, since: int = 0, **watching: str
) -> None:
    """Once the trigger waits on the pending pod through feeds that watch: the first pull is refused."""
    await until_watching(cluster, since=since, **watching)
    await trigger_clock.wait_for_sleeper(trigger_clock.now() + PENDING_WAIT)
    cluster.advance(PULL_REFUSED)


async def test_a_restart_in_the_middle_of_a_grace_keeps_the_timer(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, trigger_clock: ManualClock, held_hub: ManualClock
) -> None:
    use_cluster(monkeypatch, cluster)
    identity = TryIdentity("restart", "task", "run-1")
    pod = create_pod(cluster, pod_body(identity, "ghost:1"))
    name = pod["metadata"]["name"]
    first = Run(trigger_for(pod, identity)).start()
    await pull_refused(cluster, trigger_clock)
    await cluster_reaches(cluster, lambda c: SIGNAL in first_seen(c, name), 30)
    started = first_seen(cluster, name)[SIGNAL]
    await trigger_clock.wait_for_sleeper(started + GRACE)

    # Two thirds into the grace the triggerer goes away; another one re-creates the trigger from
    # the kwargs stored at deferral time (which know nothing of the signal).
    trigger_clock.advance(60)
    await first.stop()
    assert first.events == []
    assert WatchHub.current().stats() == []  # the last subscriber out closed the feeds
    _, kwargs = first.trigger.serialize()
    assert kwargs["history"] is None
    restarted, relisted = mark(cluster), str(cluster.resource_version)
    second = Run(PodStateTrigger(**kwargs)).start()

    # The timer is where it was, not 90 s after the restart.
    await until_watching(cluster, since=restarted)
    await trigger_clock.wait_for_sleeper(started + GRACE)
    trigger_clock.advance(GRACE - 60)
    event = await second.finish(within=30)
    assert (event.verdict.outcome, event.verdict.reason) == (Outcome.RETRY, Reason.IMAGE_NOT_FOUND)
    assert event.verdict.history.first_seen[SIGNAL] == started
    # The first trigger stamped its timer once; the second read it off the pod in its feed's listing
    # and stamped nothing; one last look before the retry left.
    assert requests(cluster, verbs=("patch", "get")) == [
        ("patch", "pods", "default", 200),
        ("get", "pods", "default", 200),
    ]
    # Each trigger's feeds listed, and watched from their listing: the cluster as it was when the
    # trigger started (nothing changes while a trigger's feeds start).
    for kind in ("pods", "events"):
        assert feed_requests(cluster, kind, verbs=("list", "watch")) == [
            ("list", "cluster", 200, None),
            ("watch", "cluster", 200, pod["metadata"]["resourceVersion"]),
            ("list", "cluster", 200, None),
            ("watch", "cluster", 200, relisted),
        ]


async def test_a_pod_that_cannot_be_annotated_keeps_its_timers_in_memory(
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    trigger_clock: ManualClock,
    held_hub: ManualClock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A sensor watching someone else's pod, with RBAC that allows reading but not patching.
    kubeconfig = cluster.restrict("read-only", verbs=["get", "list", "watch"])
    use_cluster(monkeypatch, cluster, kubeconfig)
    theirs = pod_body(TryIdentity("other", "team", "r"), "ghost:1", labels={"app": "theirs"})
    pod = create_pod(cluster, theirs)
    run = Run(trigger_for(pod, None, owned=False)).start()
    await pull_refused(cluster, trigger_clock, selector="")
    seen = trigger_clock.now()  # when the trigger saw the refusal (its clock has not moved)
    await trigger_clock.wait_for_sleeper(seen + GRACE)
    assert requests(cluster, verbs=("patch",)) == [("patch", "pods", "default", 403)]
    # A minute on, the trigger wakes to say what it awaits (and would stamp its timer then, if it
    # still tried), then waits again: a stamp it tried would have been answered by then.
    trigger_clock.advance(60)
    await TriggerLog(capsys).until("image.not_found: waiting since")
    await trigger_clock.wait_for_sleeper(seen + GRACE)
    assert requests(cluster, verbs=("patch",)) == [("patch", "pods", "default", 403)]
    trigger_clock.advance(GRACE - 60)
    event = await run.finish(within=30)
    assert event.verdict.reason is Reason.IMAGE_NOT_FOUND
    # Tried once, answered 403, never again; then the last look.
    assert requests(cluster, verbs=("patch", "get")) == [
        ("patch", "pods", "default", 403),
        ("get", "pods", "default", 200),
    ]


@pytest.mark.usefixtures("trigger_clock")
async def test_a_stamped_pod_is_finished_business(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, held_hub: ManualClock
) -> None:
    use_cluster(monkeypatch, cluster)
    identity = TryIdentity("stamped", "task", "run-1")
    pod = create_pod(cluster, pod_body(identity, "long:1"))
    name = pod["metadata"]["name"]
    cluster.advance(STARTED)
    assert (cluster.pod(name) or {})["status"]["phase"] == "Running"
    # An earlier trigger decided and the operator stamped the verdict, then the triggerer restarted.
    stamp = Verdict(Outcome.RETRY, Reason.CONTAINER_OOM, "container base was OOM-killed", "oom_killed")
    client = new_client_from_config(config_file=str(cluster.kubeconfig), persist_config=False)
    try:
        from kubernetes import client as k

        annotations = {VERDICT_ANNOTATION: json.dumps(stamp.to_payload())}
        k.CoreV1Api(client).patch_namespaced_pod(name, "default", {"metadata": {"annotations": annotations}})
    finally:
        client.close()
    first = mark(cluster)
    event = await Run(trigger_for(pod, identity)).start().finish(within=30)
    # The running pod is not re-classified: the stamped verdict is the verdict, without a last look
    # or a stamp of the trigger's own: only the feeds' requests.
    assert event.verdict == stamp
    # The trigger closed its feeds as it returned, maybe before their watches opened.
    made = requests(cluster, first)
    assert {r for r in made if r[0] == "list"} == {
        ("list", "events", "cluster", 200),
        ("list", "pods", "cluster", 200),
    }
    assert [r for r in made if r[0] not in ("list", "watch")] == []
