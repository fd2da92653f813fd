"""When a user marks a deferred task failed, the api-server's listener (``kills/listener.py``)
deletes its pod, after giving the trigger's ``on_kill`` its turn: what covers a kill that reaches
no running trigger (a triggerer hand-over, every triggerer down). The trigger row is Airflow's own
``Trigger`` model, built from the trigger the operator deferred on; the pod is in the simulator,
reached over HTTP by the real client. (Under a real api-server: ``tests/deployment``.)"""

from __future__ import annotations

import logging
from datetime import timedelta
from types import SimpleNamespace
from typing import Any
from unittest.mock import call

import pytest
from airflow.models.taskinstancekey import TaskInstanceKey
from airflow.models.trigger import Trigger
from airflow.triggers.base import TriggerEvent

from airflow_k8s_retry.classification.model import Outcome, Reason
from airflow_k8s_retry.compat import triggers_get_on_kill
from airflow_k8s_retry.kills import listener as kills
from airflow_k8s_retry.kube.naming import encode_stamp
from airflow_k8s_retry.kube.pods import KILL_BACKOFF
from airflow_k8s_retry.triggers import PodStateTrigger
from tests.support.operator_try import RUNNING, client_for, defer, first_event, operator, pods_named, verdict

pytestmark = pytest.mark.fake_cluster(RUNNING)
WHY = "Task instance dag.load (run r, try 1) marked failed"


def row_of(trigger: Any) -> Trigger:
    classpath, kwargs = trigger.serialize()
    return Trigger(classpath=classpath, kwargs=kwargs)


def test_the_listener_deletes_the_pod_of_a_task_killed_while_deferred(fake_cluster, context):
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
    assert fake_cluster.wait_for(lambda c: not pods_named(c, trigger.pod_name), timeout=10)
    deletes = [
        r for r in fake_cluster.audit_records() if r.get("kind") == "request" and r.get("verb") == "delete"
    ]
    assert [(r["uid"], r["status"], r["user_agent"]) for r in deletes] == [
        (trigger.pod_uid, 200, kills.USER_AGENT)
    ]


def test_a_refused_delete_is_retried(fake_cluster, context):
    trigger = defer(operator(), context)
    fake_cluster.add_fault(verb="delete", resource="pods", status=403, times=2)
    fake_cluster.add_fault(verb="get", resource="pods", status=500, times=1)
    slept: list[float] = []
    assert kills.delete_pod_of_killed_task(kills.pod_in_trigger(row_of(trigger)), WHY, sleep=slept.append)
    assert slept == [kills.ON_KILL_FIRST, 0.5, 1.0, 2.0]
    assert fake_cluster.wait_for(lambda c: not pods_named(c, trigger.pod_name), timeout=10)


def test_a_pod_already_gone_stamped_or_replaced_is_left_alone(fake_cluster, context):
    trigger = defer(operator(), context)
    pod = kills.pod_in_trigger(row_of(trigger))
    assert (
        kills.delete_pod_of_killed_task({**pod, "pod_uid": "another-pod"}, WHY, sleep=lambda _: None) is False
    )
    stamp = encode_stamp(verdict(Outcome.RETRY, Reason.CONTAINER_EXIT_CODE), kept=True)
    assert client_for(fake_cluster).stamp_verdict("default", trigger.pod_name, trigger.pod_uid, stamp)
    assert kills.delete_pod_of_killed_task(pod, WHY, sleep=lambda _: None) is False
    assert len(pods_named(fake_cluster, trigger.pod_name)) == 1
    client_for(fake_cluster).delete("default", trigger.pod_name, trigger.pod_uid, grace_period_seconds=0)
    assert fake_cluster.wait_for(lambda c: not pods_named(c, trigger.pod_name), timeout=10)
    assert kills.delete_pod_of_killed_task(pod, WHY, sleep=lambda _: None) is False


def test_only_a_trigger_that_owns_its_pod_names_one(fake_cluster, context):
    kept = defer(operator(on_kill_action="keep_pod"), context)
    assert kills.pod_in_trigger(row_of(kept)) is None
    assert (
        kills.pod_in_trigger(Trigger(classpath="airflow.triggers.temporal.DateTimeTrigger", kwargs={}))
        is None
    )
    assert kills.pod_in_trigger(None) is None


