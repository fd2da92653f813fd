"""A pool with ``include_deferred=True`` limits concurrent pods, and a failure verdict frees its
slot within seconds: the documented way to keep a KubernetesPodOperator DAG's pool throttling."""

from __future__ import annotations

import time

import pytest

from tests.deployment.conftest import Deployment

pytestmark = pytest.mark.e2e

DAG_ID = "deployment_pool_deferred"
POOL = "k8s_two_deferred"


def test_a_two_slot_pool_that_counts_deferred_tasks_never_runs_more_than_two_pods(
    deployment: Deployment,
) -> None:
    dep = deployment
    dep.api("POST", "/api/v2/pools", {"name": POOL, "slots": 2, "include_deferred": True})
    run_id = dep.trigger_dag(DAG_ID)
    most_live = 0
    failed_at: float | None = None
    next_start_after_failure: float | None = None
    started: set[str] = set()

    def finished() -> bool:
        nonlocal most_live, failed_at, next_start_after_failure
        live = {p["metadata"]["labels"]["task_id"] for p in dep.live_pods(DAG_ID)}
        most_live = max(most_live, len(live))
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
    print(f"\nmost live pods: {most_live}; next pod {next_start_after_failure - failed_at:.1f} s after")
