"""A sensor that can never see what it waits for fails before it waits, with a one-line error and
without spending retries: an invalid selector, a namespace that does not exist, RBAC that forbids
reading. What a retry could fix (an API that is down for a moment) only costs a warning."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_k8s_retry.compat import AirflowFailException, AirflowSkipException, TaskDeferred
from airflow_k8s_retry.exceptions import PodSelectionError
from airflow_k8s_retry.sensors import PodCompletionSensor
from tests.support.following import external_pod

pytestmark = pytest.mark.fake_cluster(time_scale=0.05)


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
def test_an_invalid_label_selector(fake_cluster, context, selector):
    with pytest.raises(PodSelectionError) as raised:
        sensor(label_selector=selector).execute(context)
    text = one_line(raised.value)
    assert f"label_selector {selector!r} is not a valid label selector" in text
    assert "key=value" in text  # and how to write one


#: What the shipped Role grants a sensor, in its one namespace: nothing at the cluster scope.
IN_DEFAULT = {
    "verbs": ["get", "list", "watch"],
    "resources": ["pods", "events", "jobs"],
    "namespaces": ["default"],
}


def test_a_namespace_that_does_not_exist(fake_cluster, context, monkeypatch):
    # No grant can be bound in a namespace that does not exist: listing its pods is refused, and
    # credentials that may read namespaces learn why.
    may_read_namespaces = {"verbs": ["get"], "resources": ["namespaces"], "namespaces": None}
    monkeypatch.setenv("KUBECONFIG", str(fake_cluster.grant("ns-reader", [IN_DEFAULT, may_read_namespaces])))
    with pytest.raises(PodSelectionError) as raised:
        sensor(pod_name="report-1", namespace="reports").execute(context)
    assert "namespace 'reports' does not exist" in one_line(raised.value)


def test_a_namespace_that_does_not_exist_under_the_namespaced_role(fake_cluster, context, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(fake_cluster.grant("role", [IN_DEFAULT])))
    with pytest.raises(PodSelectionError) as raised:
        sensor(pod_name="report-1", namespace="reports").execute(context)
    text = one_line(raised.value)
    assert "may not list pods in namespace 'reports'" in text
    assert "check that the namespace exists" in text and "grant get, list and watch" in text


def test_under_the_namespaced_role_the_check_reads_no_namespace_once_pods_are_listed(
    fake_cluster, context, monkeypatch
):
    # Reading a namespace is cluster-scoped: the Role does not grant it, so a read at every start
    # would be a refusal in the audit log at every start. Once listing finds pods, the namespace
    # plainly exists and is not read.
    external_pod(fake_cluster, "report-1", {"app": "x"})
    before = len(fake_cluster.audit_records())
    monkeypatch.setenv("KUBECONFIG", str(fake_cluster.grant("role", [IN_DEFAULT])))
    for target in ({"pod_name": "report-1"}, {"label_selector": "app=x"}, {"job_name": "etl"}):
        with pytest.raises(TaskDeferred):
            sensor(**target).execute(context)
    records = fake_cluster.audit_records()[before:]
    assert [r for r in records if r.get("resource") == "namespaces"] == []
    assert [r for r in records if r.get("status") == 403] == []


def test_a_sensor_that_starts_before_its_pod_waits_whatever_the_namespace_read_answers(
    fake_cluster, context, monkeypatch
):
    # No pod yet: the namespace is read to tell an empty namespace from a missing one, and the
    # Role's refusal of that read is no error.
    monkeypatch.setenv("KUBECONFIG", str(fake_cluster.grant("role", [IN_DEFAULT])))
    with pytest.raises(TaskDeferred):
        sensor(pod_name="report-1").execute(context)
    reads = [
        (r.get("verb"), r.get("status"))
        for r in fake_cluster.audit_records()
        if r.get("resource") == "namespaces"
    ]
    assert reads == [("get", 403)]


@pytest.mark.parametrize(
    ("kwargs", "resources", "complaint"),
    [
        ({"pod_name": "report-1"}, ["namespaces"], "may not list pods in namespace 'default'"),
        ({"label_selector": "app=x"}, ["namespaces"], "may not list pods"),
        ({"job_name": "etl"}, ["namespaces", "pods"], "may not read jobs (API group batch)"),
    ],
)
def test_rbac_that_forbids_reading(fake_cluster, context, monkeypatch, kwargs, resources, complaint):
    monkeypatch.setenv("KUBECONFIG", str(fake_cluster.restrict("narrow", resources=resources)))
    with pytest.raises(PodSelectionError) as raised:
        sensor(**kwargs).execute(context)
    text = one_line(raised.value)
    assert complaint in text and "grant get, list and watch" in text
    assert "is forbidden: User" in text  # the API's own words


def test_no_permission_on_namespaces_is_not_an_error(fake_cluster, context, monkeypatch):
    """Reading a namespace is cluster-scoped: many sensors may not, and that says nothing about it."""
    monkeypatch.setenv("KUBECONFIG", str(fake_cluster.restrict("pods-only", resources=["pods", "events"])))
    with pytest.raises(TaskDeferred):
        sensor(pod_name="report-1").execute(context)


def test_a_transient_api_error_only_warns_and_the_sensor_waits(fake_cluster, context):
    fake_cluster.add_fault("list", "pods", 500, times=1)
    with pytest.raises(TaskDeferred):
        sensor(label_selector="app=x").execute(context)


@pytest.mark.parametrize("flag", ["soft_fail", "never_fail"])
def test_soft_fail_and_never_fail_skip_it_as_airflow_skips_a_failing_poke(fake_cluster, context, flag):
    with pytest.raises(AirflowSkipException, match="does not exist"):
        sensor(pod_name="report-1", namespace="reports", **{flag: True}).execute(context)