class TaskInstanceRow:
    """The attributes of Airflow's ``TaskInstance`` the listener reads (those of the task instance
    ``like``, the one a test's operator ran as, when given)."""

    def __init__(
        self, trigger_id: int | None = 7, try_number: int = 1, like: Any = None, operator: str = ""
    ) -> None:
        self.dag_id, self.task_id, self.run_id, self.map_index = "etl", "load", "r", -1
        self.id: Any = None
        if like is not None:
            self.dag_id, self.task_id, self.run_id = like.dag_id, like.task_id, like.run_id
            self.map_index, self.id, try_number = like.map_index, like.id, like.try_number
        self.try_number, self.trigger_id = try_number, trigger_id
        self.operator = operator
        self.next_method: str | None = None
        self.next_kwargs: Any = None
        self.state, self.scheduled_dttm = "deferred", None

    @property
    def key(self) -> TaskInstanceKey:
        return TaskInstanceKey(self.dag_id, self.task_id, self.run_id, self.try_number, self.map_index)


@pytest.mark.parametrize("previous_state", ["running", "queued"])
def test_a_task_s_own_ending_costs_nothing(mocker, previous_state):
    # The task runner and the scheduler call the same hooks with the state the task left.
    kill = mocker.patch.object(kills, "kill_deferred_pod")
    ti = TaskInstanceRow()
    kills.on_task_instance_failed(previous_state=previous_state, task_instance=ti, error="boom")
    kills.on_task_instance_success(previous_state=previous_state, task_instance=ti)
    kills.on_task_instance_skipped(previous_state=previous_state, task_instance=ti)
    kill.assert_not_called()
    kills.on_task_instance_failed(previous_state=None, task_instance=ti, error="manually set")
    kills.on_task_instance_skipped(previous_state=None, task_instance=ti)
    assert kill.call_args_list == [call(ti, "failed"), call(ti, "skipped")]


def test_a_task_instance_that_was_not_deferred_is_not_looked_up():
    def no_lookup(ti: Any) -> None:
        raise AssertionError("looked up a trigger row")

    assert (
        kills.kill_deferred_pod(TaskInstanceRow(trigger_id=None), "failed", trigger_row_of=no_lookup) is None
    )


def test_an_unreadable_trigger_row_never_fails_the_users_request():
    def unreadable(ti: Any) -> None:
        raise RuntimeError("database is locked")

    assert kills.kill_deferred_pod(TaskInstanceRow(), "failed", trigger_row_of=unreadable) is None


@pytest.mark.parametrize(
    ("now", "deleted"),
    [
        (("failed", 1), True),  # the user's state stands
        (None, True),  # and the DAG run was deleted since
        (("deferred", 1), False),  # the request's commit was rolled back
        (("scheduled", 1), False),  # the trigger's event won: a worker resumes the try
        (("failed", 2), False),  # the task instance is on a later try
    ],
)
def test_the_pod_is_deleted_only_while_the_kill_stands(fake_cluster, context, now, deleted):
    trigger = defer(operator(), context)
    slept: list[float] = []
    thread = kills.kill_deferred_pod(
        TaskInstanceRow(),
        "failed",
        trigger_row_of=lambda ti: row_of(trigger),
        state_of=lambda ti: now,
        sleep=slept.append,
    )
    assert thread is not None
    thread.join(30)
    # Airflow 3.3 gives the trigger an on_kill first; on 3.1 and 3.2 only the request's commit.
    assert slept[:1] == [kills.ON_KILL_FIRST if triggers_get_on_kill() else kills.COMMIT_FIRST]
    gone = fake_cluster.wait_for(lambda c: not pods_named(c, trigger.pod_name), timeout=5 if deleted else 1)
    assert gone is deleted


def test_only_airflow_3_3_on_gives_a_trigger_an_on_kill():
    from importlib.metadata import version

    major, minor = (int(p) for p in version("apache-airflow").split(".")[:2])
    assert triggers_get_on_kill() is ((major, minor) >= (3, 3))


# -- killed while the accepted event waits for a worker (scheduled, queued) -----------------------


def accepted(trigger: PodStateTrigger, event: TriggerEvent, like: Any = None) -> TaskInstanceRow:
    """The task instance after Airflow's triggerer handed the event over: ``handle_event_submit``
    (what ``Trigger.submit_event`` calls) clears ``trigger_id``, puts the event in ``next_kwargs``
    and schedules it, waiting for a worker."""
    from airflow.models.trigger import handle_event_submit

    try:
        from airflow.sdk.serde import serialize
    except ImportError:  # Airflow 3.1: the column encodes it; the task instance holds a plain dict
        serialize = dict

    ti = TaskInstanceRow(like=like, operator="RetryingPodOperator")
    ti.next_method = "execute_complete"  # as the operator's defer() left it
    ti.next_kwargs = serialize({"execution_deadline": trigger.execution_deadline})
    handle_event_submit(event, task_instance=ti, session=SimpleNamespace(flush=lambda: None))
    assert (ti.trigger_id, ti.state) == (None, "scheduled")
    return ti


