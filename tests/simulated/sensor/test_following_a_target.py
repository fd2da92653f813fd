"""A PodStateTrigger given a target waits for the pod to appear, follows the newest pod of a
selector, judges a Job's pods as part of the Job, and reports a timeout: all through the watch."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_k8s_retry.classification import Outcome, Reason
from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.config import ClusterConfig, sync_api_client
from airflow_k8s_retry.triggers import PodStateTrigger
from airflow_k8s_retry.triggers.target import PROGRESS_EVERY, Target, TargetEvent
from airflow_k8s_retry_testing import FakeCluster
from tests.support.lab import CONN_ID, cluster_reaches, use_cluster

SCENARIO = {
    "images": {
        "quick:1": {"run": {"duration_seconds": 2}},
        "long:1": {"run": {"duration_seconds": 100_000}},
        "fails:1": {"run": {"exit_code": 3, "duration_seconds": 1, "log": "boom"}},
    }
}


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCluster]:
    with FakeCluster(SCENARIO, time_scale=0.02) as running:
        use_cluster(monkeypatch, running)
        yield running


def following(target: Target, **kwargs: Any) -> PodStateTrigger:
    return PodStateTrigger(
        kubernetes_conn_id=CONN_ID,
        namespace=target.namespace,
        pod_name="",
        pod_uid="",
        identity=None,
        policy=None,
        owned=False,
        target=target.to_payload(),
        **kwargs,
    )


class Following:
    """A following trigger running in the test's loop, like the triggerer runs it."""

    def __init__(self, trigger: PodStateTrigger) -> None:
        self.trigger = trigger
        self.events: list[TargetEvent] = []
        self.task = asyncio.get_running_loop().create_task(self._consume())

    async def _consume(self) -> None:
        async for event in self.trigger.run():
            self.events.append(TargetEvent.from_payload(event.payload))

    async def finish(self, within: float) -> TargetEvent:
        await asyncio.wait_for(asyncio.shield(self.task), within)
        assert len(self.events) == 1, self.events
        return self.events[0]


def create(cluster: FakeCluster, kind: str, body: dict[str, Any]) -> dict[str, Any]:
    from kubernetes import client

    api = sync_api_client(ClusterConfig(kube_config_path=str(cluster.kubeconfig)))
    try:
        if kind == "job":
            made = client.BatchV1Api(api).create_namespaced_job("default", body)
        else:
            made = client.CoreV1Api(api).create_namespaced_pod("default", body)
        return dict(api.sanitize_for_serialization(made))
    finally:
        api.close()


