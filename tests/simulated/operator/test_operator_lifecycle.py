"""The operator's lifecycle against the simulator: create or adopt, defer, act on each verdict.

The trigger is not run here (that is the trigger's own suite and the end-to-end tests); the
verdicts it would emit are handed to ``execute_complete`` directly, and the effects are read back
from the simulator: which pods exist, what was stamped on them, which requests were made.
"""

from __future__ import annotations

import json
from typing import Any
from unittest.mock import call

import pytest

from airflow_k8s_retry.classification.model import Outcome, Reason
from airflow_k8s_retry.compat import (
    AirflowFailException,
    AirflowSkipException,
    TaskDeferralTimeout,
    TaskDeferred,
)
from airflow_k8s_retry.exceptions import PodFailure, PodFailurePermanent
from airflow_k8s_retry.kube.naming import VERDICT_ANNOTATION, TryIdentity, encode_stamp
from airflow_k8s_retry.operators import RetryingPodOperator
from tests.support.operator_try import client_for, defer, event_for, operator, requests, verdict

pytestmark = pytest.mark.fake_cluster(time_scale=0.05)


def identity_of(ti: Any, try_number: int | None = None) -> TryIdentity:
    return TryIdentity(
        ti.dag_id, ti.task_id, ti.run_id, ti.map_index, try_number or ti.try_number, ti_id=ti.id
    )


def test_execute_creates_one_pod_named_and_labelled_for_the_try(fake_cluster, context, ti):
    ti.try_number = 3
    trigger = defer(operator(), context)
    identity = identity_of(ti, 3)
    pod = client_for(fake_cluster).read("default", identity.pod_name())
    assert pod is not None
    labels = pod["metadata"]["labels"]
    assert "map_index" not in labels  # as KubernetesPodOperator: only mapped tasks carry it
    assert {k: labels[k] for k in ("dag_id", "task_id", "try_number")} == {
        "dag_id": "etl",
        "task_id": "load",
        "try_number": "3",
    }
    assert identity.owns(labels)
    assert trigger.pod_name == identity.pod_name() and trigger.pod_uid == pod["metadata"]["uid"]
    kwargs = trigger.serialize()[1]
    assert kwargs["owned"] is True and kwargs["relaunches"] == 0
    assert kwargs["identity"] == identity.to_payload()
    assert ti.xcom == {"pod_name": identity.pod_name(), "pod_namespace": "default"}


def test_a_second_execute_in_the_same_try_adopts_the_pod(fake_cluster, context):
    first = defer(operator(), context)
    second = defer(operator(), context)
    assert second.pod_uid == first.pod_uid
    assert len(requests(fake_cluster, "create", 201)) == 1
    assert len(requests(fake_cluster, "create", 409)) == 1
    assert len(fake_cluster.pods()) == 1


def test_a_pod_of_another_try_under_the_name_is_never_adopted(fake_cluster, context, ti):
    op = operator()
    identity = identity_of(ti)
    squatter = op.build_try_pod(context)
    squatter["metadata"]["labels"]["try_number"] = "7"
    client = client_for(fake_cluster)
    client.core.create_namespaced_pod("default", squatter)
    with pytest.raises(PodFailure, match="labels name another try"):
        op.execute(context)
    pod = client.read("default", identity.pod_name())
    assert pod is not None and pod["metadata"]["labels"]["try_number"] == "7"
    assert requests(fake_cluster, "delete") == []


def test_retry_verdict_stamps_reports_deletes_and_raises_pod_failure(fake_cluster, context, ti):
    op = operator()
    trigger = defer(op, context)
    v = verdict(Outcome.RETRY, Reason.IMAGE_NOT_FOUND, "image notavalidimage was not found")
    with pytest.raises(PodFailure) as failure:
        op.execute_complete(context, event=event_for(trigger, v))
    assert not isinstance(failure.value, AirflowFailException)
    assert failure.value.verdict.reason is Reason.IMAGE_NOT_FOUND
    assert "image.not_found" in str(failure.value)
    assert ti.xcom["verdict"] == {
        "outcome": "retry",
        "reason": "image.not_found",
        "message": "image notavalidimage was not found",
    }
    # The verdict is stamped (one PATCH), then the pod is deleted by UID.
    patches = requests(fake_cluster, "patch", 200)
    deletes = requests(fake_cluster, "delete", 200)
    assert len(patches) == 1 and len(deletes) == 1
    assert patches[0]["t"] <= deletes[0]["t"]
    assert fake_cluster.wait_for(lambda c: not fake_cluster.pods(), timeout=10)


