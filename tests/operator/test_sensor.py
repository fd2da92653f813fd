"""PodCompletionSensor: finds exactly one pod, watches it without owning it, deletes only when asked."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_k8s_retry.classification.model import Outcome, Reason, Verdict
from airflow_k8s_retry.compat import TaskDeferred
from airflow_k8s_retry.exceptions import PodFailure, PodFailurePermanent
from airflow_k8s_retry.kube.config import ClusterConfig, sync_api_client
from airflow_k8s_retry.kube.pods import PodClient
from airflow_k8s_retry.sensors import PodCompletionSensor, PodSelectionError
from airflow_k8s_retry.triggers import PodEvent


def sensor(**kwargs: Any) -> PodCompletionSensor:
    return PodCompletionSensor(task_id="wait", kubernetes_conn_id=None, namespace="default", **kwargs)


def external_pod(cluster: Any, name: str, labels: dict[str, str]) -> dict[str, Any]:
    client = PodClient(sync_api_client(ClusterConfig(kube_config_path=str(cluster.kubeconfig))))
    body = {
        "metadata": {"name": name, "labels": labels},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1.36"}]},
    }
    client.core.create_namespaced_pod("default", body)
    pod = client.read("default", name)
    assert pod is not None
    return pod


def deletes(cluster: Any) -> list[str]:
    return [
        r["name"]
        for r in cluster.audit_records()
        if r.get("verb") == "delete" and r.get("resource") == "pods"
    ]


@pytest.mark.parametrize("kwargs", [{}, {"pod_name": "a", "label_selector": "app=a"}])
def test_exactly_one_of_name_and_selector(kwargs):
    with pytest.raises(ValueError, match="exactly one of pod_name and label_selector"):
        sensor(**kwargs)


def test_by_name_defers_without_owning_the_pod(make_cluster, context, ti):
    cluster = make_cluster()
    pod = external_pod(cluster, "report-1", {"app": "report"})
    with pytest.raises(TaskDeferred) as deferred:
        sensor(pod_name="report-1").execute(context)
    kwargs = deferred.value.trigger.serialize()[1]
    assert kwargs["owned"] is False and kwargs["identity"] is None
    assert (kwargs["pod_name"], kwargs["pod_uid"]) == ("report-1", pod["metadata"]["uid"])
    assert ti.xcom["pod_name"] == "report-1"


def test_a_missing_pod_is_a_clear_error(make_cluster, context):
    make_cluster()
    with pytest.raises(PodSelectionError, match="default/absent does not exist"):
        sensor(pod_name="absent").execute(context)


def test_label_selector_must_match_exactly_one_pod(make_cluster, context):
    cluster = make_cluster()
    with pytest.raises(PodSelectionError, match="found none"):
        sensor(label_selector="app=report").execute(context)
    external_pod(cluster, "report-1", {"app": "report", "day": "1"})
    external_pod(cluster, "report-2", {"app": "report", "day": "2"})
    with pytest.raises(PodSelectionError, match=r"found 2 pods \(report-1, report-2\)"):
        sensor(label_selector="app=report").execute(context)
    with pytest.raises(TaskDeferred) as deferred:
        sensor(label_selector="app=report,day=2").execute(context)
    assert deferred.value.trigger.pod_name == "report-2"


def _event(pod: dict[str, Any], outcome: Outcome, reason: Reason) -> dict[str, Any]:
    v = Verdict(outcome=outcome, reason=reason, message="m", rule=reason.value)
    return PodEvent("default", pod["metadata"]["name"], pod["metadata"]["uid"], v, 0).to_payload()


def test_failures_raise_the_operator_exceptions_and_delete_nothing(make_cluster, context, ti):
    cluster = make_cluster()
    pod = external_pod(cluster, "report-1", {"app": "report"})
    with pytest.raises(PodFailure):
        sensor(pod_name="report-1").execute_complete(
            context, _event(pod, Outcome.RETRY, Reason.CONTAINER_OOM)
        )
    assert ti.xcom["verdict"]["reason"] == "container.oom"
    with pytest.raises(PodFailurePermanent):
        sensor(pod_name="report-1").execute_complete(
            context, _event(pod, Outcome.FAIL, Reason.IMAGE_INVALID_NAME)
        )
    with pytest.raises(PodFailure):
        sensor(pod_name="report-1").execute_complete(context, _event(pod, Outcome.RELAUNCH, Reason.NODE_LOST))
    sensor(pod_name="report-1").execute_complete(context, _event(pod, Outcome.SUCCEED, Reason.SUCCEEDED))
    assert deletes(cluster) == []
    assert [p["metadata"]["name"] for p in cluster.pods()] == ["report-1"]


def test_deletes_when_asked(make_cluster, context):
    cluster = make_cluster()
    pod = external_pod(cluster, "report-1", {"app": "report"})
    s = sensor(pod_name="report-1", delete_pod_on_finish=True)
    s.execute_complete(context, _event(pod, Outcome.SUCCEED, Reason.SUCCEEDED))
    assert deletes(cluster) == ["report-1"]
