"""A user marks a deferred task instance failed through the REST API: the triggerer cancels the
trigger, ``on_kill`` confirms the task instance is no longer deferred and deletes the pod by UID.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.deployment.conftest import Deployment

pytestmark = pytest.mark.e2e

DAG_ID = "deployment_user_kill"
TASK_ID = "long"


def test_marking_a_deferred_task_failed_deletes_its_pod_by_uid(deployment: Deployment) -> None:
    dep = deployment
    started = time.monotonic()
    run_id = dep.trigger_dag(DAG_ID)

    def running_pod() -> dict[str, Any] | None:
        if dep.task_states(DAG_ID, run_id).get(TASK_ID) != (1, "deferred"):
            return None
        live = dep.live_pods(DAG_ID)
        return live[0] if live and live[0]["status"].get("phase") == "Running" else None

    pod = dep.wait(
        running_pod,
        60,
        "the task deferred with its pod running",
        lambda: (dep.task_states(DAG_ID, run_id), dep.cluster.pods()),
    )
    uid = pod["metadata"]["uid"]
    # The kill must reach a trigger that a triggerer is running (a trigger row deleted before any
    # triggerer picked it up gets no on_kill at all).
    holder = dep.wait(
        lambda: next((n for n in dep.triggerer_jobs if ") starting" in dep.trigger_logs(n, DAG_ID)), None),
        30,
        "a triggerer to start the trigger",
        lambda: dep.trigger_holder(DAG_ID, run_id, TASK_ID),
    )

    killed_at = time.time()
    dep.api(
        "PATCH", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{TASK_ID}", {"new_state": "failed"}
    )

    dep.wait(
        lambda: dep.pod_requests("delete", DAG_ID),
        45,
        "the pod to be deleted",
        lambda: (dep.task_states(DAG_ID, run_id), dep.cluster.pods()),
    )
    seconds = time.monotonic() - started
    deletes = dep.pod_requests("delete", DAG_ID)
    assert [(r["uid"], r["status"]) for r in deletes] == [(uid, 200)]
    assert deletes[0]["t"] > killed_at
    # The trigger deleted it (the asyncio client, not the operator's client that created it) and
    # said why; the operator never resumed.
    [create] = dep.pod_requests("create", DAG_ID)
    assert deletes[0]["user_agent"] != create["user_agent"]
    name = pod["metadata"]["name"]
    dep.wait(
        lambda: f"Task instance is failed: pod {name} deleted" in dep.trigger_logs(holder, DAG_ID),
        15,
        "the trigger to log the deletion",
        lambda: dep.trigger_logs(holder, DAG_ID)[-3000:],
    )
    assert "invoking on_kill" in dep.trigger_logs(holder, DAG_ID)
    assert dep.cluster.wait_for(lambda c: not dep.live_pods(DAG_ID), timeout=15)
    assert dep.tries(DAG_ID, run_id, TASK_ID) == [(1, "failed")]
    assert len(dep.pods_of(DAG_ID)) == 1
    print(
        f"\nuser kill: pod deleted {deletes[0]['t'] - killed_at:.1f} s after the PATCH; run {seconds:.1f} s"
    )
