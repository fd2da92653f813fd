"""PodCompletionSensor as a task: it defers at once to a trigger following its target, turns the
trigger's event into success, a failure, a timeout or a skip as Airflow's sensors do, and deletes
nothing it did not create unless asked.

The simulators run on a manual clock: a pod stands still until a test runs it to the state the
event it hands the sensor speaks of (a success for a pod that has succeeded)."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any
from unittest.mock import MagicMock, call

import pytest
from pytest_mock import MockerFixture

from airflow_k8s_retry.classification.model import Outcome, Reason, Verdict
from airflow_k8s_retry.compat import (
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
    TaskDeferralTimeout,
    TaskDeferred,
)
from airflow_k8s_retry.exceptions import PodFailure, PodFailurePermanent
from airflow_k8s_retry.kube.pods import OUTAGE_BACKOFF
from airflow_k8s_retry.sensors import PodCompletionSensor
from airflow_k8s_retry.sensors import pod as sensor_module
from airflow_k8s_retry.triggers.pod import PodEvent
from airflow_k8s_retry.triggers.target import Target, TargetEvent
from tests.simulated.sensor.stepping import phase, run_until
from tests.support.following import external_pod

SCENARIO = {"images": {"app:broken": {"run": {"exit_code": 3, "log": "boom at line 7"}}}}

pytestmark = pytest.mark.fake_cluster(clock="manual")


def succeeded(cluster: Any, name: str = "report-1") -> None:
    """Run the cluster until the pod has succeeded (busybox's scripted run: a second, exit 0)."""
    run_until(cluster, lambda c: phase(c, name) == "Succeeded")


def sensor(**kwargs: Any) -> PodCompletionSensor:
    if not {"label_selector", "job_name"} & set(kwargs):
        kwargs.setdefault("pod_name", "report-1")
    kwargs.setdefault("namespace", "default")
    return PodCompletionSensor(task_id="wait", kubernetes_conn_id=None, **kwargs)


def deletes(cluster: Any) -> list[str]:
    return [
        r["name"]
        for r in cluster.audit_records()
        if r.get("verb") == "delete" and r.get("resource") == "pods"
    ]


def verdict(outcome: Outcome, reason: Reason, message: str = "m") -> Verdict:
    return Verdict(outcome=outcome, reason=reason, message=message, rule=reason.value)


def target_event(pod: dict[str, Any] | None, outcome: Outcome, reason: Reason, **kw: Any) -> dict[str, Any]:
    meta = (pod or {}).get("metadata") or {}
    judged = PodEvent("default", meta.get("name", ""), meta.get("uid", ""), verdict(outcome, reason), 0)
    target = Target("default", pod_name=meta.get("name") or "report-1")
    return TargetEvent(target, "m", event=judged, **kw).to_payload()


def timed_out() -> dict[str, Any]:
    target = Target("default", pod_name="report-1")
    return TargetEvent(
        target, "timed out after 60 s waiting for pod default/report-1", timed_out=True
    ).to_payload()


def test_defers_at_once_even_before_the_pod_exists(fake_cluster, context, monkeypatch):
    now = 1_800_000_000.0  # the sensor's wall clock, held still
    monkeypatch.setattr(sensor_module, "time", SimpleNamespace(time=lambda: now))
    with pytest.raises(TaskDeferred) as deferred:
        sensor(pod_name="report-1", timeout=120).execute(context)
    classpath, kwargs = deferred.value.trigger.serialize()
    assert classpath == "airflow_k8s_retry.triggers.PodTargetTrigger"
    assert kwargs["target"]["pod_name"] == "report-1"
    assert kwargs["poll_interval"] == 10.0
    assert (kwargs["target"]["since"], kwargs["target"]["deadline"]) == (now, now + 120)
    assert deferred.value.method_name == "execute_complete"
    # The defer timeout is a backstop past the sensor's own deadline (Airflow turns it into
    # AirflowSensorTimeout too, see below).
    assert deferred.value.timeout == timedelta(seconds=120 + 300)


def test_the_templated_target_is_what_is_followed(fake_cluster, context):
    with pytest.raises(TaskDeferred) as deferred:
        sensor(job_name="etl-2024", namespace=None).execute(context)
    assert deferred.value.trigger.serialize()[1]["target"]["job_name"] == "etl-2024"
    assert deferred.value.trigger.serialize()[1]["target"]["namespace"] == "default"


def test_a_timeout_is_a_sensor_timeout_and_costs_no_retry(context):
    with pytest.raises(AirflowSensorTimeout, match="waiting for pod default/report-1"):
        sensor(retries=3).resume_execution("execute_complete", {"event": timed_out()}, context)
    # The task runner fails an AirflowSensorTimeout without a retry: shown under Airflow in
    # test_sensor_under_airflow.py (retries=2, one try).


def test_the_defer_timeout_backstop_is_a_sensor_timeout_too(context):
    trigger_timeout = {"error": "Trigger timeout"}  # what the scheduler sends past the defer timeout
    with pytest.raises(AirflowSensorTimeout) as raised:
        sensor().resume_execution("__fail__", trigger_timeout, context)
    assert isinstance(raised.value.__cause__, TaskDeferralTimeout)


@pytest.mark.parametrize("flag", ["soft_fail", "never_fail"])
@pytest.mark.parametrize(
    "event",
    [
        pytest.param(timed_out(), id="timeout"),
        pytest.param(target_event(None, Outcome.RETRY, Reason.CONTAINER_OOM), id="retryable-failure"),
        pytest.param(target_event(None, Outcome.FAIL, Reason.IMAGE_INVALID_NAME), id="permanent-failure"),
    ],
)
def test_soft_fail_and_never_fail_turn_a_timeout_or_a_failure_into_a_skip(context, flag, event):
    with pytest.raises(AirflowSkipException, match=f"{flag} is set"):
        sensor(**{flag: True}).resume_execution("execute_complete", {"event": event}, context)


def test_failures_raise_the_operator_exceptions_and_delete_nothing(fake_cluster, context, ti):
    pod = external_pod(fake_cluster, "report-1", {"app": "report"})
    with pytest.raises(PodFailure):
        sensor().execute_complete(context, target_event(pod, Outcome.RETRY, Reason.CONTAINER_OOM))
    assert ti.xcom["verdict"]["reason"] == "container.oom"
    assert ti.xcom["pod_name"] == "report-1"
    with pytest.raises(PodFailurePermanent):
        sensor().execute_complete(context, target_event(pod, Outcome.FAIL, Reason.IMAGE_INVALID_NAME))
    with pytest.raises(PodFailure):
        sensor().execute_complete(context, target_event(pod, Outcome.RELAUNCH, Reason.NODE_LOST))
    sensor().execute_complete(context, target_event(pod, Outcome.SUCCEED, Reason.SUCCEEDED))
    assert deletes(fake_cluster) == []
    assert [p["metadata"]["name"] for p in fake_cluster.pods()] == ["report-1"]


@pytest.mark.fake_cluster(SCENARIO, clock="manual")
def test_the_failure_report_carries_the_pods_last_log_lines(fake_cluster, context, capsys):
    pod = external_pod(fake_cluster, "report-1", {"app": "report"}, image="app:broken")
    run_until(fake_cluster, lambda c: phase(c, "report-1") == "Failed")
    with pytest.raises(PodFailure):
        sensor().execute_complete(context, target_event(pod, Outcome.RETRY, Reason.CONTAINER_EXIT_CODE))
    assert "boom at line 7" in capsys.readouterr().out


def test_deletes_when_asked(fake_cluster, context):
    pod = external_pod(fake_cluster, "report-1", {"app": "report"})
    succeeded(fake_cluster)
    s = sensor(delete_pod_on_finish=True)
    s.execute_complete(context, target_event(pod, Outcome.SUCCEED, Reason.SUCCEEDED))
    assert deletes(fake_cluster) == ["report-1"]
    assert fake_cluster.pods() == []  # a finished pod goes at once


def test_a_refused_delete_does_not_turn_a_success_into_a_failure(
    fake_cluster, context, monkeypatch, retry_sleep
):
    pod = external_pod(fake_cluster, "report-1", {"app": "report"})
    succeeded(fake_cluster)
    read_only = fake_cluster.restrict("read-only", verbs=["get", "list", "watch"])
    monkeypatch.setenv("KUBECONFIG", str(read_only))
    sensor(delete_pod_on_finish=True).execute_complete(
        context, target_event(pod, Outcome.SUCCEED, Reason.SUCCEEDED)
    )
    refused = [
        r
        for r in fake_cluster.audit_records()
        if r.get("verb") in ("patch", "delete") and r.get("status") == 403
    ]
    assert refused, "the stamp and the delete were refused"
    assert [p["metadata"]["name"] for p in fake_cluster.pods()] == ["report-1"]
    # A 403 may be an authorizer failing for a moment: the delete took its whole back-off, the
    # stamp (not transient) was tried once.
    assert retry_sleep.call_args_list == [call(s) for s in OUTAGE_BACKOFF]
    assert [r["verb"] for r in refused] == ["patch"] + ["delete"] * (len(OUTAGE_BACKOFF) + 1)


def test_a_job_verdict_without_a_pod_still_fails_the_task(context):
    event = target_event(None, Outcome.RETRY, Reason.POD_FAILED, job="etl")
    with pytest.raises(PodFailure, match=r"namespace default: pod\.failed"):
        sensor(job_name="etl").execute_complete(context, event)
    assert not issubclass(PodFailure, AirflowFailException)


@pytest.fixture
def retry_sleep(mocker: MockerFixture) -> MagicMock:
    """The sensor's back-off seam, ``PodCompletionSensor.retry_sleep``: a stub that does not sleep."""
    stub: MagicMock = mocker.patch.object(PodCompletionSensor, "retry_sleep")
    return stub


def test_a_delete_that_fails_once_is_retried_and_the_success_stands(fake_cluster, context, retry_sleep):
    pod = external_pod(fake_cluster, "report-1", {"app": "report"})
    succeeded(fake_cluster)
    fake_cluster.add_fault("delete", "pods", 500, times=1)
    sensor(delete_pod_on_finish=True).execute_complete(
        context, target_event(pod, Outcome.SUCCEED, Reason.SUCCEEDED)
    )
    statuses = [
        r["status"]
        for r in fake_cluster.audit_records()
        if r.get("verb") == "delete" and r.get("kind") == "request"
    ]
    assert statuses == [500, 200]
    assert retry_sleep.call_args_list == [call(0.5)]
    assert fake_cluster.pods() == [], "the pod was deleted on the second attempt"


def test_api_errors_in_the_cleanup_never_fail_a_succeeded_task(fake_cluster, context, retry_sleep):
    pod = external_pod(fake_cluster, "report-1", {"app": "report"})
    succeeded(fake_cluster)
    for verb in ("delete", "patch"):
        fake_cluster.add_fault(verb, "pods", 500, times=None)
    sensor(delete_pod_on_finish=True).execute_complete(
        context, target_event(pod, Outcome.SUCCEED, Reason.SUCCEEDED)
    )
    failed = [r["verb"] for r in fake_cluster.audit_records() if r.get("status") == 500]
    # Four attempts at the stamp, then seven at the delete (about 30 s: a finished pod's delete
    # outlasts an API server's restart); none of it reaches the task's outcome.
    assert failed == ["patch"] * 4 + ["delete"] * (len(OUTAGE_BACKOFF) + 1)
    assert [p["metadata"]["name"] for p in fake_cluster.pods()] == ["report-1"]