def test_fail_verdict_raises_the_permanent_failure_and_keeps_a_stamped_pod_when_asked(fake_cluster, context):
    op = operator(on_finish_action="delete_succeeded_pod")
    trigger = defer(op, context)
    v = verdict(Outcome.FAIL, Reason.IMAGE_INVALID_NAME, "invalid reference format")
    with pytest.raises(PodFailurePermanent) as failure:
        op.execute_complete(context, event=event_for(trigger, v))
    assert isinstance(failure.value, AirflowFailException)
    pod = client_for(fake_cluster).read(trigger.namespace, trigger.pod_name)
    assert pod is not None, "delete_succeeded_pod keeps the pod"
    stamp = json.loads(pod["metadata"]["annotations"][VERDICT_ANNOTATION])
    assert (stamp["outcome"], stamp["reason"]) == ("fail", "image.invalid_name")
    assert requests(fake_cluster, "delete") == []


def test_a_stamped_pod_is_finished_business_when_adopted(fake_cluster, context):
    op = operator(on_finish_action="delete_succeeded_pod")
    trigger = defer(op, context)
    with pytest.raises(PodFailurePermanent):
        op.execute_complete(
            context, event=event_for(trigger, verdict(Outcome.FAIL, Reason.IMAGE_INVALID_NAME))
        )
    # The same try runs execute again (e.g. a worker restart): no new pod, no new watch.
    with pytest.raises(PodFailurePermanent, match=r"image\.invalid_name"):
        op.execute(context)
    assert len(requests(fake_cluster, "create", 201)) == 1


def test_success_deletes_the_pod_and_returns_nothing_without_xcom(fake_cluster, context):
    op = operator()
    trigger = defer(op, context)
    assert (
        op.execute_complete(context, event=event_for(trigger, verdict(Outcome.SUCCEED, Reason.SUCCEEDED)))
        is None
    )
    assert len(requests(fake_cluster, "delete", 200)) == 1
    assert fake_cluster.wait_for(lambda c: not fake_cluster.pods(), timeout=10)


def test_skip_verdict_skips_and_cleans_up(fake_cluster, context):
    op = operator(skip_on_exit_code=3)
    trigger = defer(op, context)
    assert trigger.serialize()[1]["policy"]["skip_on_exit_codes"] == [3]
    with pytest.raises(AirflowSkipException, match=r"container\.exit_code"):
        op.execute_complete(
            context, event=event_for(trigger, verdict(Outcome.SKIP, Reason.CONTAINER_EXIT_CODE))
        )
    assert len(requests(fake_cluster, "delete", 200)) == 1


def test_relaunch_replaces_the_pod_inside_the_same_try(fake_cluster, context, ti):
    op = operator()
    first = defer(op, context)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute_complete(
            context, event=event_for(first, verdict(Outcome.RELAUNCH, Reason.NODE_DISRUPTION))
        )
    second = deferred.value.trigger
    identity = identity_of(ti)
    assert second.pod_name == identity.pod_name(relaunch=1)
    assert second.relaunches == 1
    assert second.pod_uid != first.pod_uid
    deleted = requests(fake_cluster, "delete", 200)
    assert [r["name"] for r in deleted] == [first.pod_name]
    assert fake_cluster.wait_for(
        lambda c: [p["metadata"]["name"] for p in fake_cluster.pods()] == [second.pod_name], timeout=10
    )


def test_api_rejection_at_create_fails_at_once(fake_cluster, context, ti):
    from kubernetes.client import models as k8s

    # The provider renames the base container; an init container keeps its (invalid) name.
    op = operator(init_containers=[k8s.V1Container(name="Not_A_Valid_Name", image="x")])
    with pytest.raises(PodFailurePermanent, match=r"api\.rejected"):
        op.execute(context)
    assert ti.xcom["verdict"]["reason"] == "api.rejected"


def test_on_kill_deletes_the_pod(fake_cluster, context):
    op = operator()
    trigger = defer(op, context)
    op.on_kill()
    assert [r["name"] for r in requests(fake_cluster, "delete", 200)] == [trigger.pod_name]


def test_a_deferral_timeout_deletes_the_pods_of_the_try(fake_cluster, context):
    op = operator()
    trigger = defer(op, context)
    with pytest.raises(TaskDeferralTimeout):
        op.resume_execution("__fail__", {"error": "Trigger timeout"}, context)
    assert [r["name"] for r in requests(fake_cluster, "delete", 200)] == [trigger.pod_name]


def test_execution_timeout_is_the_trigger_deadline_and_the_defer_timeout_is_padded(fake_cluster, context, ti):
    from datetime import timedelta

    op = operator(execution_timeout=timedelta(minutes=10))
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    deadline = deferred.value.trigger.serialize()[1]["execution_deadline"]
    assert deadline == pytest.approx(ti.start_date.timestamp() + 600, abs=1)
    assert deferred.value.timeout > timedelta(minutes=10)


