"""Ordinary KubernetesPodOperator DAGs, with only the import swapped, do the same under both operators.

The DAG file is written twice: once importing the cncf ``KubernetesPodOperator``, once importing
``RetryingPodOperator as KubernetesPodOperator``. Both run under ``airflow dags test`` against the
simulator with the same ``airflow_local_settings.pod_mutation_hook``; the tests compare the task
states, the pods as created (read from the simulator) and what reached the task log and XCom. The
groups of tasks below are independent of each other, in one DAG (one Airflow start-up per side).
"""

from __future__ import annotations

import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from airflow_k8s_retry_testing import FakeCluster
from tools.airflow_runner import AirflowHome, DagRunResult, MigratedDatabase

IMPORTS = {
    "kpo": "from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator",
    "rpo": "from airflow_k8s_retry.operators import RetryingPodOperator as KubernetesPodOperator",
}

HEADER = """
from __future__ import annotations

from datetime import datetime

from airflow.providers.cncf.kubernetes.secret import Secret
from airflow.sdk import DAG, task
from kubernetes.client import models as k8s

{import_line}
"""

TEMPLATE = """
apiVersion: v1
kind: Pod
metadata:
  namespace: etl-jobs
spec:
  serviceAccountName: etl-runner
  containers:
    - name: main
      image: registry.example.com/etl-main:1
"""

#: Groups of independent tasks (each what a KPO DAG of its own would hold), one DAG in all.
GROUPS = {
    # Templated V1EnvVar, a Secret env var, V1ResourceRequirements, labels, do_xcom_push into a
    # downstream @task and a templated xcom_pull in the next pod; a mapped task.
    "kpo_etl": """
        extract = KubernetesPodOperator(
            task_id="extract", name="extract-sales", image="example.com/extract:1", namespace="default",
            arguments=["--date", "{{ ds }}"],
            env_vars=[k8s.V1EnvVar(name="EXECUTION_DATE", value="{{ ds }}")],
            secrets=[Secret("env", "DB_PASSWORD", "db-credentials", "password")],
            container_resources=k8s.V1ResourceRequirements(limits={"memory": "{{ params.mem }}"}),
            params={"mem": "256Mi"}, labels={"team": "data"}, do_xcom_push=True, poll_interval=1,
        )

        @task
        def report(result):
            print(f"extracted {result['rows']} rows")

        load = KubernetesPodOperator(
            task_id="load", image="example.com/load:1", namespace="default", poll_interval=1,
            arguments=["--rows", "{{ ti.xcom_pull(task_ids='extract')['rows'] }}"],
        )
        shards = KubernetesPodOperator.partial(
            task_id="shard", image="example.com/extract:1", namespace="default", do_xcom_push=True,
            poll_interval=1,
        ).expand(arguments=[["--shard", "0"], ["--shard", "1"]])
        extract >> [report(extract.output), load]
    """,
    # A pod template with its own namespace and a container named main; the KPO docs' volume Secret;
    # skip_on_exit_code with a none_failed downstream.
    "kpo_template_skip": """
        templated = KubernetesPodOperator(
            task_id="templated", pod_template_file={template!r}, poll_interval=1,
            secrets=[Secret("volume", "/etc/sql_conn", "airflow-secrets", "sql_alchemy_conn")],
        )
        skipper = KubernetesPodOperator(
            task_id="skipper", image="example.com/skip:1", namespace="default", skip_on_exit_code=99,
            poll_interval=1,
        )

        @task(trigger_rule="none_failed")
        def after():
            print("after the skip")

        [templated, skipper] >> after()
    """,
    # A 2,500-line log, a failing job with a traceback, KPO-only keys in default_args, and the
    # deployment's pod_mutation_hook.
    "kpo_extras": """
        chatty = KubernetesPodOperator(
            task_id="chatty", image="example.com/chatty:1", namespace="default", poll_interval=1,
            default_args={"log_events_on_failure": True, "container_logs": True,
                           "termination_message_policy": "FallbackToLogsOnError"},
        )
        failing = KubernetesPodOperator(
            task_id="failing", image="example.com/flaky:1", namespace="default", retries=0, poll_interval=1,
        )
    """,
    # KPO arguments that select the cluster (through default_args, as KPO code has them), KPO's own
    # sync mode, skip_on_exit_code=0, and a failed pod's partial result with multiple_outputs.
    "kpo_arguments": """
        local = KubernetesPodOperator(
            task_id="local", image="example.com/local:1", namespace="default", poll_interval=1,
            deferrable=False, get_logs=True,
            default_args={"in_cluster": False, "log_events_on_failure": True, "container_logs": True},
        )
        zero_skip = KubernetesPodOperator(
            task_id="zero_skip", image="example.com/load:1", namespace="default", skip_on_exit_code=0,
            poll_interval=1,
        )
        half = KubernetesPodOperator(
            task_id="half", image="example.com/half:1", namespace="default", do_xcom_push=True,
            multiple_outputs=True, retries=0, poll_interval=1,
        )
    """,
}

