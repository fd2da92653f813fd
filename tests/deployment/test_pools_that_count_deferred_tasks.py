"""A pool with ``include_deferred=True`` limits concurrent pods, and a failure verdict frees its
slot within seconds: the documented way to keep a KubernetesPodOperator DAG's pool throttling.

The pool counts task instances, not pods: once a pod has finished and its trigger fired, the task
is ``scheduled`` (outside the pool) until a worker resumes it and deletes the pod, and the freed
slot may start the next task's pod meanwhile. So it is the pods that have not finished (phase
Pending or Running) that the pool bounds; finished ones waiting for their worker's delete can be
more, the more so with several schedulers and workers."""

from __future__ import annotations

import time

from tools.deployment import Deployment

DAG_ID = "deployment_pool_deferred"
POOL = "k8s_two_deferred"


def test_a_two_slot_pool_that_counts_deferred_tasks_never_runs_more_than_two_pods(
    deployment: Deployment,
) -> None:
    dep = deployment
    dep.api("POST", "/api/v2/pools", {"name": POOL, "slots": 2, "include_deferred": True})
    run_id = dep.trigger_dag(DAG_ID)
    most_live = 0  # pods not finished (Pending or Running)
    most_existing = 0  # every pod that exists, finished ones waiting for their delete included
    failed_at: float | None = None
    next_start_after_failure: float | None = None
    started: set[str] = set()

    def finished() -> bool:
        nonlocal most_live, most_existing, failed_at, next_start_after_failure
        pods = dep.live_pods(DAG_ID)
        live = {p["metadata"]["labels"]["task_id"] for p in pods}
        unfinished = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        most_live = max(most_live, len(unfinished))
        most_existing = max(most_existing, len(pods))
        states = dep.task_states(DAG_ID, run_id)
        now = time.monotonic()
        if failed_at is None and states.get("broken", (0, None))[1] == "failed":
            failed_at = now
        fresh = live - started
        if failed_at is not None and next_start_after_failure is None and fresh:
            next_start_after_failure = now
        started.update(live)
        return dep.dag_run_state(DAG_ID, run_id) in ("success", "failed")

    dep.wait(finished, 240, "the DAG run to finish", lambda: dep.task_states(DAG_ID, run_id))
    assert most_live <= 2
    assert dep.tries(DAG_ID, run_id, "broken") == [(1, "failed")]
    assert all(dep.tries(DAG_ID, run_id, t) == [(1, "success")] for t in ("a", "b", "c"))
    assert failed_at is not None and next_start_after_failure is not None
    assert next_start_after_failure - failed_at < 15, "the failed task's slot took too long to free"
    print(
        f"\nmost unfinished pods: {most_live}, most existing: {most_existing}; "
        f"next pod {next_start_after_failure - failed_at:.1f} s after"
    )
