"""One pod per try and nothing left behind, when the API or Airflow fails at the worst moment.

Each test drives the operator in-process against the simulator, injects one fault (a failed
DELETE, a lost create response, a failing XCom push, a stale pod of another incarnation of the
run) and reads back from the simulator which pods are left.
"""

from __future__ import annotations

import json
import time
from typing import Any
from unittest.mock import call

import pytest
import urllib3
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from airflow_k8s_retry.classification.model import Outcome, Reason
from airflow_k8s_retry.compat import AirflowFailException
from airflow_k8s_retry.exceptions import PodFailure, PodFailurePermanent
from airflow_k8s_retry.kube.naming import read_stamp
from airflow_k8s_retry.kube.pods import OUTAGE_BACKOFF, PodClient
from airflow_k8s_retry.operators import RetryingPodOperator
from tests.support.operator_try import RUNNING, client_for, defer, event_for, operator, requests, verdict

pytestmark = pytest.mark.fake_cluster(RUNNING)


def live(cluster: Any) -> list[str]:
    return sorted(p["metadata"]["name"] for p in cluster.pods() if not p["metadata"].get("deletionTimestamp"))


def running(cluster: Any, name: str) -> bool:
    return ((cluster.pod(name) or {}).get("status") or {}).get("phase") == "Running"


# -- 1. a delete that fails ---------------------------------------------------------------------


def test_a_delete_that_fails_once_is_retried(fake_cluster, context, retry_sleep):
    op = operator()
    trigger = defer(op, context)
    assert fake_cluster.wait_for(lambda c: running(c, trigger.pod_name), timeout=20)
    fake_cluster.add_fault(verb="delete", resource="pods", status=500, times=1)
    with pytest.raises(PodFailure):
        op.execute_complete(
            context, event=event_for(trigger, verdict(Outcome.RETRY, Reason.EXECUTION_TIMEOUT))
        )
    assert [r["status"] for r in requests(fake_cluster, "delete")] == [500, 200]
    assert retry_sleep.call_args_list == [call(0.5)]
    assert fake_cluster.wait_for(lambda c: not live(c), timeout=10)


def test_a_pod_whose_deletes_all_failed_is_deleted_by_the_next_try(fake_cluster, context, ti, retry_sleep):
    op = operator()
    trigger = defer(op, context)
    assert fake_cluster.wait_for(lambda c: running(c, trigger.pod_name), timeout=20)
    fake_cluster.add_fault(verb="delete", resource="pods", status=500, times=len(OUTAGE_BACKOFF) + 1)
    with pytest.raises(PodFailure):
        op.execute_complete(
            context, event=event_for(trigger, verdict(Outcome.RETRY, Reason.EXECUTION_TIMEOUT))
        )
    # Still there, stamped with its verdict, and marked as not kept on purpose.
    stamp = read_stamp(fake_cluster.pod(trigger.pod_name))
    assert stamp is not None and stamp.kept is False
    assert live(fake_cluster) == [trigger.pod_name]
    assert retry_sleep.call_args_list == [call(s) for s in OUTAGE_BACKOFF]  # about 30 s, then it gives up

    ti.try_number = 2
    second = defer(operator(), context)
    assert fake_cluster.wait_for(lambda c: live(c) == [second.pod_name], timeout=10)


def test_a_failing_xcom_push_does_not_skip_the_delete(fake_cluster, context, ti, monkeypatch):
    op = operator()
    trigger = defer(op, context)

    def broken(key: str, value: Any) -> None:
        raise RuntimeError("execution API answered 503")

    monkeypatch.setattr(ti, "xcom_push", broken)
    with pytest.raises(PodFailure):
        op.execute_complete(
            context, event=event_for(trigger, verdict(Outcome.RETRY, Reason.CONFIG_MISSING_SECRET))
        )
    assert [r["status"] for r in requests(fake_cluster, "delete")] == [200]
    assert fake_cluster.wait_for(lambda c: not live(c), timeout=10)


def test_a_pod_kept_on_purpose_survives_the_next_tries_sweep(fake_cluster, context, ti):
    op = operator(on_finish_action="delete_succeeded_pod")
    trigger = defer(op, context)
    with pytest.raises(PodFailure):
        op.execute_complete(
            context, event=event_for(trigger, verdict(Outcome.RETRY, Reason.CONTAINER_EXIT_CODE))
        )
    stamp = read_stamp(fake_cluster.pod(trigger.pod_name))
    assert stamp is not None and stamp.kept is True
    ti.try_number = 2
    second = defer(operator(on_finish_action="delete_succeeded_pod"), context)
    assert live(fake_cluster) == sorted([trigger.pod_name, second.pod_name])
    assert requests(fake_cluster, "delete") == []