@pytest.mark.fake_cluster(
    {"time_scale": 0.05, "images": {"example.com/counter:1": {"run": {"xcom": {"rows": 42}}}}}
)
def test_success_reads_the_xcom_result_through_the_sidecar_then_deletes(fake_cluster, context, ti):
    op = operator(image="example.com/counter:1", do_xcom_push=True)
    trigger = defer(op, context)

    def base_done(c: Any) -> bool:
        pod = c.pod(trigger.pod_name) or {}
        states = {s["name"]: s["state"] for s in (pod.get("status") or {}).get("containerStatuses") or []}
        return "terminated" in states.get("base", {}) and "running" in states.get("airflow-xcom-sidecar", {})

    assert fake_cluster.wait_for(base_done, timeout=10)
    result = op.execute_complete(
        context, event=event_for(trigger, verdict(Outcome.SUCCEED, Reason.SUCCEEDED))
    )
    assert result == {"rows": 42}
    assert ti.xcom["pod_name"] == trigger.pod_name
    assert [r["name"] for r in requests(fake_cluster, "delete", 200)] == [trigger.pod_name]


def test_a_relaunch_keeps_the_execution_deadline_of_the_try(fake_cluster, context):
    from datetime import timedelta

    op = operator(execution_timeout=timedelta(minutes=10))
    with pytest.raises(TaskDeferred) as first:
        op.execute(context)
    deadline = first.value.kwargs["execution_deadline"]
    assert deadline == first.value.trigger.serialize()[1]["execution_deadline"]
    event = event_for(first.value.trigger, verdict(Outcome.RELAUNCH, Reason.NODE_DISRUPTION))
    with pytest.raises(TaskDeferred) as second:
        op.execute_complete(context, event=event, execution_deadline=deadline - 120)
    assert second.value.trigger.serialize()[1]["execution_deadline"] == deadline - 120
    assert second.value.kwargs == {"execution_deadline": deadline - 120}


def test_a_server_error_at_create_is_retried_in_process(fake_cluster, context, retry_sleep):
    fake_cluster.add_fault(verb="create", resource="pods", status=500, times=1)
    trigger = defer(operator(), context)
    assert [r["status"] for r in requests(fake_cluster, "create")] == [500, 201]
    assert retry_sleep.call_args_list == [call(1.0)]
    assert [p["metadata"]["name"] for p in fake_cluster.pods()] == [trigger.pod_name]


def test_a_server_error_that_persists_at_create_costs_a_try_not_the_task(fake_cluster, context, ti):
    fake_cluster.add_fault(verb="create", resource="pods", status=500, times=None)
    with pytest.raises(PodFailure) as failure:
        operator().execute(context)
    assert not isinstance(failure.value, AirflowFailException)
    assert ti.xcom["verdict"]["outcome"] == "retry"
    assert ti.xcom["verdict"]["reason"] == "api.unavailable"
    assert len(requests(fake_cluster, "create", 500)) == 3
    assert fake_cluster.all_pods() == []


@pytest.mark.fake_cluster({"images": {"busybox:1.36": {"run": {"duration_seconds": 10_000}}}})
def test_a_new_try_deletes_unfinished_pods_its_earlier_tries_left_running(fake_cluster, context, ti):
    # Try 1 deferred, then the task was marked failed before any triggerer ran its trigger: nothing
    # called on_kill and its pod runs on. A stamped pod was kept on purpose; another task's pod is
    # none of this task's business.
    client = client_for(fake_cluster)
    abandoned = defer(operator(), context)
    kept = operator().build_try_pod(context, 1)
    kept["metadata"]["annotations"][VERDICT_ANNOTATION] = encode_stamp(
        verdict(Outcome.RETRY, Reason.CONTAINER_EXIT_CODE), kept=True
    )
    client.core.create_namespaced_pod("default", kept)
    neighbour = RetryingPodOperator(task_id="other", image="busybox:1.36", kubernetes_conn_id=None)
    ti.task_id = "other"
    other = neighbour.build_try_pod(context)
    ti.task_id = "load"
    client.core.create_namespaced_pod("default", other)

    ti.try_number = 2
    second = defer(operator(), context)

    deletes = requests(fake_cluster, "delete", 200)
    assert [(d["name"], d["uid"]) for d in deletes] == [(abandoned.pod_name, abandoned.pod_uid)]
    assert fake_cluster.wait_for(lambda c: c.pod(abandoned.pod_name) is None, timeout=10)
    live = {p["metadata"]["name"] for p in fake_cluster.pods()}
    assert live == {second.pod_name, kept["metadata"]["name"], other["metadata"]["name"]}


def test_a_first_try_looks_for_no_earlier_pods(fake_cluster, context):
    defer(operator(), context)
    assert [r for r in fake_cluster.audit_records() if r.get("verb") == "list"] == []
