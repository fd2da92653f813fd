"""Each default rule, reached by a real pod in the simulator, watched by a real trigger.

Grace timers run on a manual clock: the test waits until the trigger has stamped the signal's
first-seen time on the pod, then moves the clock by exactly the default grace. No real minutes pass,
and the default graces themselves are what is tested.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_k8s_retry.classification import FailurePolicy, Outcome
from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.config import ClusterConfig, sync_api_client
from airflow_k8s_retry.kube.naming import HISTORY_ANNOTATION, TryIdentity
from airflow_k8s_retry.triggers import PodStateTrigger
from airflow_k8s_retry_testing import FakeCluster
from tests.support.lab import Run, cluster_reaches, create_pod, pod_body, trigger_for, use_cluster

LONG = {"exit_code": 0, "duration_seconds": 100_000}
SCENARIO = {
    "images": {
        "ok:1": {"pull": "ok", "run": {"exit_code": 0, "duration_seconds": 1}},
        "long:1": {"pull": "ok", "run": LONG},
        "fails:1": {"pull": "ok", "run": {"exit_code": 3, "duration_seconds": 1}},
        "oom:1": {"pull": "ok", "run": {"exit_code": 137, "duration_seconds": 1, "oom": True}},
        "ghost:1": {"pull": "not_found"},
        "private:1": {"pull": "unauthorized"},
        "busy:1": {"pull": "rate_limited"},
        "Bad_Name:1": {"pull": "invalid_name"},
    },
}


@dataclass
class Case:
    image: str
    outcome: Outcome
    reason: str
    #: Move the manual clock by this much once the signal below has been stamped as first seen.
    grace: float | None = None
    signal: str | None = None
    policy: dict[str, Any] | None = None
    pod: dict[str, Any] = field(default_factory=dict)
    #: Disrupt the pod once it runs (``evict``, ``preempt``, ``node_lost``, ``delete``).
    disrupt: str | None = None
    #: Where the trigger's timer must be set, from the signal's first-seen time (default: the grace).
    timer: float | None = None
    #: Wait for the pod to run before moving the clock.
    running: bool = False
    execution_timeout: float | None = None


CASES = {
    "succeeded": Case("ok:1", Outcome.SUCCEED, "pod.succeeded"),
    "invalid image name fails at once": Case("Bad_Name:1", Outcome.FAIL, "image.invalid_name"),
    "image not found waits 90 s": Case(
        "ghost:1", Outcome.RETRY, "image.not_found", grace=90, signal="image.not_found:base"
    ),
    "unauthorized pull waits 120 s": Case(
        "private:1", Outcome.RETRY, "image.unauthorized", grace=120, signal="image.unauthorized:base"
    ),
    "rate-limited pull waits 15 min": Case(
        "busy:1", Outcome.RETRY, "image.rate_limited", grace=900, signal="image.rate_limited:base"
    ),
    "missing secret waits 60 s": Case(
        "long:1",
        Outcome.RETRY,
        "config.missing_secret",
        grace=60,
        signal="config.missing_secret:base",
        pod={"env_from_secret": "nowhere"},
    ),
    "failed mount waits 5 min": Case(
        "long:1",
        Outcome.RETRY,
        "volume.mount_failed",
        grace=300,
        signal="volume.mount_failed",
        pod={"spec": {"volumes": [{"name": "creds", "secret": {"secretName": "absent"}}]}},
    ),
    "unschedulable waits schedule_timeout": Case(
        "long:1",
        Outcome.RETRY,
        "schedule.timeout",
        grace=600,
        signal="schedule.unschedulable",
        pod={"resources": {"requests": {"cpu": "5000"}}},
    ),
    "oom killed retries": Case("oom:1", Outcome.RETRY, "container.oom"),
    "non-zero exit retries": Case("fails:1", Outcome.RETRY, "container.exit_code"),
    "exit code in fail_on_exit_codes fails": Case(
        "fails:1", Outcome.FAIL, "container.exit_code", policy={"fail_on_exit_codes": [3]}
    ),
    "exit code in skip_on_exit_codes skips": Case(
        "fails:1", Outcome.SKIP, "container.exit_code", policy={"skip_on_exit_codes": [3]}
    ),
    "active deadline exceeded retries": Case(
        "long:1", Outcome.RETRY, "pod.deadline_exceeded", pod={"spec": {"activeDeadlineSeconds": 5}}
    ),
    "eviction relaunches": Case("long:1", Outcome.RELAUNCH, "node.disruption", disrupt="evict"),
    "preemption relaunches": Case("long:1", Outcome.RELAUNCH, "node.disruption", disrupt="preempt"),
    # The simulator's lost node is followed by the taint manager's DisruptionTarget, as in a cluster.
    "lost node relaunches": Case("long:1", Outcome.RELAUNCH, "node.disruption", disrupt="node_lost"),
    # Removed at once (grace period 0): a graceful deletion's SIGTERM exit would be an exit code.
    "deleted by someone else retries": Case(
        "long:1", Outcome.RETRY, "pod.deleted_externally", disrupt="force_delete"
    ),
    "execution timeout retries": Case(
        "long:1",
        Outcome.RETRY,
        "execution.timeout",
        execution_timeout=3600,
        grace=3600,
        running=True,
        timer=600,
    ),
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster(SCENARIO, time_scale=0.01) as running:
        yield running


def stamped_signals(cluster: FakeCluster, name: str) -> dict[str, float]:
    pod = cluster.pod(name)
    raw = ((pod or {}).get("metadata", {}).get("annotations") or {}).get(HISTORY_ANNOTATION)
    return dict(json.loads(raw)["first_seen"]) if raw else {}


def force_delete(cluster: FakeCluster, name: str) -> None:
    from kubernetes import client as k

    api = sync_api_client(ClusterConfig(kube_config_path=str(cluster.kubeconfig)))
    try:
        k.CoreV1Api(api).delete_namespaced_pod(name, "default", grace_period_seconds=0)
    finally:
        api.close()


def phase(cluster: FakeCluster, name: str) -> str | None:
    return ((cluster.pod(name) or {}).get("status") or {}).get("phase")


def body_for(identity: TryIdentity, case: Case) -> dict[str, Any]:
    extras = dict(case.pod)
    resources = extras.pop("resources", None)
    body = pod_body(identity, case.image, **extras)
    if resources:
        body["spec"]["containers"][0]["resources"] = resources
    return body


@pytest.mark.parametrize("name", list(CASES))
async def test_default_rule(
    name: str, cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, manual_clock: ManualClock
) -> None:
    case = CASES[name]
    use_cluster(monkeypatch, cluster)
    monkeypatch.setattr(PodStateTrigger, "clock", manual_clock)
    identity = TryIdentity("rules", name.replace(" ", "_"), "run-1")
    pod = create_pod(cluster, body_for(identity, case))
    pod_name = pod["metadata"]["name"]
    deadline = None
    if case.execution_timeout is not None:
        deadline = manual_clock.now() + case.execution_timeout
    policy = FailurePolicy.from_payload(case.policy).to_payload() if case.policy else None
    run = Run(trigger_for(pod, identity, policy=policy, execution_deadline=deadline)).start()

    if case.disrupt or case.running:
        await cluster_reaches(cluster, lambda c: phase(c, pod_name) == "Running", 10)
    if case.disrupt:
        # Once the trigger has seen it running (it sleeps until the running re-check), take it away.
        await manual_clock.wait_for_sleeper(manual_clock.now() + 600)
        if case.disrupt == "force_delete":
            force_delete(cluster, pod_name)
        else:
            cluster.disrupt(pod_name, case.disrupt)
    start = manual_clock.now()
    if case.signal is not None:
        signal = case.signal
        await cluster_reaches(cluster, lambda c: signal in stamped_signals(c, pod_name), 10)
        start = stamped_signals(cluster, pod_name)[signal]
    if case.grace is not None:
        # The trigger's timer is set for exactly the end of the grace, counted from first seen.
        timer = case.timer if case.timer is not None else case.grace
        await manual_clock.wait_for_sleeper(start + timer)
        manual_clock.advance(case.grace - 1)
        assert run.events == []
        manual_clock.advance(1)

    event = await run.finish(within=10)
    assert (event.verdict.outcome, event.verdict.reason.value) == (case.outcome, case.reason), event.verdict
    assert event.pod_uid == pod["metadata"]["uid"] and event.pod_name == pod_name
