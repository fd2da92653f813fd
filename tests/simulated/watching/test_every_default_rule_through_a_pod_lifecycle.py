"""Each default rule, reached by a real pod in the simulator, watched by a real trigger.

Grace timers run on a manual clock: the test waits until the trigger has stamped the signal's
first-seen time on the pod, then moves the clock by exactly the default grace. No real minutes pass,
and the default graces themselves are what is tested.

The cluster runs on a manual clock too (each pod moves only as far as its case advances it, once the
trigger waits on it through feeds that watch), and the hub's waits on a clock nobody advances: each
case has one outcome whatever the machine's load, and makes exactly the reads (and deletes) listed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes.config import new_client_from_config

from airflow_k8s_retry.classification import FailurePolicy, Outcome
from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.naming import TryIdentity
from airflow_k8s_retry.triggers.tracker import GRACE_NOTE_EVERY
from airflow_k8s_retry_testing import FakeCluster
from tests.support.feeds import requests, until_watching
from tests.support.lab import (
    Run,
    TriggerLog,
    cluster_reaches,
    create_pod,
    pod_body,
    stamped_signals,
    trigger_for,
    use_cluster,
)

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
    #: Simulated seconds the cluster runs once the trigger waits on the pending pod (for a
    #: disruption: until the pod runs), and after the disruption.
    runs: float = 2.0
    disrupted: float = 0.0
    #: The reads and deletes of the pod, in order: (verb, status).
    reads: tuple[tuple[str, int], ...] = (("get", 200),)


#: The last look before a failure that rests on a container's exit: the pod, then the container's log.
LOOK_AND_LOG = (("get", 200), ("get", 200))
#: Simulated seconds from a pod's creation until it runs.
STARTED = 0.3
#: A disruption of a running pod, run to its end (the container stops within 0.55 s).
DISRUPTED: dict[str, Any] = {"runs": STARTED, "disrupted": 1.0}
#: The trigger's poll interval (used only if RBAC forbade watching): three of them, its quiet limit,
#: end after every grace here, so when a grace ends the trigger judges what the feed gave it, however
#: late (on its clock) it took that in, and reads the pod only for its last look.
QUIET_POLL = 2000.0
#: How long a pending pod's trigger waits at most (the deadline of a pod that never starts).
PENDING_WAIT = 900.0
#: When a trigger that has seen its pod running looks again (on its own clock).
RECHECK = 600.0

CASES = {
    "succeeded": Case("ok:1", Outcome.SUCCEED, "pod.succeeded", reads=()),
    "invalid image name fails at once": Case("Bad_Name:1", Outcome.FAIL, "image.invalid_name"),
    "image not found waits 90 s": Case(
        "ghost:1", Outcome.RETRY, "image.not_found", grace=90, signal="image.not_found:base"
    ),
    "unauthorized pull waits 120 s": Case(
        "private:1", Outcome.RETRY, "image.unauthorized", grace=120, signal="image.unauthorized:base"
    ),
    "rate-limited pull waits 15 min": Case(
        "busy:1",
        Outcome.RETRY,
        "image.rate_limited",
        grace=900,
        signal="image.rate_limited:base",
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
    # The last look at a container that exited: the pod, then its last log lines.
    "non-zero exit retries": Case("fails:1", Outcome.RETRY, "container.exit_code", reads=LOOK_AND_LOG),
    "exit code in fail_on_exit_codes fails": Case(
        "fails:1", Outcome.FAIL, "container.exit_code", policy={"fail_on_exit_codes": [3]}, reads=LOOK_AND_LOG
    ),
    "exit code in skip_on_exit_codes skips": Case(
        "fails:1", Outcome.SKIP, "container.exit_code", policy={"skip_on_exit_codes": [3]}, reads=()
    ),
    "active deadline exceeded retries": Case(
        "long:1", Outcome.RETRY, "pod.deadline_exceeded", pod={"spec": {"activeDeadlineSeconds": 5}}, runs=6
    ),
    # Evicted: the pod stays, Failed; the last look reads it.
    "eviction relaunches": Case("long:1", Outcome.RELAUNCH, "node.disruption", **DISRUPTED, disrupt="evict"),
    # Preempted: its container stops and the pod is gone before the trigger looks at it again.
    "preemption relaunches": Case(
        "long:1", Outcome.RELAUNCH, "node.disruption", **DISRUPTED, disrupt="preempt", reads=(("get", 404),)
    ),
    # The simulator's lost node is followed by the taint manager's DisruptionTarget, as in a cluster
    # (40 s until the node is NotReady, 300 s more until the eviction, then the pod is removed).
    "lost node relaunches": Case(
        "long:1",
        Outcome.RELAUNCH,
        "node.disruption",
        runs=STARTED,
        disrupt="node_lost",
        disrupted=410,
        reads=(("get", 404),),
    ),
    # Removed at once (grace period 0): a graceful deletion's SIGTERM exit would be an exit code.
    "deleted by someone else retries": Case(
        "long:1",
        Outcome.RETRY,
        "pod.deleted_externally",
        runs=STARTED,
        disrupt="force_delete",
        reads=(("delete", 200), ("get", 404)),  # the DELETE is the test's
    ),
    "execution timeout retries": Case(
        "long:1",
        Outcome.RETRY,
        "execution.timeout",
        execution_timeout=3600,
        grace=3600,
        running=True,
        timer=600,
        runs=STARTED,
        # No last look: at the deadline the owned pod is deleted at once, after a read of it.
        reads=(("get", 200), ("delete", 200)),
    ),
}


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster(SCENARIO, clock="manual") as running:
        yield running


def force_delete(cluster: FakeCluster, name: str) -> None:
    from kubernetes import client as k

    api = new_client_from_config(config_file=str(cluster.kubeconfig), persist_config=False)
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


async def before_the_end(case: Case, start: float, clock: ManualClock, log: TriggerLog) -> None:
    """Move the trigger's clock to a second before the grace ends; return once the trigger took in
    what fell due meanwhile (a progress line a minute; a running pod's re-check) and waits again."""
    assert case.grace is not None
    lines = len(log.lines(": waiting since "))
    clock.advance(case.grace - 1)
    if case.timer is not None:
        # Woken for its re-check, it waits for the deadline now, the sooner of its two timers.
        await clock.wait_for_sleeper(start + case.grace)
    elif case.grace > GRACE_NOTE_EVERY:
        # Woken for its line (logged once the wait ended), it waits for the same end again.
        await log.until(": waiting since ", count=lines + 1)
        await clock.wait_for_sleeper(start + case.grace)
    else:
        assert all(at > clock.now() for at in clock.deadlines)  # nothing fell due: it still waits


@pytest.mark.parametrize("name", list(CASES))
async def test_default_rule(
    name: str,
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    trigger_clock: ManualClock,
    held_hub: ManualClock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    case = CASES[name]
    use_cluster(monkeypatch, cluster)
    identity = TryIdentity("rules", name.replace(" ", "_"), "run-1")
    pod = create_pod(cluster, body_for(identity, case))
    pod_name = pod["metadata"]["name"]
    deadline = None
    if case.execution_timeout is not None:
        deadline = trigger_clock.now() + case.execution_timeout
    policy = FailurePolicy.from_payload(case.policy).to_payload() if case.policy else None
    trigger = trigger_for(pod, identity, policy=policy, execution_deadline=deadline, poll_interval=QUIET_POLL)
    run = Run(trigger).start()
    # The feeds watch, the trigger waits on the pending pod; then the pod goes as far as the case runs.
    await until_watching(cluster)
    await trigger_clock.wait_for_sleeper(trigger_clock.now() + PENDING_WAIT)
    cluster.advance(case.runs)

    if case.disrupt or case.running:
        assert phase(cluster, pod_name) == "Running"
    if case.disrupt:
        # Once the trigger has seen it running (it sleeps until the running re-check), take it away.
        await trigger_clock.wait_for_sleeper(trigger_clock.now() + RECHECK)
        if case.disrupt == "force_delete":
            force_delete(cluster, pod_name)
        else:
            cluster.disrupt(pod_name, case.disrupt)
        cluster.advance(case.disrupted)
    start = trigger_clock.now()
    if case.signal is not None:
        signal = case.signal
        await cluster_reaches(cluster, lambda c: signal in stamped_signals(c, pod_name), 30)
        start = stamped_signals(cluster, pod_name)[signal]
    if case.grace is not None:
        # The trigger's timer is set for exactly the end of the grace, counted from first seen.
        timer = case.timer if case.timer is not None else case.grace
        await trigger_clock.wait_for_sleeper(start + timer)
        await before_the_end(case, start, trigger_clock, TriggerLog(capsys))
        assert run.events == []
        trigger_clock.advance(1)

    event = await run.finish(within=30)
    assert (event.verdict.outcome, event.verdict.reason.value) == (case.outcome, case.reason), event.verdict
    assert event.pod_uid == pod["metadata"]["uid"] and event.pod_name == pod_name
    done = [(verb, status) for verb, _, _, status in requests(cluster, verbs=("get", "delete"))]
    assert done == list(case.reads)
