"""The sensor follows the queued-pod rule too: a pod it waits for that scheduling gates hold is queued,
not unschedulable, past ``schedule_timeout``; the task log says which gate holds it, every few
minutes (the simulator serves no Kueue, so nothing of a Workload); and once the gate is lifted the
pod runs and the sensor succeeds.

The cluster, the hub and the trigger run on manual clocks (``test_following_a_target.py`` says how):
the test alone moves time, so each step has one outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from airflow_k8s_retry.classification import FailurePolicy, Outcome
from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.watch_settings import HubSettings
from airflow_k8s_retry.triggers.queues import QUEUE_FIRST_NOTE, QUEUE_NOTE_EVERY
from airflow_k8s_retry.triggers.target import PodTargetTrigger, Target
from airflow_k8s_retry_testing import FakeCluster
from tests.simulated.sensor.stepping import SCENARIO, TaskLog, phase, requests, run_until
from tests.support.feeds import hold_hub
from tests.support.following import Following, create, pod
from tests.support.lab import CONN_ID, use_cluster

KUEUE = "kueue.x-k8s.io/admission"

pytestmark = pytest.mark.usefixtures("trigger_clock")


@pytest.fixture
def hub_clock(hub_settings: Callable[..., HubSettings]) -> ManualClock:
    return hold_hub(hub_settings, backoff_base=0.05, backoff_cap=0.2)


@pytest.fixture
def cluster(
    hub_clock: ManualClock, make_fake_cluster: Callable[..., FakeCluster], monkeypatch: pytest.MonkeyPatch
) -> FakeCluster:
    running = make_fake_cluster(SCENARIO, clock="manual")
    use_cluster(monkeypatch, running)
    return running


@pytest.fixture
def log(capsys: pytest.CaptureFixture[str]) -> TaskLog:
    return TaskLog(capsys)


def gated(name: str) -> dict[str, Any]:
    body = pod(name, "quick:1")
    body["spec"]["schedulingGates"] = [{"name": KUEUE}]
    return body


def judge_notes(log: TaskLog) -> list[str]:
    return [message for module, message in log.read() if module == "pod.py" and "schedule.gated" in message]


async def test_a_gated_pod_the_sensor_waits_for_is_queued_until_admitted(
    cluster: FakeCluster, trigger_clock: ManualClock, log: TaskLog
) -> None:
    create(cluster, "pod", gated("report-1"))
    trigger = PodTargetTrigger(
        kubernetes_conn_id=CONN_ID,
        target=Target("default", pod_name="report-1").to_payload(),
        policy=FailurePolicy(schedule_timeout=5).to_payload(),
    )
    run = Following(trigger)
    start = trigger_clock.now()
    # Past schedule_timeout and the first gate note: still following, and the note names the gate.
    await trigger_clock.wait_for_sleeper(start + QUEUE_FIRST_NOTE)
    trigger_clock.advance(QUEUE_FIRST_NOTE)
    await trigger_clock.wait_for_sleeper(start + QUEUE_FIRST_NOTE + QUEUE_NOTE_EVERY)
    (note,) = judge_notes(log)
    assert f"Pod report-1: schedule.gated: held by scheduling gate {KUEUE} since" in note
    assert "Kueue Workload" not in note
    assert run.events == []
    # The pod was read once (its history stamped), nothing else: no last look, no failure.
    assert requests(cluster)["reads"] == ["patch report-1 200"]
    trigger_clock.advance(QUEUE_NOTE_EVERY)
    await trigger_clock.wait_for_sleeper(start + QUEUE_FIRST_NOTE + 2 * QUEUE_NOTE_EVERY)
    assert len(judge_notes(log)) == 2
    # Admitted: the gate is lifted, the pod runs and succeeds.
    cluster.disrupt("report-1", "admit")
    run_until(cluster, lambda c: phase(c, "report-1") == "Succeeded")
    event = await run.finish(within=20)
    assert event.event is not None and event.event.verdict.outcome is Outcome.SUCCEED
