"""A worker that dies between the pod create and the deferral on the last try leaves a live pod
that no later try sweeps. Airflow fails such a try when its heartbeat stops and has the DAG
processor run the task's ``on_failure_callback`` with the try's context; the operator's own
callback in that list deletes the pod. The DAG processor's side is reproduced here as Airflow 3.3
does it (``dag_processing.processor._execute_task_callbacks``): the task from a fresh parse, each
callback called with the context, an exception logged and swallowed.
"""

from __future__ import annotations

import json
from typing import Any
from unittest.mock import call
from urllib.parse import parse_qs, urlsplit

import pytest

from airflow_k8s_retry.classification.model import Outcome, Reason
from airflow_k8s_retry.exceptions import PodFailure
from airflow_k8s_retry.kube.naming import read_stamp
from airflow_k8s_retry.operators import RetryingPodOperator
from tests.support.operator_try import RUNNING, defer, event_for, operator, verdict

pytestmark = pytest.mark.fake_cluster(RUNNING)


def live(cluster: Any) -> list[str]:
    return sorted(p["metadata"]["name"] for p in cluster.pods() if not p["metadata"].get("deletionTimestamp"))


def dag_processor_runs_failure_callbacks(task: RetryingPodOperator, context: dict[str, Any]) -> list[str]:
    """What the DAG processor does with a TaskCallbackRequest for a failed task instance."""
    errors = []
    for callback in task.on_failure_callback:
        try:
            callback({**context, "task": task})
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
    return errors


def test_the_failure_callback_deletes_the_pod_a_dead_worker_left_on_the_last_try(fake_cluster, context):
    trigger = defer(operator(retries=0), context)  # the pod exists; then the worker is killed
    assert live(fake_cluster) == [trigger.pod_name]

    parsed = operator(retries=0)  # the DAG processor parses the DAG file again
    assert dag_processor_runs_failure_callbacks(parsed, context) == []
    assert fake_cluster.wait_for(lambda c: not live(c), timeout=10)


def test_the_authors_own_failure_callbacks_still_run_first(fake_cluster, context):
    seen: list[str] = []
    defer(operator(retries=0), context)
    parsed = operator(retries=0, on_failure_callback=lambda ctx: seen.append(ctx["ti"].task_id))
    assert dag_processor_runs_failure_callbacks(parsed, context) == []
    assert seen == ["load"]
    assert len(parsed.on_failure_callback) == 2


def test_a_pod_kept_on_purpose_survives_the_failure_callback(fake_cluster, context):
    op = operator(retries=0, on_finish_action="keep_pod")
    trigger = defer(op, context)
    with pytest.raises(PodFailure):
        op.execute_complete(context, event=event_for(trigger, verdict(Outcome.RETRY, Reason.CONTAINER_OOM)))
    stamp = read_stamp(fake_cluster.pod(trigger.pod_name))
    assert stamp is not None and stamp.kept

    assert (
        dag_processor_runs_failure_callbacks(operator(retries=0, on_finish_action="keep_pod"), context) == []
    )
    assert live(fake_cluster) == [trigger.pod_name]


def test_the_callback_of_one_try_leaves_the_next_tries_pod_alone(fake_cluster, context, ti):
    first = defer(operator(retries=1), context)
    ti.try_number, ti.id = 2, "0199a1b2-0000-7000-8000-000000000002"
    second = defer(operator(retries=1), context)  # its sweep deleted try 1's pod
    assert fake_cluster.wait_for(lambda c: live(c) == [second.pod_name], timeout=10)
    ti.try_number, ti.id = 1, "0199a1b2-0000-7000-8000-000000000001"
    assert first.pod_name != second.pod_name

    assert dag_processor_runs_failure_callbacks(operator(retries=1), context) == []
    assert live(fake_cluster) == [second.pod_name]


def test_keep_pod_on_kill_keeps_a_dead_workers_pod(fake_cluster, context):
    trigger = defer(operator(retries=0, on_kill_action="keep_pod"), context)
    assert dag_processor_runs_failure_callbacks(operator(retries=0, on_kill_action="keep_pod"), context) == []
    assert live(fake_cluster) == [trigger.pod_name]


def as_run(context: dict[str, Any], task: Any) -> dict[str, Any]:
    """The keys of a real template context that expanding a mapped task reads."""
    from types import SimpleNamespace

    return {**context, "task": task, "dag": task.dag, "dag_run": SimpleNamespace(conf={})}


def mapped_load(dag_id: str = "etl") -> Any:
    """A mapped task as a DAG file declares it: ``.partial(...).expand(...)`` (a fresh parse each call)."""
    from airflow.sdk import DAG

    with DAG(dag_id, schedule=None):
        return RetryingPodOperator.partial(
            task_id="load", kubernetes_conn_id=None, namespace="default", image="busybox:1.36", retries=0
        ).expand(arguments=[["part-0"], ["part-1"]])