def test_the_listener_deletes_the_running_pod_of_a_task_killed_while_it_waits_for_a_worker(
    fake_cluster, context, mocker
):
    # execution_timeout fires while the pod still runs, and every try of the trigger's delete at the
    # deadline fails (500s, its pauses shortened here); the user marks the scheduled (or queued) task
    # failed before a worker resumed it. No trigger is left for an on_kill, and no worker acts on the
    # verdict: the listener reads the pod's namespace and connection from the event.
    mocker.patch("airflow_k8s_retry.kills.trigger.KILL_BACKOFF", (0.01,) * len(KILL_BACKOFF))
    trigger = defer(operator(execution_timeout=timedelta(seconds=1)), context)
    fake_cluster.add_fault(verb="delete", resource="pods", status=500, times=len(KILL_BACKOFF) + 1)
    event = first_event(trigger)
    assert event.payload["verdict"]["reason"] == "execution.timeout"
    assert [p["status"]["phase"] for p in pods_named(fake_cluster, trigger.pod_name)] == ["Running"]
    ti = accepted(trigger, event, like=context["ti"])
    slept: list[float] = []
    thread = kills.kill_deferred_pod(
        ti, "failed", trigger_row_of=no_trigger_row, state_of=lambda key: ("failed", 1), sleep=slept.append
    )
    assert thread is not None
    thread.join(30)
    assert slept[:1] == [kills.ON_KILL_FIRST]  # a worker that resumed meanwhile had its turn
    assert fake_cluster.wait_for(lambda c: not pods_named(c, trigger.pod_name), timeout=10)
    deletes = [
        r for r in fake_cluster.audit_records() if r.get("kind") == "request" and r.get("verb") == "delete"
    ]
    by_listener = [(r["status"], r["user_agent"] == kills.USER_AGENT) for r in deletes]
    # the trigger's at the deadline, then the listener's
    assert by_listener == [(500, False)] * (len(KILL_BACKOFF) + 1) + [(200, True)]
    assert deletes[-1]["uid"] == trigger.pod_uid


def no_trigger_row(ti: Any) -> None:
    raise AssertionError("looked up a trigger row for a task instance with no trigger_id")


def test_a_waiting_event_names_the_pod_only_when_its_task_owns_it(fake_cluster, context):
    trigger = defer(operator(execution_timeout=timedelta(seconds=1)), context)
    event = first_event(trigger)
    assert event.payload["connection"] == {"kubernetes_conn_id": None}
    assert kills.pod_in_event(accepted(trigger, event)) == {
        "kubernetes_conn_id": None,
        "namespace": "default",
        "pod_name": trigger.pod_name,
        "pod_uid": trigger.pod_uid,
    }
    # An event from before the connection travelled in it, a kept pod's (on_kill_action=keep_pod),
    # or another method's kwargs: nothing to delete.
    older = {k: v for k, v in event.payload.items() if k != "connection"}
    assert kills.pod_in_event(accepted(trigger, TriggerEvent(older))) is None
    elsewhere = accepted(trigger, event)
    elsewhere.next_method = "execute"
    assert kills.pod_in_event(elsewhere) is None
    # (The owned trigger deleted its pod at the deadline; the kept task's pod is a new one.)
    assert fake_cluster.wait_for(lambda c: not pods_named(c, trigger.pod_name), timeout=10)
    kept = defer(operator(on_kill_action="keep_pod", execution_timeout=timedelta(seconds=1)), context)
    kept_event = first_event(kept)
    assert "connection" not in kept_event.payload
    kept_ti = accepted(kept, kept_event, like=context["ti"])
    # The event names no pod; the try's are looked for by label and this one keeps its pod on kill.
    kill_running(kept_ti, {"namespace": "default"})
    assert len(pods_named(fake_cluster, kept.pod_name)) == 1


def test_a_waiting_event_stored_by_older_airflow_is_read_too(fake_cluster, context):
    # Airflow 3.1 and 3.2 stored next_kwargs with BaseSerialization.
    from airflow.serialization.serialized_objects import BaseSerialization

    trigger = defer(operator(execution_timeout=timedelta(seconds=1)), context)
    event = first_event(trigger)
    ti = TaskInstanceRow(trigger_id=None)
    ti.next_method = "execute_complete"
    ti.next_kwargs = BaseSerialization.serialize({"execution_deadline": None, "event": event.payload})
    pod = kills.pod_in_event(ti)
    assert pod is not None and pod["pod_uid"] == trigger.pod_uid


# -- killed while running: the worker may never get an on_kill ---------------------------------


def created_then_refused(op: Any, context: dict[str, Any]) -> str:
    """The worker created the try's pod and deferred; the deferral was refused (the user had marked
    the task instance failed before the worker's supervisor heard of it), so the process ended with
    no on_kill and no trigger. The pod's name."""
    return defer(op, context).pod_name


