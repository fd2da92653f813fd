"""Under a real scheduler, executor and triggerers, the delay the package's retry policy sets for a
cause is the one the scheduler waits before the next try, and the try's reason code is in Airflow's
own history (``task_instance_history.retry_reason``)."""

from __future__ import annotations

import pytest

from airflow_k8s_retry.compat import HAS_RETRY_POLICIES
from tools.deployment import Deployment

pytestmark = [
    pytest.mark.skipif(not HAS_RETRY_POLICIES, reason="retry policies are Airflow 3.3+"),
]

DAG_ID = "deployment_retry_policy"


def test_the_scheduler_waits_the_causes_delay_and_keeps_the_tries_reason(deployment: Deployment) -> None:
    dep = deployment
    run_id = dep.trigger_dag(DAG_ID)
    dep.wait(
        lambda: dep.dag_run_state(DAG_ID, run_id) in ("success", "failed"),
        180,
        "the DAG run to finish (the task's own retry_delay is an hour)",
        lambda: dep.task_states(DAG_ID, run_id),
    )
    assert dep.tries(DAG_ID, run_id, "app") == [(1, "failed"), (2, "success")]
    ((reason, delay, ended),) = dep.query(
        "select retry_reason, retry_delay_override, end_date from task_instance_history "
        "where dag_id = ? and run_id = ? and task_id = 'app'",
        DAG_ID,
        run_id,
    )
    assert reason.startswith("container.oom: container 'base' was killed for running out of memory")
    assert delay == 8.0
    ((started,),) = dep.query(
        "select start_date from task_instance where dag_id = ? and run_id = ? and task_id = 'app'",
        DAG_ID,
        run_id,
    )
    assert (started - ended).total_seconds() >= 8.0
    assert dep.cluster.wait_for(
        lambda c: not [p for p in c.pods() if p["metadata"]["labels"].get("dag_id") == DAG_ID], timeout=15
    )
