"""Under real schedulers, executors and triggerers, a deferred RetryingPodOperator holds neither
its pool slot nor its worker, and a failed pod costs one Airflow try: one pod per try, each deleted.
"""

from __future__ import annotations

import time
from typing import Any

from tools.deployment import Deployment

DAG_ID = "deployment_pool_slots"
POOL = "k8s_one_slot"


def test_deferred_tasks_free_the_pool_slot_and_worker_and_a_failure_costs_one_try(
    deployment: Deployment,
) -> None:
    dep = deployment
    dep.api("POST", "/api/v2/pools", {"name": POOL, "slots": 1, "include_deferred": False})
    started = time.monotonic()
    run_id = dep.trigger_dag(DAG_ID)

    # While the pods run, every task sits deferred at once although the pool has one slot and the
    # executors fewer worker slots than there are tasks; the pool reports its slot open.
    busiest: dict[str, Any] = {}

    def all_deferred() -> bool:
        states = dep.task_states(DAG_ID, run_id)
        deferred = sorted(t for t, (_, s) in states.items() if s == "deferred")
        if len(deferred) > len(busiest.get("deferred", [])):
            pool = dep.api("GET", f"/api/v2/pools/{POOL}")
            live = [p["metadata"]["name"] for p in dep.live_pods(DAG_ID)]
            busiest.update(deferred=deferred, pool=pool, live=live)
        return len(deferred) == 3

    dep.wait(
        all_deferred,
        120,
        "all three tasks deferred at once",
        lambda: (dep.task_states(DAG_ID, run_id), busiest),
    )
    assert busiest["pool"]["slots"] == 1
    assert busiest["pool"]["open_slots"] == 1, busiest["pool"]
    assert busiest["pool"]["running_slots"] == 0, busiest["pool"]
    assert busiest["pool"]["deferred_slots"] == 3, busiest["pool"]
    assert len(busiest["live"]) == 3, busiest["live"]

    dep.wait(
        lambda: dep.dag_run_state(DAG_ID, run_id) in ("success", "failed"),
        120,
        "the DAG run to finish",
        lambda: dep.task_states(DAG_ID, run_id),
    )
    seconds = time.monotonic() - started

    assert dep.tries(DAG_ID, run_id, "first") == [(1, "success")]
    assert dep.tries(DAG_ID, run_id, "second") == [(1, "success")]
    assert dep.tries(DAG_ID, run_id, "flaky") == [(1, "failed"), (2, "failed")]
    assert dep.dag_run_state(DAG_ID, run_id) == "failed"

    # One pod per try, each deleted by UID; nothing left behind.
    pods = dep.pods_of(DAG_ID)
    per_try = sorted(
        (p["metadata"]["labels"]["task_id"], p["metadata"]["labels"]["try_number"]) for p in pods
    )
    assert per_try == [("first", "1"), ("flaky", "1"), ("flaky", "2"), ("second", "1")]
    assert dep.cluster.wait_for(
        lambda c: not [p for p in c.pods() if p["metadata"]["labels"].get("dag_id") == DAG_ID], timeout=15
    )
    deletes = dep.pod_requests("delete", DAG_ID)
    assert sorted(r["uid"] for r in deletes if r["status"] == 200) == sorted(
        p["metadata"]["uid"] for p in pods
    )
    assert len(dep.pod_requests("create", DAG_ID)) == 4
    print(f"\npool DAG run: {seconds:.1f} s, pods created {len(pods)}, deleted {len(deletes)}")