def pod(name: str, image: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {"app": "report"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": image}]},
    }


def job(name: str, image: str, *, backoff_limit: int = 6) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": backoff_limit,
            "template": {
                "metadata": {"labels": {"app": "etl"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": image}]},
            },
        },
    }


def watching_pods(cluster: FakeCluster) -> bool:
    return any(w.resource == "pods" for w in cluster.store.watchers)


async def test_waits_for_a_pod_created_later_without_polling(cluster: FakeCluster) -> None:
    run = Following(following(Target("default", pod_name="report-1")))
    await cluster_reaches(cluster, watching_pods, within=10)
    await asyncio.sleep(0.3)  # the trigger waits; nothing it does may be a read of the pod
    assert cluster.request_counts()[("get", "pods")] == 0
    assert run.events == []

    create(cluster, "pod", pod("report-1", "quick:1"))
    event = await run.finish(within=20)
    assert event.event is not None and not event.timed_out
    assert (event.event.pod_name, event.event.verdict.outcome) == ("report-1", Outcome.SUCCEED)
    gets_before_the_pod = [
        r
        for r in cluster.audit_records()
        if r.get("verb") == "get" and r.get("resource") == "pods" and r.get("status") == 404
    ]
    assert gets_before_the_pod == [], "waiting for the pod to appear is the watch's job, not GETs"


async def test_a_selector_follows_the_newest_matching_pod(cluster: FakeCluster) -> None:
    create(cluster, "pod", pod("report-old", "long:1"))
    run = Following(following(Target("default", label_selector="app=report")))
    await cluster_reaches(cluster, watching_pods, within=10)
    await cluster_reaches(cluster, lambda c: c.request_counts()[("watch", "events")] > 0, within=10)
    create(cluster, "pod", pod("report-new", "fails:1"))
    event = await run.finish(within=20)
    assert event.event is not None
    assert event.event.pod_name == "report-new"
    assert (event.event.verdict.outcome, event.event.verdict.reason) == (
        Outcome.RETRY,
        Reason.CONTAINER_EXIT_CODE,
    )


@pytest.fixture
def evicting(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCluster]:
    """The first pod of Job ``etl`` is evicted a second after it starts (count 1: not its successor)."""
    disruption = {"pod_name_prefix": "etl-", "after_seconds": 1, "kind": "evict"}
    with FakeCluster({**SCENARIO, "disruptions": [disruption]}, time_scale=0.02) as running:
        use_cluster(monkeypatch, running)
        yield running


async def test_a_failed_pod_the_job_replaces_is_not_the_end(evicting: FakeCluster) -> None:
    run = Following(following(Target("default", job_name="etl")))
    await cluster_reaches(evicting, watching_pods, within=10)
    create(evicting, "job", job("etl", "quick:1"))
    event = await run.finish(within=30)
    pods = evicting.pods()
    assert len(pods) == 2, "the Job replaced its evicted pod"
    assert event.job == "etl" and event.event is not None
    assert event.event.verdict.outcome is Outcome.SUCCEED
    assert "job default/etl is complete (CompletionsReached" in event.event.verdict.message
    assert sorted(p["status"].get("reason", "") for p in pods) == ["", "Evicted"]


async def test_a_job_that_fails_reports_the_cause_of_its_last_pod(cluster: FakeCluster) -> None:
    run = Following(following(Target("default", job_name="etl")))
    await cluster_reaches(cluster, watching_pods, within=10)
    create(cluster, "job", job("etl", "fails:1", backoff_limit=1))
    event = await run.finish(within=30)
    assert event.event is not None
    verdict = event.event.verdict
    assert (verdict.outcome, verdict.reason) == (Outcome.RETRY, Reason.CONTAINER_EXIT_CODE)
    assert "job default/etl failed (BackoffLimitExceeded: Job has reached the specified backoff limit)" in (
        verdict.message
    )
    assert "after 2 failed pod(s)" in verdict.message
    assert event.event.pod_name in {p["metadata"]["name"] for p in cluster.pods()}
    assert len(cluster.pods()) == 2, "backoffLimit 1: the first pod and one replacement"


def job_failed(cluster: FakeCluster) -> bool:
    conditions = [c for j in cluster.jobs() for c in (j.get("status") or {}).get("conditions") or []]
    return any(c.get("type") == "Failed" and c.get("status") == "True" for c in conditions)


@pytest.fixture
def paced(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCluster]:
    """Slow enough that a Job's replacement pod is created in a later second than the pod it
    replaces (a back-off of 10 simulated seconds is one real second): creationTimestamp, of
    one-second resolution, then tells which pod is the last."""
    with FakeCluster(SCENARIO, time_scale=0.1) as running:
        use_cluster(monkeypatch, running)
        yield running


def assert_the_cause_of_the_last_pod(event: TargetEvent, cluster: FakeCluster) -> None:
    assert event.event is not None
    verdict = event.event.verdict
    assert (verdict.outcome, verdict.reason) == (Outcome.RETRY, Reason.CONTAINER_EXIT_CODE), verdict.message
    pods = sorted(cluster.pods(), key=lambda p: p["metadata"]["creationTimestamp"])
    assert (
        len(pods) == 2 and pods[0]["metadata"]["creationTimestamp"] < pods[1]["metadata"]["creationTimestamp"]
    )
    last = pods[-1]["metadata"]["name"]
    assert (
        "job default/etl failed (BackoffLimitExceeded: Job has reached the specified backoff limit)"
        f" after 2 failed pod(s); its last pod {last}: container 'main' failed with exit code 3"
    ) in verdict.message
    assert event.event.pod_name == last  # the sensor task reads that pod's log for its report


async def test_a_job_failed_before_the_sensor_started_reports_its_last_pod_whichever_list_answers_first(
    paced: FakeCluster,
) -> None:
    """The pods' and the Jobs' feeds LIST at once; when the Jobs' answer comes first, the Job is
    already Failed while the pods' view is still empty: the cause is still the last pod's."""
    create(paced, "job", job("etl", "fails:1", backoff_limit=1))
    await cluster_reaches(paced, job_failed, within=30)
    paced.add_fault("list", "pods", "slow", delay_seconds=1.0)
    event = await Following(following(Target("default", job_name="etl"))).finish(within=30)
    assert_the_cause_of_the_last_pod(event, paced)


async def test_a_job_s_failure_seen_before_its_last_pod_reports_that_pod(paced: FakeCluster) -> None:
    """Two watches deliver independently: here the pods' watch lags behind the Jobs', so the Job's
    Failed condition arrives before its pods do. The cause is still the last pod's."""
    paced.add_fault("watch", "pods", "slow", delay_seconds=4.0)
    run = Following(following(Target("default", job_name="etl")))
    await cluster_reaches(paced, lambda c: any(w.resource == "jobs" for w in c.store.watchers), within=10)
    create(paced, "job", job("etl", "fails:1", backoff_limit=1))
    assert_the_cause_of_the_last_pod(await run.finish(within=30), paced)


async def test_a_selector_on_a_jobs_pods_is_judged_as_the_job(cluster: FakeCluster) -> None:
    run = Following(following(Target("default", label_selector="app=etl")))
    await cluster_reaches(cluster, watching_pods, within=10)
    create(cluster, "job", job("etl", "fails:1", backoff_limit=2))
    event = await run.finish(within=30)
    assert event.job == "etl" and event.event is not None
    assert "BackoffLimitExceeded" in event.event.verdict.message
    assert len(cluster.pods()) == 3


async def test_says_what_it_waits_for_once_a_minute_and_times_out(
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    manual_clock: ManualClock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(PodStateTrigger, "clock", manual_clock)
    start = manual_clock.now()
    target = Target("default", pod_name="never", deadline=start + 150)
    run = Following(following(target))

    def waiting() -> list[str]:  # the trigger's log lines (Airflow's structlog writes them to stdout)
        out = capsys.readouterr().out
        return [
            line.split("] ", 1)[1].split(" [airflow", 1)[0]
            for line in out.splitlines()
            if "Waiting for" in line
        ]

    await manual_clock.wait_for_sleeper(start + PROGRESS_EVERY)
    assert waiting() == ["Waiting for pod default/never (0 s so far, timeout in 150 s): no such pod yet"]
    manual_clock.advance(PROGRESS_EVERY)
    await manual_clock.wait_for_sleeper(start + 2 * PROGRESS_EVERY)
    assert waiting() == ["Waiting for pod default/never (60 s so far, timeout in 90 s): no such pod yet"]
    manual_clock.advance(PROGRESS_EVERY)
    await manual_clock.wait_for_sleeper(start + 150)
    manual_clock.advance(30)
    event = await run.finish(within=10)
    assert event.timed_out and event.event is None
    assert event.message == "timed out after 150 s waiting for pod default/never: no such pod yet"
    assert cluster.request_counts()[("get", "pods")] == 0


def test_the_target_is_serialized_only_when_given() -> None:
    target = Target("default", job_name="etl", deadline=1_800_000_000.0)
    classpath, kwargs = following(target).serialize()
    assert kwargs["target"] == {
        "namespace": "default",
        "pod_name": None,
        "label_selector": None,
        "job_name": "etl",
        "deadline": 1_800_000_000.0,
        "since": None,
    }
    assert (kwargs["pod_name"], kwargs["pod_uid"], kwargs["owned"]) == ("", "", False)
    assert PodStateTrigger(**kwargs).serialize() == (classpath, kwargs)


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({}, "exactly one of pod_name, label_selector and job_name"),
        ({"pod_name": "a", "job_name": "b"}, "exactly one of"),
    ],
)
def test_a_target_names_exactly_one_thing(fields: dict[str, str], complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        Target("default", **fields)


def test_a_target_is_followed_only_for_pods_the_task_does_not_own() -> None:
    with pytest.raises(ValueError, match="owned=False"):
        PodStateTrigger(
            kubernetes_conn_id=None,
            namespace="default",
            pod_name="",
            pod_uid="",
            identity=None,
            policy=None,
            owned=True,
            target=Target("default", pod_name="x").to_payload(),
        )


def test_a_job_pod_taken_away_by_the_cluster_is_left_to_the_job_even_before_it_has_failed() -> None:
    """An eviction's relaunch verdict comes while the pod is still Running (DisruptionTarget, then
    the graceful stop): the Job counts that pod as failed and replaces it, so it is not the end."""
    from airflow_k8s_retry.classification.model import Verdict
    from airflow_k8s_retry.triggers.target import _going

    running = {"metadata": {"name": "etl-a"}, "status": {"phase": "Running"}}
    relaunch = Verdict(outcome=Outcome.RELAUNCH, reason=Reason.NODE_DISRUPTION, message="m", rule="r")
    stuck = Verdict(outcome=Outcome.RETRY, reason=Reason.IMAGE_NOT_FOUND, message="m", rule="r")
    assert _going(running, relaunch)
    assert _going(None, stuck)  # gone
    assert _going({**running, "metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}, stuck)
    assert _going({"status": {"phase": "Failed"}}, stuck)
    assert not _going({"status": {"phase": "Pending"}}, stuck)  # never ran: the Job will not replace it
