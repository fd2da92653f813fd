"""The image-pull promise against a real cluster, when one is given (``pytest -m cluster``).

Set ``KUBECONFIG`` to a cluster where the current context may create and delete pods in its
namespace. The DAG is the ``notavalidimage`` case; the cluster's real kubelet and registry decide.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_k8s_retry.kube.config import ClusterConfig, sync_api_client
from airflow_k8s_retry.kube.pods import PodClient
from tests.end_to_end.scenarios import Scenario
from tests.support.airflow_runner import AirflowHome, MigratedDatabase

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

KUBECONFIG = os.environ.get("KUBECONFIG")

DAG = Scenario(
    "real_cluster_not_found",
    """
    RetryingPodOperator(
        task_id="pull",
        image="docker.io/library/notavalidimage-airflow-k8s-retry:0",
        retries=1,
        retry_delay=timedelta(seconds=1),
        failure_policy=FailurePolicy(grace={"image.not_found": 20, "image.unauthorized": 20}),
        execution_timeout=timedelta(minutes=5),
    )
    """,
    {},
)


@pytest.mark.skipif(not KUBECONFIG, reason="needs KUBECONFIG pointing at a real cluster")
def test_a_missing_image_costs_one_pod_per_try_on_a_real_cluster(
    tmp_path: Path, migrated_database: MigratedDatabase
):
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / f"{DAG.dag_id}.py").write_text(DAG.dag_file())
    home = AirflowHome.create(tmp_path / "home", dags_folder=dags, database=migrated_database)
    result = home.run_dag(DAG.dag_id, kubeconfig=Path(str(KUBECONFIG)), timeout=900)
    assert [(t.try_number, t.state) for t in result.tries("pull")] == [(1, "failed"), (2, "failed")]
    for n in (1, 2):
        assert f"-t{n}: image." in result.output, f"try {n} logs an image reason code"
    client = PodClient(sync_api_client(ClusterConfig(kube_config_path=str(KUBECONFIG))))
    namespace = "default"
    left = [
        p
        for p in client.list_pods(namespace, f"dag_id={DAG.dag_id}")
        if not p["metadata"].get("deletionTimestamp")
    ]
    assert left == [], "every pod of every try is deleted"
