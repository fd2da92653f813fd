"""KPO arguments that used to be refused or mishandled, now with KPO's meaning.

Each test drives the operator in-process against the simulator with ``deferrable=False``: the worker
follows the pod with the trigger's own ``run()`` (the same watch, tracker and classifier as in a
triggerer), so no triggerer is needed and the whole try runs inside ``execute``.

- ``skip_on_exit_code=0`` skips the task when the base container exits 0, as KPO does;
- a failed pod's partial XCom with ``multiple_outputs=True`` is pushed per key and as
  ``return_value``;
- ``name`` is checked as KPO checks it (``[A-Za-z0-9._-]``, at most 220 characters) before anything
  is created;
- ``in_cluster``, ``config_file`` and ``cluster_context`` select the cluster on top of the
  connection, in the worker and in the trigger, and two tasks share a watch only on one cluster.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_k8s_retry.compat import AirflowSkipException, TaskDeferred
from airflow_k8s_retry.connection import aresolve_cluster_config
from airflow_k8s_retry.exceptions import ContainerExitFailure, PodFailurePermanent, PodOOMKilled
from airflow_k8s_retry.kills.listener import pod_in_trigger
from airflow_k8s_retry.operators import RetryingPodOperator
from airflow_k8s_retry.triggers import PodStateTrigger


def sync_operator(**kwargs: Any) -> RetryingPodOperator:
    kwargs.setdefault("image", "busybox:1.36")
    kwargs.setdefault("kubernetes_conn_id", None)
    return RetryingPodOperator(
        task_id="load", namespace="default", deferrable=False, poll_interval=1, **kwargs
    )


def deletes(cluster: Any) -> list[str]:
    return [
        r["name"]
        for r in cluster.audit_records()
        if r.get("verb") == "delete" and r.get("resource") == "pods" and r.get("status") == 200
    ]


@pytest.mark.fake_cluster(
    {
        "time_scale": 0.05,
        "images": {"example.com/count:1": {"run": {"xcom": {"rows": 42}, "duration_seconds": 2}}},
    }
)
def test_deferrable_false_follows_the_pod_in_the_worker_and_returns_its_result(fake_cluster, context, ti):
    op = sync_operator(image="example.com/count:1", do_xcom_push=True)
    assert op.execute(context) == {"rows": 42}  # no TaskDeferred: nothing for a triggerer to do
    assert deletes(fake_cluster) == [ti.xcom["pod_name"]]
    assert fake_cluster.pods() == []


@pytest.mark.fake_cluster({"time_scale": 0.05, "images": {"example.com/oom:1": {"run": {"oom": True}}}})
def test_deferrable_false_judges_a_failure_like_the_trigger(fake_cluster, context):
    with pytest.raises(PodOOMKilled) as raised:
        sync_operator(image="example.com/oom:1").execute(context)
    assert raised.value.reason == "container.oom"
    assert fake_cluster.wait_for(lambda c: not c.pods(), timeout=10)


@pytest.mark.fake_cluster(time_scale=0.05)
def test_deferrable_true_still_defers(fake_cluster, context):
    op = RetryingPodOperator(task_id="load", image="busybox:1.36", kubernetes_conn_id=None)
    with pytest.raises(TaskDeferred):
        op.execute(context)


@pytest.mark.fake_cluster({"time_scale": 0.05, "images": {"example.com/ok:1": {"run": {"xcom": {"a": 1}}}}})
def test_skip_on_exit_code_zero_skips_a_base_container_that_exits_zero(fake_cluster, context, ti):
    op = sync_operator(image="example.com/ok:1", skip_on_exit_code=0, do_xcom_push=True)
    with pytest.raises(AirflowSkipException, match="exit code 0 is in skip_on_exit_codes"):
        op.execute(context)
    assert "return_value" not in ti.xcom  # as KPO: a skipped success pushes no result
    assert deletes(fake_cluster) == [ti.xcom["pod_name"]]


@pytest.mark.fake_cluster(
    {
        "time_scale": 0.05,
        "images": {"example.com/half:1": {"run": {"exit_code": 3, "xcom": {"done": 7, "left": 3}}}},
    }
)
def test_a_failed_pods_partial_result_fans_out_with_multiple_outputs(fake_cluster, context, ti):
    op = sync_operator(image="example.com/half:1", do_xcom_push=True, multiple_outputs=True)
    with pytest.raises(ContainerExitFailure):
        op.execute(context)
    assert (ti.xcom["done"], ti.xcom["left"], ti.xcom["return_value"]) == (7, 3, {"done": 7, "left": 3})


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("bad name!", "has to be made of alphanumeric characters, dashes, dots and underscores exclusively"),
        ("x" * 221, "has to be less than 220 characters"),
    ],
)
@pytest.mark.fake_cluster(time_scale=0.05)
def test_an_invalid_pod_name_fails_at_once_and_creates_nothing(fake_cluster, context, name, message):
    op = RetryingPodOperator(task_id="load", image="busybox:1.36", kubernetes_conn_id=None, name=name)
    with pytest.raises(PodFailurePermanent) as raised:
        op.execute(context)
    assert message in str(raised.value) and "\n" not in str(raised.value)
    assert str(raised.value).startswith("load: configuration error (name): ")
    assert not [r for r in fake_cluster.audit_records() if r.get("verb") == "create"]


@pytest.mark.fake_cluster(time_scale=0.05)
def test_config_file_selects_the_cluster_over_the_connection(fake_cluster, context, monkeypatch, tmp_path):
    # The connection points at a kubeconfig that does not exist; the task's config_file wins.
    extra = {"kube_config_path": str(tmp_path / "missing")}
    monkeypatch.setenv("AIRFLOW_CONN_K8S_OTHER", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    monkeypatch.delenv("KUBECONFIG")
    op = RetryingPodOperator(
        task_id="load",
        image="busybox:1.36",
        kubernetes_conn_id="k8s_other",
        config_file=str(fake_cluster.kubeconfig),
    )
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    trigger = deferred.value.trigger
    assert isinstance(trigger, PodStateTrigger)
    assert trigger.serialize()[1]["cluster"] == {"config_file": str(fake_cluster.kubeconfig)}
    assert len(fake_cluster.pods()) == 1
    # What the kill listener reads back from the trigger row carries it too.
    row = type("Row", (), {"classpath": trigger.serialize()[0], "kwargs": trigger.serialize()[1]})()
    pod = pod_in_trigger(row)
    assert pod is not None and pod["cluster"] == {"config_file": str(fake_cluster.kubeconfig)}


async def test_the_trigger_resolves_the_same_cluster_as_the_worker(monkeypatch, tmp_path: Path) -> None:
    extra = {"kube_config_path": "/etc/kube/a", "cluster_context": "staging"}
    monkeypatch.setenv("AIRFLOW_CONN_K8S_A", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    plain = await aresolve_cluster_config("k8s_a")
    same = await aresolve_cluster_config("k8s_a", {"cluster_context": "staging"})
    other = await aresolve_cluster_config("k8s_a", {"cluster_context": "prod"})
    elsewhere = await aresolve_cluster_config("k8s_a", {"config_file": "/etc/kube/b"})
    assert (other.kube_config_path, other.cluster_context) == ("/etc/kube/a", "prod")
    assert elsewhere.kube_config_path == "/etc/kube/b"
    # The watch hub shares a feed by this key: one cluster, one feed; another cluster, another.
    assert plain.key == same.key
    assert len({plain.key, other.key, elsewhere.key}) == 3
    # in_cluster replaces the connection's file, and a context means nothing in-cluster.
    monkeypatch.setenv(
        "AIRFLOW_CONN_K8S_B", json.dumps({"conn_type": "kubernetes", "extra": {"cluster_context": "x"}})
    )
    inside = await aresolve_cluster_config("k8s_b", {"in_cluster": True})
    assert (inside.mode, inside.cluster_context) == ("in_cluster", None)


def test_a_trigger_without_cluster_arguments_serializes_no_cluster() -> None:
    trigger = PodStateTrigger(
        kubernetes_conn_id="c", namespace="n", pod_name="p", pod_uid="u", identity=None, policy=None
    )
    assert trigger.serialize()[1]["cluster"] is None
