"""``execution_timeout`` stops the pod at the deadline, not when a worker is free to act on it.

The trigger fires ``execution.timeout`` at the deadline; in a busy deployment the resumed worker may
start minutes later (the soak saw a task wait 10 minutes in ``scheduled``), and until then the pod
ran on past the task's deadline. The trigger now deletes a pod it owns (by UID, with the pod's own
grace) before it fires, and the worker acts on the verdict as before, finding the pod gone."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from airflow_k8s_retry.exceptions import PodFailure
from tests.support.operator_try import RUNNING, defer, first_event, operator, pods_named

pytestmark = pytest.mark.fake_cluster(RUNNING)


def live(cluster: Any, name: str) -> list[dict[str, Any]]:
    return [p for p in pods_named(cluster, name) if not p["metadata"].get("deletionTimestamp")]


def test_the_pod_is_deleted_when_the_deadline_verdict_fires(fake_cluster, context):
    op = operator(execution_timeout=timedelta(seconds=1))
    trigger = defer(op, context)
    event = first_event(trigger)
    assert event.payload["verdict"]["reason"] == "execution.timeout"
    assert live(fake_cluster, trigger.pod_name) == []  # going or gone when the event leaves
    deletes = [
        r for r in fake_cluster.audit_records() if r.get("kind") == "request" and r.get("verb") == "delete"
    ]
    assert [(r["uid"], r["status"]) for r in deletes] == [(trigger.pod_uid, 200)]
    with pytest.raises(PodFailure, match="execution_timeout reached"):
        op.execute_complete(context, event=event.payload)
    assert fake_cluster.wait_for(lambda c: not pods_named(c, trigger.pod_name), timeout=10)


def test_a_task_that_keeps_its_pod_on_kill_keeps_it_at_the_deadline(fake_cluster, context):
    trigger = defer(operator(execution_timeout=timedelta(seconds=1), on_kill_action="keep_pod"), context)
    event = first_event(trigger)
    assert event.payload["verdict"]["reason"] == "execution.timeout"
    assert [p["status"]["phase"] for p in live(fake_cluster, trigger.pod_name)] == ["Running"]


def test_a_delete_the_api_refuses_at_the_deadline_is_retried_before_the_event_leaves(fake_cluster, context):
    """A 429 (or 5xx) on the deadline's delete is retried as a kill's delete is: the pod must not
    run on until a worker resumes the task (the soak saw 3 minutes)."""
    trigger = defer(operator(execution_timeout=timedelta(seconds=1)), context)
    fake_cluster.add_fault(verb="delete", resource="pods", status=429, times=1)
    event = first_event(trigger)
    assert event.payload["verdict"]["reason"] == "execution.timeout"
    assert live(fake_cluster, trigger.pod_name) == []
    deletes = [
        r for r in fake_cluster.audit_records() if r.get("kind") == "request" and r.get("verb") == "delete"
    ]
    assert [r["status"] for r in deletes] == [429, 200]  # the fault answers before the pod is named
    assert deletes[-1]["uid"] == trigger.pod_uid