def test_a_malformed_stamp_reads_as_none():
    assert read_stamp({"metadata": {"annotations": {"airflow-k8s-retry.io/verdict": "{not json"}}}) is None
    assert (
        read_stamp({"metadata": {"annotations": {"airflow-k8s-retry.io/verdict": '{"outcome": 1}'}}}) is None
    )
    assert read_stamp(None) is None


# -- 6. an error between create and defer -------------------------------------------------------


def test_a_lost_create_response_adopts_the_pod_it_created(fake_cluster, context, monkeypatch):
    real = CoreV1Api.create_namespaced_pod
    calls: list[int] = []

    def create_then_lose_the_answer(self: CoreV1Api, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        result = real(self, *args, **kwargs)
        if len(calls) == 1:
            raise urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104, "reset"))
        return result

    monkeypatch.setattr(CoreV1Api, "create_namespaced_pod", create_then_lose_the_answer)
    trigger = defer(operator(), context)
    assert live(fake_cluster) == [trigger.pod_name]
    assert trigger.pod_uid == fake_cluster.pod(trigger.pod_name)["metadata"]["uid"]


def test_an_error_after_the_create_deletes_the_pod(fake_cluster, context, ti, monkeypatch):

    def broken(key: str, value: Any) -> None:
        raise RuntimeError("execution API answered 503")

    monkeypatch.setattr(ti, "xcom_push", broken)
    with pytest.raises(RuntimeError, match="503"):
        operator().execute(context)
    assert len(requests(fake_cluster, "create", 201)) == 1
    assert [r["status"] for r in requests(fake_cluster, "delete")] == [200]
    assert fake_cluster.wait_for(lambda c: not live(c), timeout=10)


def test_poll_interval_zero_is_refused_before_any_pod_exists():
    with pytest.raises(ValueError, match="poll_interval must be a positive number of seconds, got 0"):
        RetryingPodOperator(task_id="load", image="busybox:1.36", poll_interval=0)


# -- 7. API errors at create --------------------------------------------------------------------


def status_error(code: int, reason: str, message: str) -> ApiException:
    exc = ApiException(status=code, reason=reason)
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code}
    exc.body = json.dumps(body | {"message": message})
    return exc


QUOTA = (
    'pods "etl-load-38688838-t1" is forbidden: exceeded quota: compute, requested: limits.cpu=2, '
    "used: limits.cpu=10, limited: limits.cpu=10"
)


@pytest.mark.fake_cluster(time_scale=0.05)
def test_a_full_quota_at_create_costs_a_try_not_the_task(fake_cluster, context, ti, monkeypatch):

    def quota(self: CoreV1Api, *args: Any, **kwargs: Any) -> Any:
        raise status_error(403, "Forbidden", QUOTA)

    monkeypatch.setattr(CoreV1Api, "create_namespaced_pod", quota)
    with pytest.raises(PodFailure) as failure:
        operator(retries=5).execute(context)
    assert not isinstance(failure.value, AirflowFailException)
    assert failure.value.verdict.reason is Reason.API_QUOTA_EXCEEDED
    assert ti.xcom["verdict"]["reason"] == "api.quota_exceeded"
    assert fake_cluster.all_pods() == []


@pytest.mark.fake_cluster(time_scale=0.05)
def test_rbac_forbidding_create_fails_at_once(fake_cluster, context, ti, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(fake_cluster.restrict("no-create", verbs={"get", "list", "watch"})))
    with pytest.raises(PodFailurePermanent, match=r"api\.rejected: .*HTTP 403: .*cannot create"):
        operator().execute(context)
    assert fake_cluster.all_pods() == []


# -- 11. adoption bound to the task instance try and the deployment -----------------------------


@pytest.mark.fake_cluster(time_scale=0.05)
def test_a_recreated_dag_run_never_adopts_the_old_runs_kept_pod(fake_cluster, context, ti):
    op = operator(on_finish_action="keep_pod")
    trigger = defer(op, context)
    op.execute_complete(context, event=event_for(trigger, verdict(Outcome.SUCCEED, Reason.SUCCEEDED)))
    # The run is deleted and triggered again with the same run_id: try 1 again, a new task instance.
    ti.id = "0199a1b2-0000-7000-8000-0000000000ff"
    fresh = defer(operator(on_finish_action="keep_pod", image="busybox:1.37"), context)
    assert fresh.pod_name != trigger.pod_name
    assert len(requests(fake_cluster, "create", 201)) == 2
    assert fake_cluster.pod(fresh.pod_name)["spec"]["containers"][0]["image"] == "busybox:1.37"


