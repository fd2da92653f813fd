"""The simulator is faithful enough for the cncf provider's own KubernetesPodOperator.

Real Airflow runs KubernetesPodOperator, synchronous and deferrable, against the simulator through
the same ``kubernetes_default`` connection this package uses: a good image succeeds, a missing
image fails. If this breaks, the simulator (not this package) drifted from the real API server.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.airflow_runner import MigratedDatabase
from tests.support.scenarios import Run, Scenario, run_all

KPO_HEADER = """
from __future__ import annotations

from datetime import datetime

from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import DAG
"""

CLUSTER = {"time_scale": 0.1, "images": {"ghost.example.com/missing:1": {"pull": "not_found"}}}


def kpo_dag(dag_id: str, deferrable: bool) -> Scenario:
    body = f"""
    common = dict(
        namespace="default",
        cmds=["sh", "-c", "echo conformance"],
        deferrable={deferrable},
        startup_timeout_seconds=8,
        poll_interval=1,
        retries=0,
        on_finish_action="delete_pod",
    )
    good = KubernetesPodOperator(task_id="good_image", image="busybox:1.36", **common)
    missing = KubernetesPodOperator(task_id="missing_image", image="ghost.example.com/missing:1", **common)
    good >> missing
    """
    return Scenario(dag_id, body, CLUSTER, header=KPO_HEADER)


SCENARIOS = [kpo_dag("kpo_plain", deferrable=False), kpo_dag("kpo_deferrable", deferrable=True)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, migrated_database: MigratedDatabase) -> dict[str, Run]:
    return run_all(SCENARIOS, Path(tmp_path_factory.mktemp("kpo")), migrated_database, parallel=2)


@pytest.mark.parametrize("dag_id", ["kpo_plain", "kpo_deferrable"])
def test_kubernetes_pod_operator_succeeds_with_a_good_image_and_fails_with_a_missing_one(runs, dag_id):
    run = runs[dag_id]
    output = run.result.output[-5000:]
    assert [(t.task_id, t.state) for t in run.result.tries()] == [
        ("good_image", "success"),
        ("missing_image", "failed"),
    ], output
    images = [p["spec"]["containers"][0]["image"] for p in run.all_pods]
    assert images == ["busybox:1.36", "ghost.example.com/missing:1"]
    assert run.live_pods == []