def test_a_mapped_tasks_dead_worker_pod_is_deleted_too(fake_cluster, context, ti):
    ti.map_index = 1
    worker = as_run(context, mapped_load())
    worker["task"].render_template_fields(worker)  # the task runner expands the try's task
    expanded = worker["task"]
    assert isinstance(expanded, RetryingPodOperator) and expanded.arguments == ["part-1"]
    trigger = defer(expanded, worker)
    assert live(fake_cluster) == [trigger.pod_name]

    parsed = mapped_load()  # the DAG processor's fresh parse: a MappedOperator, not the operator
    assert not isinstance(parsed, RetryingPodOperator)
    since = len(fake_cluster.audit_records())
    errors = []
    for callback in parsed.on_failure_callback:
        try:
            callback(as_run(context, parsed))
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
    assert errors == []
    assert fake_cluster.wait_for(lambda c: not live(c), timeout=10)
    # It asked the API server for map index 1's pods only, not for every map index's of the try.
    listed = [
        parse_qs(urlsplit(r["request_uri"]).query)["labelSelector"][0].split(",")
        for r in fake_cluster.audit_records()[since:]
        if r.get("kind") == "request" and r["verb"] == "list" and r["resource"] == "pods"
    ]
    assert listed and all("map_index=1" in selector and "try_number=1" in selector for selector in listed)


@pytest.mark.parametrize("missing", ["pod_template_file", "config_file", "a connection's kube_config_path"])
def test_a_configuration_error_gives_no_second_traceback_from_the_callback(
    fake_cluster, context, tmp_path, caplog, capsys, monkeypatch, missing
):
    absent = str(tmp_path / "missing.yaml")
    if missing.startswith("a connection"):
        broken = {"conn_type": "kubernetes", "extra": {"kube_config_path": absent}}
        monkeypatch.setenv("AIRFLOW_CONN_K8S_BROKEN", json.dumps(broken))
        task = operator(retries=0)
        task.kubernetes_conn_id = "k8s_broken"
    else:
        task = operator(retries=0, **{missing: absent})
    assert dag_processor_runs_failure_callbacks(task, context) == []
    # It says so in one line, and nothing more.
    written = caplog.text + capsys.readouterr().out
    said = [line for line in written.splitlines() if "Could not look for pods left by try 1" in line]
    assert len(said) == 1 and "configuration error" in said[0], written[-2000:]
    assert "Traceback" not in written


def test_a_create_still_on_its_way_when_the_callback_first_looks_is_deleted_too(
    fake_cluster, context, retry_sleep
):
    # An executor that reports a dead worker at once (CeleryExecutor) has the callback run while
    # the create the worker sent just before it died is still on its way to the API server.
    from airflow_k8s_retry.kills.callback import IN_FLIGHT_SETTLE

    landed: list[str] = []

    def sleep(seconds: float) -> None:
        if seconds == IN_FLIGHT_SETTLE and not landed:
            landed.append(defer(operator(retries=0), context).pod_name)  # the dead worker's create lands

    retry_sleep.side_effect = sleep
    assert dag_processor_runs_failure_callbacks(operator(retries=0), context) == []
    assert len(landed) == 1
    assert fake_cluster.wait_for(lambda c: not live(c), timeout=10)


def test_in_the_worker_that_ran_the_try_the_callback_does_not_wait(fake_cluster, context, retry_sleep):
    from airflow_k8s_retry.kills.callback import IN_FLIGHT_SETTLE

    op = operator(retries=0)
    trigger = defer(op, context)
    with pytest.raises(PodFailure):
        op.execute_complete(context, event=event_for(trigger, verdict(Outcome.RETRY, Reason.CONTAINER_OOM)))
    assert dag_processor_runs_failure_callbacks(op, context) == []
    assert call(IN_FLIGHT_SETTLE) not in retry_sleep.call_args_list


def test_in_the_worker_whose_try_deleted_its_pod_the_callback_makes_no_request(fake_cluster, context):
    # The try swept the earlier tries' pods before it created its own and deleted that one after
    # its verdict: the last try's failure leaves nothing to look for.
    op = operator(retries=0)
    trigger = defer(op, context)
    with pytest.raises(PodFailure):
        op.execute_complete(context, event=event_for(trigger, verdict(Outcome.RETRY, Reason.CONTAINER_OOM)))
    assert fake_cluster.wait_for(lambda c: not live(c), timeout=10)
    since = len(fake_cluster.audit_records())
    assert dag_processor_runs_failure_callbacks(op, context) == []
    assert [r for r in fake_cluster.audit_records()[since:] if r.get("kind") == "request"] == []


def test_in_the_worker_whose_delete_failed_the_callback_deletes_the_pod(fake_cluster, context):
    from airflow_k8s_retry.kube.pods import OUTAGE_BACKOFF

    op = operator(retries=0)
    trigger = defer(op, context)
    fake_cluster.add_fault(verb="delete", resource="pods", status=500, times=len(OUTAGE_BACKOFF) + 1)
    with pytest.raises(PodFailure):
        op.execute_complete(context, event=event_for(trigger, verdict(Outcome.RETRY, Reason.CONTAINER_OOM)))
    assert live(fake_cluster) == [trigger.pod_name]  # every delete of the worker failed
    assert dag_processor_runs_failure_callbacks(op, context) == []
    assert fake_cluster.wait_for(lambda c: not live(c), timeout=10)
