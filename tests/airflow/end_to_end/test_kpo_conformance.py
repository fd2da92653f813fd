"""The simulator is faithful enough for the cncf provider's own KubernetesPodOperator.

Real Airflow runs KubernetesPodOperator, synchronous and deferrable, against the simulator through
the same ``kubernetes_default`` connection this package uses: a good image succeeds, a missing
image fails. If this breaks, the simulator (not this package) drifted from the real API server.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.support.scenarios import Run, Scenario, run_all
from tools.airflow_runner import MigratedDatabase

KPO_HEADER = """
from __future__ import annotations

from datetime import datetime

from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import DAG
"""

MODES = {"plain": False, "deferrable": True}
CLUSTER = {"time_scale": 0.1, "images": {"ghost.example.com/missing:1": {"pull": "not_found"}}}


def tasks(mode: str, deferrable: bool) -> str:
    return f"""
    common = dict(
        namespace="default",
        cmds=["sh", "-c", "echo conformance"],
        deferrable={deferrable},
        startup_timeout_seconds=8,
        poll_interval=1,
        retries=0,
        on_finish_action="delete_pod",
    )
    good = KubernetesPodOperator(task_id="good_image_{mode}", image="busybox:1.36", **common)
    missing = KubernetesPodOperator(
        task_id="missing_image_{mode}", image="ghost.example.com/missing:1", **common
    )
    good >> missing
    """


#: Both modes in one DAG (one Airflow start-up), each its own pair of tasks.
SCENARIO = Scenario(
    "kpo_conformance",
    "\n".join(textwrap.dedent(tasks(mode, deferrable)).strip() for mode, deferrable in MODES.items()),
    CLUSTER,
    header=KPO_HEADER,
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, migrated_database: MigratedDatabase) -> Run:
    return run_all([SCENARIO], Path(tmp_path_factory.mktemp("kpo")), migrated_database)[SCENARIO.dag_id]


@pytest.mark.parametrize("mode", sorted(MODES))
def test_kubernetes_pod_operator_succeeds_with_a_good_image_and_fails_with_a_missing_one(run, mode):
    output = run.result.output[-5000:]
    assert [(t.task_id, t.state) for t in run.result.tries() if t.task_id.endswith(f"_{mode}")] == [
        (f"good_image_{mode}", "success"),
        (f"missing_image_{mode}", "failed"),
    ], output
    pods = run.of_task(f"good_image_{mode}").all_pods + run.of_task(f"missing_image_{mode}").all_pods
    assert [p["spec"]["containers"][0]["image"] for p in pods] == [
        "busybox:1.36",
        "ghost.example.com/missing:1",
    ]
    assert run.of_task(f"good_image_{mode}").live_pods == run.of_task(f"missing_image_{mode}").live_pods == []
    assert run.live_pods == []
