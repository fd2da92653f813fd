"""``@task.retrying_kubernetes`` runs a Python function in a pod with RetryingPodOperator's lifecycle."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_k8s_retry.classification.model import Outcome, Reason
from airflow_k8s_retry.compat import TaskDeferred
from airflow_k8s_retry.operators import RetryingPodOperator
from tests.support.operator_try import event_for, verdict

pytestmark = pytest.mark.fake_cluster(time_scale=0.05)


def make_task(**kwargs: Any) -> Any:
    from airflow.sdk import DAG, task

    with DAG("taskflow", schedule=None):

        @task.retrying_kubernetes(
            image="python:3.11-slim", namespace="default", kubernetes_conn_id=None, **kwargs
        )
        def double(rows: int) -> int:
            return rows * 2

        return double(21).operator


def script_env(pod: dict[str, Any]) -> set[str]:
    return {e["name"] for e in pod["spec"]["containers"][0].get("env") or []}


def test_the_decorator_is_registered_and_builds_a_retrying_pod_operator():
    op = make_task()
    assert isinstance(op, RetryingPodOperator)
    assert op.custom_operator_name == "@task.retrying_kubernetes"


def test_the_function_runs_in_the_try_pod_and_a_relaunch_gets_the_script_again(fake_cluster, context, ti):
    with pytest.raises(TaskDeferred) as first:
        make_task().execute(context)
    pod = fake_cluster.pod(first.value.trigger.pod_name)
    assert {"__PYTHON_SCRIPT", "__PYTHON_INPUT"} <= script_env(pod)
    assert pod["spec"]["containers"][0]["command"][0] == "bash"
    # The relaunch is built in a fresh worker process: a new operator instance, nothing prepared.
    with pytest.raises(TaskDeferred) as second:
        make_task().execute_complete(
            context, event=event_for(first.value.trigger, verdict(Outcome.RELAUNCH, Reason.NODE_DISRUPTION))
        )
    relaunched = fake_cluster.pod(second.value.trigger.pod_name)
    assert second.value.trigger.relaunches == 1
    assert {"__PYTHON_SCRIPT", "__PYTHON_INPUT"} <= script_env(relaunched)
    assert relaunched["spec"]["containers"][0]["command"] == pod["spec"]["containers"][0]["command"]


def test_success_returns_through_execute_complete(fake_cluster, context):
    op = make_task()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    fresh = make_task()
    assert (
        fresh.execute_complete(
            context, event=event_for(deferred.value.trigger, verdict(Outcome.SUCCEED, Reason.SUCCEEDED))
        )
        is None
    )
