"""A user marks a deferred task instance failed through the REST API: the triggerer cancels the
trigger, ``on_kill`` confirms the task instance is no longer deferred and deletes the pod by UID,
and the api-server's listener (``kills/listener.py``) finds it gone. With no triggerer running the
trigger at that moment, the listener deletes the pod itself.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from airflow_k8s_retry.kills.listener import ON_KILL_FIRST, USER_AGENT
from airflow_k8s_retry.kube.naming import safe_label_value
from tools.deployment import Deployment

DAG_ID = "deployment_user_kill"
TASK_ID = "long"
TRIGGERERS = ("triggerer-a", "triggerer-b")


def _deferred_with_running_pod(dep: Deployment) -> tuple[str, dict[str, Any], str]:
    run_id = dep.trigger_dag(DAG_ID)

    def running_pod() -> dict[str, Any] | None:
        if dep.task_states(DAG_ID, run_id).get(TASK_ID) != (1, "deferred"):
            return None
        live = [
            p
            for p in dep.live_pods(DAG_ID)
            if p["metadata"]["labels"].get("run_id") == safe_label_value(run_id)
        ]
        return live[0] if live and live[0]["status"].get("phase") == "Running" else None

    pod = dep.wait(
        running_pod,
        60,
        "the task deferred with its pod running",
        lambda: (dep.task_states(DAG_ID, run_id), dep.cluster.pods()),
    )
    # The kill must come after the trigger's first turn on a triggerer, or the first test would
    # not be about on_kill (a trigger row removed before any triggerer ran it gets none).
    holder = dep.wait(
        lambda: next((n for n in TRIGGERERS if ") starting" in _run_trigger_log(dep, n, run_id)), None),
        30,
        "a triggerer to start the trigger",
        lambda: dep.trigger_holder(DAG_ID, run_id, TASK_ID),
    )
    return run_id, pod, holder


def _run_trigger_log(dep: Deployment, triggerer: str, run_id: str) -> str:
    folder = dep.home.home / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}"
    files = sorted(folder.rglob(f"*trigger.{dep.triggerer_jobs[triggerer]}.log")) if folder.exists() else []
    return "\n".join(f.read_text(errors="replace") for f in files)


def _mark_failed(dep: Deployment, run_id: str) -> float:
    killed_at = time.time()
    dep.api(
        "PATCH", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{TASK_ID}", {"new_state": "failed"}
    )
    return killed_at


def _deletes_of(dep: Deployment, uid: str) -> list[dict[str, Any]]:
    return [r for r in dep.pod_requests("delete", DAG_ID) if r["uid"] == uid]


def test_marking_a_deferred_task_failed_deletes_its_pod_by_uid(deployment: Deployment) -> None:
    dep = deployment
    started = time.monotonic()
    run_id, pod, holder = _deferred_with_running_pod(dep)
    uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]

    killed_at = _mark_failed(dep, run_id)

    def about_this_run() -> str:
        """What the holder logged about this run, wherever Airflow routed it (Deployment.lines_about)."""
        return "\n".join(dep.lines_about(holder, DAG_ID, run_id, name))

    dep.wait(
        lambda: f"Task instance is failed: pod {name} " in about_this_run(),
        45,
        "the trigger's on_kill to act on the pod",
        lambda: (dep.task_states(DAG_ID, run_id), _deletes_of(dep, uid), about_this_run()[-3000:]),
    )
    # The api-server's listener looks once on_kill has had its time, and finds the pod gone.
    dep.wait(
        lambda: f"marked failed: pod {name} was already gone" in dep.log("api-server"),
        ON_KILL_FIRST + 30,
        "the api-server's listener to find the pod gone",
        lambda: dep.log("api-server")[-3000:],
    )
    deletes = _deletes_of(dep, uid)
    assert [r["status"] for r in deletes] == [200], deletes
    assert deletes[0]["t"] > killed_at
    # The trigger deleted it (the asyncio client, not the listener's, which waits for on_kill) and
    # said why.
    assert deletes[0]["user_agent"] != USER_AGENT
    trigger_log = about_this_run()
    assert "invoking on_kill" in trigger_log
    assert f"Task instance is failed: pod {name} deleted" in trigger_log
    assert dep.cluster.wait_for(
        lambda c: not [p for p in c.pods() if p["metadata"]["uid"] == uid], timeout=15
    )
    assert dep.tries(DAG_ID, run_id, TASK_ID) == [(1, "failed")]
    # The operator never resumed: one pod, created once.
    assert [p["metadata"]["uid"] for p in dep.pods_of(DAG_ID) if p["metadata"]["name"] == name] == [uid]
    seconds = time.monotonic() - started
    print(
        f"\nuser kill: pod deleted {deletes[0]['t'] - killed_at:.1f} s after the PATCH; run {seconds:.1f} s"
    )


@pytest.mark.parametrize("what", ["task instance", "DAG run"])
def test_a_kill_while_no_triggerer_runs_the_trigger_still_deletes_the_pod(
    deployment: Deployment, what: str
) -> None:
    """The triggers' hand-over window: every triggerer frozen (SIGSTOP), so no ``on_kill`` can
    run; the api-server's listener deletes the pod on its own, whether the user marked the task
    instance failed or its whole DAG run."""
    dep = deployment
    run_id, pod, _ = _deferred_with_running_pod(dep)
    uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
    dep.freeze(*TRIGGERERS)
    try:
        if what == "DAG run":
            killed_at = time.time()
            dep.api("PATCH", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}", {"state": "failed"})
        else:
            killed_at = _mark_failed(dep, run_id)
        deleted = dep.wait(
            lambda: [r for r in _deletes_of(dep, uid) if r["status"] == 200],
            ON_KILL_FIRST + 30,
            "the api-server to delete the pod while every triggerer is frozen",
            lambda: (_deletes_of(dep, uid), dep.log("api-server")[-3000:]),
        )
        frozen_until = time.time()
    finally:
        dep.thaw(*TRIGGERERS)
    assert deleted[0]["user_agent"] == USER_AGENT, deleted
    assert killed_at + ON_KILL_FIRST < deleted[0]["t"] < frozen_until
    assert f"marked failed: pod {name} deleted" in dep.log("api-server")
    assert dep.cluster.wait_for(
        lambda c: not [p for p in c.pods() if p["metadata"]["uid"] == uid], timeout=15
    )
    assert dep.tries(DAG_ID, run_id, TASK_ID) == [(1, "failed")]
    print(
        f"\nkill with every triggerer frozen: pod deleted {deleted[0]['t'] - killed_at:.1f} s after the PATCH"
    )
