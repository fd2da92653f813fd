"""With ``deferrable=False`` the worker follows the pod with the trigger's own logic, so a task runs,
fails, is retried and succeeds under a real scheduler and executor while no triggerer runs (both
are stopped with SIGSTOP for the whole DAG run): one pod per try, each deleted."""

from __future__ import annotations

from tools.deployment import Deployment

DAG_ID = "deployment_no_triggerer"


def test_a_sync_task_runs_fails_and_retries_with_every_triggerer_stopped(deployment: Deployment) -> None:
    dep = deployment
    dep.freeze("triggerer-a", "triggerer-b")
    try:
        run_id = dep.trigger_dag(DAG_ID)
        dep.wait(
            lambda: dep.dag_run_state(DAG_ID, run_id) in ("success", "failed"),
            180,
            "the DAG run to finish with no triggerer running",
            lambda: dep.task_states(DAG_ID, run_id),
        )
    finally:
        dep.thaw("triggerer-a", "triggerer-b")
    assert dep.tries(DAG_ID, run_id, "app") == [(1, "failed"), (2, "success")]
    # Neither try deferred: no trigger row was made for them.
    rows = dep.query(
        "select next_method from task_instance_history where dag_id = ? and run_id = ? "
        "union all select next_method from task_instance where dag_id = ? and run_id = ?",
        DAG_ID,
        run_id,
        DAG_ID,
        run_id,
    )
    assert rows == [(None,), (None,)]
    pods = dep.pods_of(DAG_ID)
    assert sorted(p["metadata"]["labels"]["try_number"] for p in pods) == ["1", "2"]
    assert dep.cluster.wait_for(
        lambda c: not [p for p in c.pods() if p["metadata"]["labels"].get("dag_id") == DAG_ID], timeout=15
    )
    deleted = sorted(r["uid"] for r in dep.pod_requests("delete", DAG_ID) if r["status"] == 200)
    assert deleted == sorted(p["metadata"]["uid"] for p in pods)