def kill_running(ti: TaskInstanceRow, fields: dict[str, Any]) -> list[float]:
    slept: list[float] = []
    thread = kills.kill_deferred_pod(
        ti,
        "failed",
        trigger_row_of=no_trigger_row,
        state_of=lambda key: ("failed", ti.try_number),
        rendered_fields_of=lambda _: fields,
        sleep=slept.append,
    )
    assert thread is not None
    thread.join(30)
    return slept


def test_the_listener_deletes_the_pod_of_a_running_try_whose_deferral_was_refused(fake_cluster, context):
    name = created_then_refused(operator(), context)
    running = TaskInstanceRow(trigger_id=None, like=context["ti"], operator="RetryingPodOperator")
    slept = kill_running(running, {"namespace": "default", "kubernetes_conn_id": None})
    assert slept[:1] == [kills.ON_KILL_FIRST]
    assert fake_cluster.wait_for(lambda c: not pods_named(c, name), timeout=10)
    deletes = [
        r for r in fake_cluster.audit_records() if r.get("kind") == "request" and r.get("verb") == "delete"
    ]
    assert [(r["name"], r["status"], r["user_agent"]) for r in deletes] == [(name, 200, kills.USER_AGENT)]


def test_without_a_namespace_the_running_try_is_looked_for_where_the_operator_puts_it(fake_cluster, context):
    name = created_then_refused(operator(), context)
    running = TaskInstanceRow(trigger_id=None, like=context["ti"], operator="RetryingPodOperator")
    kill_running(running, {"namespace": None, "pod_template_dict": None})  # the connection's, else default
    assert fake_cluster.wait_for(lambda c: not pods_named(c, name), timeout=10)


def test_a_running_try_of_a_task_that_keeps_its_pod_on_kill_keeps_it(fake_cluster, context):
    name = created_then_refused(operator(on_kill_action="keep_pod"), context)
    running = TaskInstanceRow(trigger_id=None, like=context["ti"], operator="RetryingPodOperator")
    kill_running(running, {"namespace": "default"})
    assert len(pods_named(fake_cluster, name)) == 1
    assert not [
        r for r in fake_cluster.audit_records() if r.get("kind") == "request" and r.get("verb") == "delete"
    ]


def test_the_pods_of_another_try_or_another_operator_are_not_the_listeners(fake_cluster, context):
    name = created_then_refused(operator(), context)
    later = TaskInstanceRow(trigger_id=None, like=context["ti"], operator="RetryingPodOperator")
    later.try_number += 1  # the user killed the next try
    kill_running(later, {"namespace": "default"})
    assert len(pods_named(fake_cluster, name)) == 1

    def no_fields(ti: Any) -> dict[str, Any]:
        raise AssertionError("read the rendered fields of another operator's task")

    other = TaskInstanceRow(trigger_id=None, like=context["ti"], operator="BashOperator")
    assert kills.kill_deferred_pod(other, "failed", rendered_fields_of=no_fields) is None


@pytest.mark.parametrize(
    ("status", "said"),
    [
        (403, "its pods kept: RBAC: may not list pods"),
        (500, "its pods kept: listing or deleting failed 8 times"),
    ],
)
def test_a_running_try_whose_pods_cannot_be_listed_keeps_them_and_says_why(
    fake_cluster, context, caplog, status, said
):
    name = created_then_refused(operator(), context)
    fake_cluster.add_fault(verb="list", resource="pods", status=status, times=10)
    running = TaskInstanceRow(trigger_id=None, like=context["ti"], operator="RetryingPodOperator")
    with caplog.at_level(logging.WARNING, logger=kills.__name__):
        slept = kill_running(running, {"namespace": "default"})
    assert slept == [kills.ON_KILL_FIRST, *KILL_BACKOFF]
    [record] = [r for r in caplog.records if r.name == kills.__name__]
    assert f"marked failed: {said}" in record.getMessage()
    assert len(pods_named(fake_cluster, name)) == 1


@pytest.mark.parametrize(
    ("status", "said"), [(403, "kept: RBAC: may not delete pods"), (500, "kept: delete failed 8 times")]
)
def test_a_deferred_tasks_pod_that_cannot_be_deleted_is_kept_and_says_why(
    fake_cluster, context, caplog, status, said
):
    trigger = defer(operator(), context)
    fake_cluster.add_fault(verb="delete", resource="pods", status=status, times=10)
    with caplog.at_level(logging.WARNING, logger=kills.__name__):
        deleted = kills.delete_pod_of_killed_task(
            kills.pod_in_trigger(row_of(trigger)), WHY, sleep=lambda _: None
        )
    assert deleted is False
    [record] = [r for r in caplog.records if r.name == kills.__name__]
    assert record.getMessage().startswith(f"{WHY}: pod {trigger.pod_name} {said}")
    assert len(pods_named(fake_cluster, trigger.pod_name)) == 1
