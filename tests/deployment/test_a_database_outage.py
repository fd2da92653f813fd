"""The metadata database refuses connections for 30 s while a task is deferred, and its pod ends
during the outage: the task still ends with one verdict, one pod and nothing left behind.

PostgreSQL is stopped (``pg_ctl stop -m fast``: every connection cut, new ones refused) and
started again on the same port with the same data, as in a restart or a failover.
Airflow's processes may exit on the way (a scheduler or triggerer whose loop cannot reach the
database): like the process supervisor of a real deployment, the test starts again whatever has
exited once the database is back.
"""

from __future__ import annotations

import time

from tests.deployment.scenario import SCALE
from tools.deployment import Deployment

DAG_ID = "deployment_db_outage"
TASK_ID = "app"
OUTAGE = 30.0
RUNS_FOR = 150 * SCALE  # the pod's real seconds of running (the scenario's 150 simulated)


def test_a_30_second_database_outage_while_deferred_loses_nothing(deployment: Deployment) -> None:
    dep = deployment
    run_id = dep.trigger_dag(DAG_ID)
    dep.wait_deferred(DAG_ID, run_id, TASK_ID)
    [pod] = dep.wait(
        lambda: [p for p in dep.live_pods(DAG_ID) if (p.get("status") or {}).get("phase") == "Running"],
        60,
        "the pod to run",
        lambda: dep.live_pods(DAG_ID),
    )
    started = time.monotonic()
    with dep.database.outage():
        time.sleep(OUTAGE)
        # The pod ended during the outage; nothing could record it in Airflow's database.
        assert (dep.cluster.pod(pod["metadata"]["name"]) or {}).get("status", {}).get("phase") in (
            "Succeeded",
            None,
        )
    restarted = dep.restart_exited()
    dep.wait(
        lambda: dep.dag_run_state(DAG_ID, run_id) in ("success", "failed"),
        180,
        "the run to end after the database came back",
        lambda: (dep.task_states(DAG_ID, run_id), restarted),
    )
    assert time.monotonic() - started > RUNS_FOR
    assert dep.dag_run_state(DAG_ID, run_id) == "success", (dep.tries(DAG_ID, run_id, TASK_ID), restarted)
    assert dep.tries(DAG_ID, run_id, TASK_ID) == [(1, "success")]
    assert [p["metadata"]["uid"] for p in dep.pods_of(DAG_ID)] == [pod["metadata"]["uid"]]  # one pod
    dep.wait(lambda: not dep.live_pods(DAG_ID), 30, "the pod to be deleted", lambda: dep.live_pods(DAG_ID))
    # Every process is up again for the tests after this one.
    dep.wait_healthy("the deployment to report healthy again")