@pytest.mark.fake_cluster(time_scale=0.05)
def test_a_pod_of_another_task_instance_under_the_name_is_not_adopted(fake_cluster, context, ti):
    squatter = operator().build_try_pod(context)
    squatter["metadata"]["annotations"]["airflow-k8s-retry.io/ti-id"] = "someone-else"
    client_for(fake_cluster).core.create_namespaced_pod("default", squatter)
    with pytest.raises(PodFailure, match="belongs to another task instance"):
        operator().execute(context)
    assert requests(fake_cluster, "delete") == []


def test_the_sweep_leaves_another_deployments_pods_alone(fake_cluster, context, ti, monkeypatch):
    monkeypatch.setenv("AIRFLOW__KUBERNETES_RETRY__DEPLOYMENT_ID", "blue")
    blue = defer(operator(), context)
    assert fake_cluster.pod(blue.pod_name)["metadata"]["labels"]["airflow-k8s-retry.io/deployment"] == "blue"
    monkeypatch.setenv("AIRFLOW__KUBERNETES_RETRY__DEPLOYMENT_ID", "green")
    ti.try_number = 2
    green = defer(operator(), context)
    assert live(fake_cluster) == sorted([blue.pod_name, green.pod_name])
    assert requests(fake_cluster, "delete") == []


# -- 10. the worker's client never blocks on a stalled request ----------------------------------


@pytest.mark.fake_cluster(time_scale=0.05)
def test_a_stalled_delete_times_out_and_is_retried(fake_cluster, context, monkeypatch):
    op = operator()
    trigger = defer(op, context)
    monkeypatch.setattr(PodClient, "request_timeout", (2.0, 2.0))
    fake_cluster.add_fault(verb="delete", resource="pods", status="slow", delay_seconds=30)
    began = time.monotonic()
    with pytest.raises(PodFailure):
        op.execute_complete(
            context, event=event_for(trigger, verdict(Outcome.RETRY, Reason.CONTAINER_EXIT_CODE))
        )
    assert time.monotonic() - began < 20
    assert fake_cluster.wait_for(lambda c: not live(c), timeout=10)


@pytest.mark.fake_cluster(time_scale=0.05)
def test_the_worker_client_has_tcp_keepalive(fake_cluster):
    op = operator()
    import socket

    options = op.hook.api_client.configuration.socket_options or []
    assert (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1) in options


# -- 14. local configuration errors fail at once ------------------------------------------------


@pytest.mark.parametrize(
    "case", ["missing template", "invalid template", "missing kubeconfig", "missing connection"]
)
@pytest.mark.fake_cluster(time_scale=0.05)
def test_local_configuration_errors_fail_at_once_in_one_line(
    case, fake_cluster, context, tmp_path, monkeypatch
):
    kwargs: dict[str, Any] = {}
    if case == "missing template":
        kwargs["pod_template_file"] = str(tmp_path / "nope.yaml")
    elif case == "invalid template":
        (tmp_path / "bad.yaml").write_text("spec: [unclosed\n")
        kwargs["pod_template_file"] = str(tmp_path / "bad.yaml")
    elif case == "missing kubeconfig":
        monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    else:
        kwargs["kubernetes_conn_id"] = "nope"
    op = RetryingPodOperator(
        task_id="load", image="busybox:1.36", namespace="default", **({"kubernetes_conn_id": None} | kwargs)
    )
    with pytest.raises(PodFailurePermanent) as failure:
        op.execute(context)
    assert "\n" not in str(failure.value)
    expected = {
        "missing template": "nope.yaml",
        "invalid template": "configuration error (pod_template_file /",
        "missing kubeconfig": "no-kubeconfig",
        "missing connection": "'nope'",
    }[case]
    assert expected in str(failure.value)
    if case == "invalid template":  # the YAML error names the file it is in
        assert f"pod_template_file {tmp_path / 'bad.yaml'}" in str(failure.value)
    assert fake_cluster.all_pods() == []


# -- 18. get_logs=False keeps container output out of the task log ------------------------------


