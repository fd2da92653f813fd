"""When a user marks a deferred task failed, the api-server's listener (``plugins/kills.py``)
deletes its pod, after giving the trigger's ``on_kill`` its turn: what covers a kill that reaches
no running trigger (a triggerer hand-over, every triggerer down). The trigger row is Airflow's own
``Trigger`` model, built from the trigger the operator deferred on; the pod is in the simulator,
reached over HTTP by the real client. (Under a real api-server: ``tests/deployment``.)"""

from __future__ import annotations

from typing import Any

import pytest
from airflow.models.trigger import Trigger

from airflow_k8s_retry.classification.model import Outcome, Reason
from airflow_k8s_retry.kube.lifecycle import encode_stamp
from airflow_k8s_retry.plugins import kills
from tests.operator.test_operator_lifecycle import client_for, defer, operator, verdict

RUNNING = {"time_scale": 0.05, "images": {"busybox:1.36": {"run": {"duration_seconds": 100_000}}}}
WHY = "Task instance dag.load (run r, try 1) marked failed"


def row_of(trigger: Any) -> Trigger:
    classpath, kwargs = trigger.serialize()
    return Trigger(classpath=classpath, kwargs=kwargs)


def pods_named(cluster: Any, name: str) -> list[dict[str, Any]]:
    return [p for p in cluster.pods() if p["metadata"]["name"] == name]


def test_the_listener_deletes_the_pod_of_a_task_killed_while_deferred(make_cluster, context):
    cluster = make_cluster(RUNNING)
    trigger = defer(operator(), context)
    pod = kills.pod_in_trigger(row_of(trigger))
    assert pod == {
        "kubernetes_conn_id": None,
        "namespace": "default",
        "pod_name": trigger.pod_name,
        "pod_uid": trigger.pod_uid,
    }
    slept: list[float] = []
    assert kills.delete_pod_of_killed_task(pod, WHY, sleep=slept.append) is True
    assert slept == [kills.ON_KILL_FIRST]  # the trigger's on_kill had its turn first
    assert cluster.wait_for(lambda c: not pods_named(c, trigger.pod_name), timeout=10)
    deletes = [r for r in cluster.audit_records() if r.get("kind") == "request" and r.get("verb") == "delete"]
    assert [(r["uid"], r["status"], r["user_agent"]) for r in deletes] == [
        (trigger.pod_uid, 200, kills.USER_AGENT)
    ]


def test_a_refused_delete_is_retried(make_cluster, context):
    cluster = make_cluster(RUNNING)
    trigger = defer(operator(), context)
    cluster.add_fault(verb="delete", resource="pods", status=403, times=2)
    cluster.add_fault(verb="get", resource="pods", status=500, times=1)
    slept: list[float] = []
    assert kills.delete_pod_of_killed_task(kills.pod_in_trigger(row_of(trigger)), WHY, sleep=slept.append)
    assert slept == [kills.ON_KILL_FIRST, 0.5, 1.0, 2.0]
    assert cluster.wait_for(lambda c: not pods_named(c, trigger.pod_name), timeout=10)


def test_a_pod_already_gone_stamped_or_replaced_is_left_alone(make_cluster, context):
    cluster = make_cluster(RUNNING)
    trigger = defer(operator(), context)
    pod = kills.pod_in_trigger(row_of(trigger))
    assert (
        kills.delete_pod_of_killed_task({**pod, "pod_uid": "another-pod"}, WHY, sleep=lambda _: None) is False
    )
    stamp = encode_stamp(verdict(Outcome.RETRY, Reason.CONTAINER_EXIT_CODE), kept=True)
    assert client_for(cluster).stamp_verdict("default", trigger.pod_name, trigger.pod_uid, stamp)
    assert kills.delete_pod_of_killed_task(pod, WHY, sleep=lambda _: None) is False
    assert len(pods_named(cluster, trigger.pod_name)) == 1
    client_for(cluster).delete("default", trigger.pod_name, trigger.pod_uid, grace_period_seconds=0)
    assert cluster.wait_for(lambda c: not pods_named(c, trigger.pod_name), timeout=10)
    assert kills.delete_pod_of_killed_task(pod, WHY, sleep=lambda _: None) is False


def test_only_a_trigger_that_owns_its_pod_names_one(make_cluster, context):
    make_cluster(RUNNING)
    kept = defer(operator(on_kill_action="keep_pod"), context)
    assert kills.pod_in_trigger(row_of(kept)) is None
    assert (
        kills.pod_in_trigger(Trigger(classpath="airflow.triggers.temporal.DateTimeTrigger", kwargs={}))
        is None
    )
    assert kills.pod_in_trigger(None) is None


class TaskInstanceRow:
    """The attributes of Airflow's ``TaskInstance`` the listener reads."""

    dag_id, task_id, run_id, try_number, trigger_id = "dag", "load", "r", 1, 7


@pytest.mark.parametrize("previous_state", ["running", "deferred"])
def test_a_task_s_own_ending_costs_nothing(monkeypatch, previous_state):
    # The task runner and the scheduler call the same hooks with the state the task left.
    looked: list[Any] = []
    monkeypatch.setattr(kills, "deferred_pod_of", looked.append)
    kills.on_task_instance_failed(
        previous_state=previous_state, task_instance=TaskInstanceRow(), error="boom"
    )
    kills.on_task_instance_success(previous_state=previous_state, task_instance=TaskInstanceRow())
    assert looked == []


def test_a_state_set_by_a_user_reads_the_trigger_row_and_never_raises(monkeypatch):
    looked: list[Any] = []

    def unreadable(ti: Any) -> None:
        looked.append(ti)
        raise RuntimeError("database is locked")

    monkeypatch.setattr(kills, "deferred_pod_of", unreadable)
    ti = TaskInstanceRow()
    kills.on_task_instance_failed(previous_state=None, task_instance=ti, error="manually set")
    kills.on_task_instance_skipped(previous_state=None, task_instance=ti)
    assert looked == [ti, ti]