LOCAL_SETTINGS = """
def pod_mutation_hook(pod):
    pod.metadata.labels = {**(pod.metadata.labels or {}), "cost-center": "analytics"}
    pod.spec.tolerations = [*(pod.spec.tolerations or []), {"key": "batch", "operator": "Exists"}]
"""

CLUSTER = {
    "time_scale": 0.1,
    "namespaces": ["etl-jobs"],
    "secrets": [
        {"name": "db-credentials", "namespace": "default", "data": {"password": "pw"}},
        {"name": "airflow-secrets", "namespace": "etl-jobs", "data": {"sql_alchemy_conn": "x"}},
    ],
    "images": {
        "example.com/extract:1": {"run": {"xcom": {"rows": 42, "table": "sales"}, "log": "extracting"}},
        "example.com/load:1": {"run": {"log": "loading"}},
        "example.com/local:1": {"run": {"log": "loading in sync mode"}},
        "example.com/skip:1": {"run": {"exit_code": 99}},
        "example.com/half:1": {"run": {"exit_code": 3, "xcom": {"done": 7, "left": 3}}},
        "registry.example.com/etl-main:1": {"run": {"log": "hello from the templated main container"}},
        "example.com/chatty:1": {"run": {"log": "\n".join(f"line {i:04d}" for i in range(1, 2501))}},
        "example.com/flaky:1": {
            "run": {
                "exit_code": 1,
                "log": "\n".join(
                    [
                        "transform starting",
                        "Traceback (most recent call last):",
                        '  File "/app/t.py", line 9',
                        "FileNotFoundError: s3://bucket/part-0.parquet",
                    ]
                ),
            }
        },
    },
}


DAG_ID = "kpo_parity"


def dag_file(side: str, template: Path) -> str:
    body = "\n".join(textwrap.dedent(group).strip() for group in GROUPS.values())
    body = body.replace("{template!r}", repr(str(template)))
    return (
        textwrap.dedent(HEADER).format(import_line=IMPORTS[side])
        + f"\nwith DAG(dag_id={DAG_ID!r}, schedule=None, start_date=datetime(2024, 1, 1)):\n"
        + textwrap.indent(body + "\n", "    ")
    )


def run(side: str, root: Path, database: MigratedDatabase) -> dict[str, Any]:
    work = root / side
    dags = work / "dags"
    dags.mkdir(parents=True)
    template = work / "etl_pod.yaml"
    template.write_text(TEMPLATE)
    (dags / f"{DAG_ID}.py").write_text(dag_file(side, template))
    home = AirflowHome.create(work / "home", dags_folder=dags, database=database)
    (work / "home" / "config").mkdir(exist_ok=True)
    (work / "home" / "config" / "airflow_local_settings.py").write_text(LOCAL_SETTINGS)
    with FakeCluster(scenario=CLUSTER, audit=work / "audit.jsonl") as cluster:
        result: DagRunResult = home.run_dag(DAG_ID, kubeconfig=cluster.kubeconfig, timeout=480)
        (work / "airflow-output.log").write_text(result.output)
        return {"result": result, "pods": cluster.all_pods()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, migrated_database: MigratedDatabase) -> dict[str, Any]:
    root = Path(tmp_path_factory.mktemp("kpo-dags"))
    with ThreadPoolExecutor(max_workers=len(IMPORTS)) as pool:
        futures = {side: pool.submit(run, side, root, migrated_database) for side in IMPORTS}
        return {side: f.result() for side, f in futures.items()}