@pytest.mark.fake_cluster(
    {"time_scale": 0.05, "images": {"etl:3": {"run": {"exit_code": 3, "log": "private-output-line"}}}}
)
def test_get_logs_false_puts_no_log_tail_in_the_failure_report(fake_cluster, context, caplog, capsys):
    import logging

    caplog.set_level(logging.INFO)
    op = operator(image="etl:3", get_logs=False)
    trigger = defer(op, context)
    assert fake_cluster.wait_for(
        lambda c: ((c.pod(trigger.pod_name) or {}).get("status") or {}).get("phase") == "Failed", timeout=20
    )
    with pytest.raises(PodFailure):
        op.execute_complete(
            context, event=event_for(trigger, verdict(Outcome.RETRY, Reason.CONTAINER_EXIT_CODE))
        )
    written = caplog.text + capsys.readouterr().out
    assert "container.exit_code" in written and "events:" in written
    assert "private-output-line" not in written


def test_a_delete_refused_with_403_for_a_moment_is_retried(fake_cluster, context):
    # An authorizer that fails for a moment denies (a webhook's timeout): tried again, not left.
    op = operator()
    trigger = defer(op, context)
    assert fake_cluster.wait_for(lambda c: running(c, trigger.pod_name), timeout=20)
    fake_cluster.add_fault(verb="delete", resource="pods", status=403, times=2)
    with pytest.raises(PodFailure):
        op.execute_complete(
            context, event=event_for(trigger, verdict(Outcome.RETRY, Reason.EXECUTION_TIMEOUT))
        )
    assert [r["status"] for r in requests(fake_cluster, "delete")] == [403, 403, 200]
    assert fake_cluster.wait_for(lambda c: not live(c), timeout=10)


def test_a_pod_kept_on_purpose_is_stamped_through_a_failing_patch(fake_cluster, context):
    op = operator(on_finish_action="keep_pod")
    trigger = defer(op, context)
    assert fake_cluster.wait_for(lambda c: running(c, trigger.pod_name), timeout=20)
    fake_cluster.add_fault(verb="patch", resource="pods", status=500, times=2)
    with pytest.raises(PodFailure):
        op.execute_complete(context, event=event_for(trigger, verdict(Outcome.RETRY, Reason.CONTAINER_OOM)))
    stamp = read_stamp(fake_cluster.pod(trigger.pod_name))
    assert stamp is not None and stamp.kept
    assert live(fake_cluster) == [trigger.pod_name]


def test_a_pod_whose_stamp_cannot_be_written_is_not_kept_unmarked(fake_cluster, context):
    op = operator(on_finish_action="keep_pod")
    trigger = defer(op, context)
    assert fake_cluster.wait_for(lambda c: running(c, trigger.pod_name), timeout=20)
    fake_cluster.add_fault(verb="patch", resource="pods", status=500, times=10)
    with pytest.raises(PodFailure):
        op.execute_complete(context, event=event_for(trigger, verdict(Outcome.RETRY, Reason.CONTAINER_OOM)))
    assert fake_cluster.wait_for(lambda c: not live(c), timeout=10)


def test_a_timed_out_try_does_not_keep_its_running_pod(fake_cluster, context):
    # As KPO: a timed-out task is killed and on_kill_action decides; a kept pod would run on.
    op = operator(on_finish_action="keep_pod")
    trigger = defer(op, context)
    assert fake_cluster.wait_for(lambda c: running(c, trigger.pod_name), timeout=20)
    with pytest.raises(PodFailure):
        op.execute_complete(
            context, event=event_for(trigger, verdict(Outcome.RETRY, Reason.EXECUTION_TIMEOUT))
        )
    assert fake_cluster.wait_for(lambda c: not live(c), timeout=10)


# -- the next try's sweep: the earlier try's pod is out of the way before this try's pod starts --

SLOW_TO_STOP = {
    "time_scale": 0.05,
    # A container that takes 600 s to exit after SIGTERM, in a pod with a 900 s grace period.
    "images": {"busybox:1.36": {"run": {"duration_seconds": 100_000, "stop_seconds": 600}}},
}


def lifetime(cluster: Any, uid: str) -> tuple[float, float]:
    """When a container of the pod first ran, and when it stopped or the pod went (audit log)."""
    changes = [
        (r["t"], str(r["change"]))
        for r in cluster.audit_records()
        if r.get("kind") == "lifecycle" and r.get("uid") == uid
    ]
    start = min(t for t, change in changes if change.startswith("running:"))
    ends = [t for t, change in changes if change.startswith("terminated:") or change == "deleted"]
    return start, min(ends, default=float("inf"))


