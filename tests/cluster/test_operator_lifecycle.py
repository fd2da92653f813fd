"""The operator's whole lifecycle under real Airflow (``airflow dags test``) on the real control
plane: one pod per try, the verdict, the cleanup by UID, Airflow's retries.

The DAGs run one after another in one Airflow interpreter (the least-privilege DAG beside them,
in a home of its own); the images' fates are those of ``tests/cluster/scenario.yaml``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kubernetes.config import new_client_from_config

from airflow_k8s_retry.kube.pods import PodClient
from tests.support.paths import REPO
from tests.support.scenarios import Scenario
from tools.airflow_runner import AirflowHome, DagRunResult, MigratedDatabase

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
KPO = Scenario(
    "cluster_kpo_deferrable",
    """
    common = dict(
        namespace="default",
        cmds=["sh", "-c", "echo conformance"],
        deferrable=True,
        startup_timeout_seconds=20,
        poll_interval=1,
        retries=0,
        on_finish_action="delete_pod",
    )
    good = KubernetesPodOperator(task_id="good_image", image="registry.example.com/app:ok", **common)
    missing = KubernetesPodOperator(
        task_id="missing_image", image="registry.example.com/app:missing", **common
    )
    good >> missing
    """,
    {},
    header="""
from __future__ import annotations

from datetime import datetime

from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import DAG
""",
)
#: The shipped example DAG of the sensor, as it is.
SENSOR_EXAMPLE = REPO / "dags" / "06_sensor.py"
LEAST_PRIVILEGE = Scenario(
    "cluster_least_privilege",
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
DAGS = (SUCCESS, EXIT_CODE, NOT_FOUND, KPO)


def least_privilege_kubeconfig(kubeconfig: Path, target: Path) -> Path:
    """The shipped Role, RoleBinding and ServiceAccount (deploy/rbac/, without the optional
    ClusterRole), and a kubeconfig holding a token the API server signed for that ServiceAccount."""
    import yaml
    from kubernetes import client as k
    from kubernetes import config as kconfig
    from kubernetes.client.exceptions import ApiException

    api_client = kconfig.new_client_from_config(str(kubeconfig))
    try:
        core, rbac = k.CoreV1Api(api_client), k.RbacAuthorizationV1Api(api_client)
        manifests = {
            name: yaml.safe_load((REPO / "deploy" / "rbac" / f"{name}.yaml").read_text())
            for name in ("serviceaccount", "role", "rolebinding")
        }
        sa = manifests["serviceaccount"]["metadata"]
        for create in (
            lambda: core.create_namespace({"metadata": {"name": sa["namespace"]}}),
            lambda: core.create_namespaced_service_account(sa["namespace"], manifests["serviceaccount"]),
            lambda: rbac.create_namespaced_role("default", manifests["role"]),
            lambda: rbac.create_namespaced_role_binding("default", manifests["rolebinding"]),
        ):
            try:
                create()
            except ApiException as exc:
                if exc.status != 409:
                    raise
        token = core.create_namespaced_service_account_token(
            sa["name"], sa["namespace"], {"spec": {"expirationSeconds": 3600}}
        ).status.token
    finally:
        api_client.close()
    config = yaml.safe_load(kubeconfig.read_text())
    config["users"] = [{"name": "least-privilege", "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = "least-privilege"
    target.write_text(yaml.safe_dump(config))
    return target


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory, kubeconfig: Path, migrated_database: MigratedDatabase
) -> dict[str, DagRunResult]:
    """Every DAG run; those with the admin kubeconfig in one Airflow interpreter, one after another
    (``AirflowHome.start_dags``), beside the least-privilege DAG's own run."""
    root = tmp_path_factory.mktemp("lifecycle")
    restricted = least_privilege_kubeconfig(kubeconfig, root / "least-privilege.kubeconfig")
    admin = {dag.dag_id: dag.dag_file() for dag in DAGS} | {"06_sensor": SENSOR_EXAMPLE.read_text()}
    batches = {  # name: (its kubeconfig, its DAG files)
        "admin": (kubeconfig, admin),
        "restricted": (restricted, {LEAST_PRIVILEGE.dag_id: LEAST_PRIVILEGE.dag_file()}),
    }
    started = []
    for name, (config, files) in batches.items():
        dags = root / name / "dags"
        dags.mkdir(parents=True)
        for dag_id, text in files.items():
            (dags / f"{dag_id}.py").write_text(text)
        home = AirflowHome.create(root / name / "home", dags_folder=dags, database=migrated_database)
        started.append((home, list(files), home.start_dags(list(files), kubeconfig=config), time.monotonic()))
    results: dict[str, DagRunResult] = {}
    for home, dag_ids, proc, t0 in started:
        results |= {r.dag_id: r for r in home.finish_dags(dag_ids, proc, t0, timeout=900)}
    return results


def live_pods(kubeconfig: Path, dag_id: str) -> list[str]:
    client = PodClient(new_client_from_config(config_file=str(kubeconfig), persist_config=False))
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


def test_the_sensor_example_waits_for_a_pod_it_did_not_create(
    runs: dict[str, DagRunResult], kubeconfig: Path
):
    result = runs["06_sensor"]
    assert result.dag_run_state() == "success", result.output[-3000:]
    assert [(t.try_number, t.state) for t in result.tries("wait_for_report")] == [(1, "success")]
    client = PodClient(new_client_from_config(config_file=str(kubeconfig), persist_config=False))
    assert [
        p["metadata"]["name"]
        for p in client.list_pods("default", "app=nightly-report")
        if not p["metadata"].get("deletionTimestamp")
    ] == [], "delete_pod_on_finish removed the pod"


def test_the_cncf_kubernetes_pod_operator_conforms(runs: dict[str, DagRunResult]):
    """The provider's own deferrable KubernetesPodOperator on the same cluster: a good image
    succeeds, a missing one fails (the control plane, not this package, is what is checked)."""
    result = runs[KPO.dag_id]
    assert result.final_state("good_image") == "success", result.output[-3000:]
    assert result.final_state("missing_image") == "failed", result.output[-3000:]


def test_the_whole_lifecycle_runs_under_the_shipped_least_privilege_role(
    runs: dict[str, DagRunResult], kubeconfig: Path
):
    """Real RBAC: the operator, its trigger and its cleanup need nothing beyond deploy/rbac/role.yaml."""
    result = runs[LEAST_PRIVILEGE.dag_id]
    tries = [(t.try_number, t.state) for t in result.tries("work")]
    assert tries == [(1, "failed"), (2, "failed")], result.output[-3000:]
    assert result.output.count("container.exit_code") >= 2
    assert live_pods(kubeconfig, LEAST_PRIVILEGE.dag_id) == []
