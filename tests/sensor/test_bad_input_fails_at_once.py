"""A sensor that can never see what it waits for fails before it waits, with a one-line error and
without spending retries: an invalid selector, a namespace that does not exist, RBAC that forbids
reading. What a retry could fix (an API that is down for a moment) only costs a warning."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_k8s_retry.compat import AirflowFailException, AirflowSkipException, TaskDeferred
from airflow_k8s_retry.exceptions import PodSelectionError
from airflow_k8s_retry.sensors import PodCompletionSensor


def sensor(**kwargs: Any) -> PodCompletionSensor:
    kwargs.setdefault("namespace", "default")
    return PodCompletionSensor(task_id="wait", kubernetes_conn_id=None, retries=3, **kwargs)


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text
    return text


def test_the_error_is_permanent():
    assert issubclass(PodSelectionError, AirflowFailException)  # the task runner does not retry it


@pytest.mark.parametrize("selector", ["app in (a,b", "!app=b", "a b"])
def test_an_invalid_label_selector(make_cluster, context, selector):
    make_cluster()
    with pytest.raises(PodSelectionError) as raised:
        sensor(label_selector=selector).execute(context)
    text = one_line(raised.value)
    assert f"label_selector {selector!r} is not a valid label selector" in text
    assert "key=value" in text  # and how to write one


def test_a_namespace_that_does_not_exist(make_cluster, context):
    make_cluster()
    with pytest.raises(PodSelectionError) as raised:
        sensor(pod_name="report-1", namespace="reports").execute(context)
    assert "namespace 'reports' does not exist" in one_line(raised.value)


@pytest.mark.parametrize(
    ("kwargs", "resources", "complaint"),
    [
        ({"pod_name": "report-1"}, ["namespaces"], "may not list pods in namespace 'default'"),
        ({"label_selector": "app=x"}, ["namespaces"], "may not list pods"),
        ({"job_name": "etl"}, ["namespaces", "pods"], "may not read jobs (API group batch)"),
    ],
)
def test_rbac_that_forbids_reading(make_cluster, context, monkeypatch, kwargs, resources, complaint):
    cluster = make_cluster()
    monkeypatch.setenv("KUBECONFIG", str(cluster.restrict("narrow", resources=resources)))
    with pytest.raises(PodSelectionError) as raised:
        sensor(**kwargs).execute(context)
    text = one_line(raised.value)
    assert complaint in text and "grant get, list and watch" in text
    assert "is forbidden: User" in text  # the API's own words


def test_no_permission_on_namespaces_is_not_an_error(make_cluster, context, monkeypatch):
    """Reading a namespace is cluster-scoped: many sensors may not, and that says nothing about it."""
    cluster = make_cluster()
    monkeypatch.setenv("KUBECONFIG", str(cluster.restrict("pods-only", resources=["pods", "events"])))
    with pytest.raises(TaskDeferred):
        sensor(pod_name="report-1").execute(context)


def test_a_transient_api_error_only_warns_and_the_sensor_waits(make_cluster, context):
    cluster = make_cluster()
    cluster.add_fault("list", "pods", 500, times=1)
    with pytest.raises(TaskDeferred):
        sensor(label_selector="app=x").execute(context)


@pytest.mark.parametrize("flag", ["soft_fail", "never_fail"])
def test_soft_fail_and_never_fail_skip_it_as_airflow_skips_a_failing_poke(make_cluster, context, flag):
    make_cluster()
    with pytest.raises(AirflowSkipException, match="does not exist"):
        sensor(pod_name="report-1", namespace="reports", **{flag: True}).execute(context)