@pytest.mark.fake_cluster(SLOW_TO_STOP)
def test_the_next_try_starts_only_once_the_earlier_pod_still_stopping_is_gone(fake_cluster, context, ti):
    op = operator(termination_grace_period=900)
    first = defer(op, context)
    assert fake_cluster.wait_for(lambda c: running(c, first.pod_name), timeout=20)
    # Try 1 ends with a graceful delete: its container keeps running while it stops.
    with pytest.raises(PodFailure):
        op.execute_complete(
            context, event=event_for(first, verdict(Outcome.RETRY, Reason.CONTAINER_EXIT_CODE))
        )
    assert fake_cluster.pod(first.pod_name)["metadata"].get("deletionTimestamp")

    ti.try_number = 2
    second = defer(operator(termination_grace_period=900), context)
    assert fake_cluster.wait_for(lambda c: running(c, second.pod_name), timeout=20)
    _, first_ended = lifetime(fake_cluster, first.pod_uid)
    second_started, _ = lifetime(fake_cluster, second.pod_uid)
    assert first_ended < second_started, "try 2's pod ran beside try 1's"
    assert fake_cluster.pod(first.pod_name) is None


@pytest.mark.fake_cluster(SLOW_TO_STOP)
def test_a_kept_pod_someone_deletes_is_gone_before_the_next_tries_pod_starts(fake_cluster, context, ti):
    # A failed try's pod kept on purpose (on_finish_action), deleted by someone else as the try
    # failed (pod.deleted_externally), its container still stopping: it is on its way out, and no
    # longer kept. Seed 843 of the chaos suite ran try 3's pod beside it until it stopped.
    op = operator(on_finish_action="delete_succeeded_pod", termination_grace_period=900)
    first = defer(op, context)
    assert fake_cluster.wait_for(lambda c: running(c, first.pod_name), timeout=20)
    client_for(fake_cluster).core.delete_namespaced_pod(first.pod_name, "default")
    with pytest.raises(PodFailure):
        op.execute_complete(
            context, event=event_for(first, verdict(Outcome.RETRY, Reason.DELETED_EXTERNALLY))
        )
    stamp = read_stamp(fake_cluster.pod(first.pod_name))
    assert stamp is not None and stamp.kept is True and running(fake_cluster, first.pod_name)

    ti.try_number = 2
    second = defer(operator(on_finish_action="delete_succeeded_pod", termination_grace_period=900), context)
    assert fake_cluster.wait_for(lambda c: running(c, second.pod_name), timeout=20)
    _, first_ended = lifetime(fake_cluster, first.pod_uid)
    second_started, _ = lifetime(fake_cluster, second.pod_uid)
    assert first_ended < second_started, "try 2's pod ran beside try 1's"
    assert fake_cluster.pod(first.pod_name) is None


def test_the_sweep_retries_a_list_refused_for_a_moment(fake_cluster, context, ti):
    first = defer(operator(), context)  # its worker dies: nothing deletes the pod
    assert fake_cluster.wait_for(lambda c: running(c, first.pod_name), timeout=20)
    fake_cluster.add_fault(verb="list", resource="pods", status=403, times=2)
    ti.try_number = 2
    second = defer(operator(), context)
    assert live(fake_cluster) == [second.pod_name]


def test_the_next_try_is_not_started_beside_an_earlier_pod_it_cannot_delete(
    fake_cluster, context, ti, retry_sleep
):
    from airflow_k8s_retry.kills.sweep import EarlierTryNotGone
    from airflow_k8s_retry.kube.pods import OUTAGE_BACKOFF as SWEEP_BACKOFF

    first = defer(operator(), context)  # its worker dies: nothing deletes the pod
    assert fake_cluster.wait_for(lambda c: running(c, first.pod_name), timeout=20)
    fake_cluster.add_fault(verb="delete", resource="pods", status=500, times=100)
    ti.try_number = 2
    with pytest.raises(EarlierTryNotGone, match=rf"still there: {first.pod_name}.*not started beside"):
        operator().execute(context)
    assert len(requests(fake_cluster, "create")) == 1  # try 1's only
    assert retry_sleep.call_args_list == [call(s) for s in SWEEP_BACKOFF]
    assert live(fake_cluster) == [first.pod_name]
