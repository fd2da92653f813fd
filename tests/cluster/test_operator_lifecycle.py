"""The operator's whole lifecycle under real Airflow (``airflow dags test``) on the real control
plane: one pod per try, the verdict, the cleanup by UID, Airflow's retries.

The three DAGs run at once, each in its own Airflow home; the images' fates are those of
``tests/cluster/scenario.yaml``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from airflow_k8s_retry.kube.config import ClusterConfig, sync_api_client
from airflow_k8s_retry.kube.pods import PodClient
from tests.end_to_end.scenarios import Scenario
from tests.support.airflow_runner import AirflowHome, DagRunResult, MigratedDatabase

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

SUCCESS = Scenario(
    "cluster_success",
    """
    RetryingPodOperator(
        task_id="work",
        image="registry.example.com/app:ok",
        retries=1,
        retry_delay=timedelta(seconds=1),
        execution_timeout=timedelta(minutes=5),
    )
    """,
    {},
)
EXIT_CODE = Scenario(
    "cluster_exit_code",
    """
    RetryingPodOperator(
        task_id="work",
        image="registry.example.com/app:exit-3",
        retries=1,
        retry_delay=timedelta(seconds=1),
        execution_timeout=timedelta(minutes=5),
    )
    """,
    {},
)
NOT_FOUND = Scenario(
    "cluster_not_found",
    """
    RetryingPodOperator(
        task_id="pull",
        image="docker.io/library/notavalidimage-airflow-k8s-retry:0",
        retries=1,
        retry_delay=timedelta(seconds=1),
        failure_policy=FailurePolicy(grace={"image.not_found": 5}),
        execution_timeout=timedelta(minutes=5),
    )
    """,
    {},
)
DAGS = (SUCCESS, EXIT_CODE, NOT_FOUND)


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory, kubeconfig: Path, migrated_database: MigratedDatabase
) -> dict[str, DagRunResult]:
    root = tmp_path_factory.mktemp("lifecycle")
    started = {}
    for dag in DAGS:
        dags = root / dag.dag_id / "dags"
        dags.mkdir(parents=True)
        (dags / f"{dag.dag_id}.py").write_text(dag.dag_file())
        home = AirflowHome.create(root / dag.dag_id / "home", dags_folder=dags, database=migrated_database)
        started[dag.dag_id] = (home, home.start_dag(dag.dag_id, kubeconfig=kubeconfig), time.monotonic())
    return {
        dag_id: home.finish(dag_id, proc, t0, timeout=600) for dag_id, (home, proc, t0) in started.items()
    }


def live_pods(kubeconfig: Path, dag_id: str) -> list[str]:
    client = PodClient(sync_api_client(ClusterConfig(kube_config_path=str(kubeconfig))))
    return [
        p["metadata"]["name"]
        for p in client.list_pods("default", f"dag_id={dag_id}")
        if not p["metadata"].get("deletionTimestamp")
    ]


def test_a_pod_that_exits_zero_is_one_successful_try(runs: dict[str, DagRunResult], kubeconfig: Path):
    result = runs[SUCCESS.dag_id]
    assert [(t.try_number, t.state) for t in result.tries("work")] == [(1, "success")], result.output[-3000:]
    assert live_pods(kubeconfig, SUCCESS.dag_id) == []


def test_a_non_zero_exit_spends_each_try_on_one_pod(runs: dict[str, DagRunResult], kubeconfig: Path):
    result = runs[EXIT_CODE.dag_id]
    tries = [(t.try_number, t.state) for t in result.tries("work")]
    assert tries == [(1, "failed"), (2, "failed")], result.output[-3000:]
    assert result.output.count("container.exit_code") >= 2
    assert "exit code 3" in result.output
    assert live_pods(kubeconfig, EXIT_CODE.dag_id) == []


def test_a_missing_image_costs_one_pod_per_try(runs: dict[str, DagRunResult], kubeconfig: Path):
    result = runs[NOT_FOUND.dag_id]
    tries = [(t.try_number, t.state) for t in result.tries("pull")]
    assert tries == [(1, "failed"), (2, "failed")], result.output[-3000:]
    for n in (1, 2):
        assert f"-t{n}: image." in result.output, f"try {n} logs an image reason code"
    assert live_pods(kubeconfig, NOT_FOUND.dag_id) == []