def states(entry: dict[str, Any]) -> dict[str, str]:
    return {
        f"{t.task_id}[{t.map_index}]" if t.map_index >= 0 else t.task_id: t.state
        for t in entry["result"].tries()
    }


def pod_of(entry: dict[str, Any], task_id: str) -> dict[str, Any]:
    [pod] = [
        p
        for p in entry["pods"]
        if p["metadata"]["labels"].get("task_id") == task_id and "map_index" not in p["metadata"]["labels"]
    ]
    return pod


def test_the_same_tasks_end_the_same_way(runs):
    kpo, rpo = runs["kpo"], runs["rpo"]
    assert len(states(kpo)) == 13  # every task of every group, the mapped ones each
    assert states(rpo) == states(kpo), (rpo["result"].output[-3000:], kpo["result"].output[-3000:])


def test_templated_model_objects_secrets_and_xcom(runs):
    kpo, rpo = runs["kpo"], runs["rpo"]
    for entry in (kpo, rpo):
        pod = pod_of(entry, "extract")
        base = pod["spec"]["containers"][0]
        env = {e["name"]: e.get("value") or e.get("valueFrom") for e in base["env"]}
        assert env["EXECUTION_DATE"] == pod_of(entry, "extract")["spec"]["containers"][0]["args"][1]
        assert not any("{{" in str(v) for v in env.values())
        assert base["resources"]["limits"] == {"memory": "256Mi"}
        assert env["DB_PASSWORD"] == {"secretKeyRef": {"key": "password", "name": "db-credentials"}}
        labels = pod["metadata"]["labels"]
        assert labels["cost-center"] == "analytics"  # pod_mutation_hook
        assert labels["kubernetes_pod_operator"] == "True"
        assert pod["spec"]["containers"][1]["image"] == "alpine:3.24.2"
        assert pod_of(entry, "load")["spec"]["containers"][0]["args"] == ["--rows", "42"]
        assert entry["result"].xcom("extract") == {"rows": 42, "table": "sales"}
        assert "extracted 42 rows" in entry["result"].output
    assert pod_of(rpo, "extract")["metadata"]["name"].startswith("extract-sales-")
    assert states(rpo)["shard[0]"] == states(rpo)["shard[1]"] == "success"


def test_a_pod_template_keeps_its_namespace_container_name_and_logs(runs):
    for side in ("kpo", "rpo"):
        entry = runs[side]
        pod = pod_of(entry, "templated")
        assert pod["metadata"]["namespace"] == "etl-jobs"
        assert pod["spec"]["containers"][0]["name"] == "base"
        mounts = pod["spec"]["containers"][0]["volumeMounts"]
        assert [m for m in mounts if m["mountPath"] == "/etc/sql_conn" and "subPath" not in m]
        assert "[base] hello from the templated main container" in entry["result"].output
        assert states(entry)["skipper"] == "skipped" and states(entry)["after"] == "success"


def test_logs_whole_on_success_and_on_failure_and_default_args(runs):
    for side in ("kpo", "rpo"):
        out = runs[side]["result"].output
        assert "line 0001" in out and "line 2500" in out, side
        assert "Traceback (most recent call last):" in out and "transform starting" in out, side
        pod = pod_of(runs[side], "chatty")
        assert pod["spec"]["containers"][0]["terminationMessagePolicy"] == "FallbackToLogsOnError"
        assert {"key": "batch", "operator": "Exists"} in pod["spec"]["tolerations"]


def test_cluster_arguments_sync_mode_zero_skip_and_partial_results_as_kpo(runs):
    for side in ("kpo", "rpo"):
        entry = runs[side]
        result = entry["result"]
        group = {
            task: state for task, state in states(entry).items() if task in ("local", "zero_skip", "half")
        }
        assert group == {"local": "success", "zero_skip": "skipped", "half": "failed"}, side
        assert "loading in sync mode" in result.output, side
        for key, value in (("done", 7), ("left", 3), ("return_value", {"done": 7, "left": 3})):
            assert result.xcom("half", key) == value, (side, key)
        assert result.xcom("zero_skip") is None, side
