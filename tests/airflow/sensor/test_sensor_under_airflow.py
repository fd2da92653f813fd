"""The sensor under real Airflow (``airflow dags test``) against the simulator: it waits for a pod
created after it started, follows a Job through a replaced pod, times out without spending retries,
skips under ``soft_fail``, and fails bad input at once."""

from __future__ import annotations

import re
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kubernetes.config import new_client_from_config

from airflow_k8s_retry_testing import FakeCluster
from tests.support.paths import REPO
from tests.support.scenarios import Run, Scenario, run_all
from tools.airflow_runner import AirflowHome, DagRunResult, MigratedDatabase

FAST = 0.1  # real seconds per simulated second

HEADER = """
from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, task

from airflow_k8s_retry.sensors import PodCompletionSensor


@task
def start_failing_job():
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
    from kubernetes import client

    with KubernetesHook(conn_id="kubernetes_default").api_client as api:
        client.BatchV1Api(api).create_namespaced_job(
            "default",
            {
                "metadata": {"name": "etl"},
                "spec": {
                    "backoffLimit": 1,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "main", "image": "example.com/etl:broken"}],
                        }
                    },
                },
            },
        )
"""

#: The sensor's endings and a failed Job's sensor, independent tasks of one DAG (one Airflow
#: start-up). The endings create and read no pod, so the run's pod requests are the Job sensor's.
SCENARIO = Scenario(
    "e2e_sensor",
    """
    PodCompletionSensor(
        task_id="never_comes", pod_name="never", timeout=4, retries=2, retry_delay=timedelta(seconds=1)
    )
    PodCompletionSensor(task_id="soft", pod_name="never", timeout=4, soft_fail=True, retries=2)
    PodCompletionSensor(task_id="bad_selector", label_selector="app in (a,b", retries=2)
    PodCompletionSensor(task_id="no_namespace", pod_name="x", namespace="reports", retries=2)
    start_failing_job() >> PodCompletionSensor(task_id="wait", job_name="etl", retries=0)
    """,
    {
        "time_scale": FAST,
        "images": {
            "example.com/etl:broken": {"run": {"exit_code": 2, "duration_seconds": 2, "log": "no input"}}
        },
    },
    header=HEADER,
)

#: The Job's pods run 10 s (real): long enough for the Job's sensor to be following the first pod
#: when the test evicts it. The export pod runs 2 s: it finishes well inside wait_for_export's 30 s
#: however late a busy machine lets the test create it.
SHORT_RUN = {"run": {"duration_seconds": 100}}
EXPORT_RUN = {"run": {"duration_seconds": 20}}
EXAMPLE_SCENARIO = {"time_scale": FAST, "images": {"busybox:1.36": SHORT_RUN, "busybox:1.37": EXPORT_RUN}}


@pytest.fixture(scope="module")
def ran(
    tmp_path_factory: pytest.TempPathFactory, migrated_database: MigratedDatabase
) -> tuple[dict[str, Run], tuple[DagRunResult, list[dict[str, Any]]]]:
    """The scenarios and the example DAG, all at once (each run mostly waits on its pods)."""
    work = Path(tmp_path_factory.mktemp("sensor-e2e"))
    (work / "example").mkdir()
    with ThreadPoolExecutor(max_workers=1) as pool:
        example = pool.submit(run_example, work / "example", migrated_database)
        scenarios = run_all([SCENARIO], work / "scenarios", migrated_database)
        result, _, pods = example.result()
    return scenarios, (result, pods)


@pytest.fixture(scope="module")
def runs(ran: tuple[dict[str, Run], Any]) -> dict[str, Run]:
    return ran[0]


def states(run: Run, task_id: str) -> list[tuple[int, str | None]]:
    return [(t.try_number, t.state) for t in run.result.tries(task_id)]


def test_a_timeout_fails_at_once_and_soft_fail_skips(runs: dict[str, Run]) -> None:
    run = runs["e2e_sensor"]
    output = run.result.output
    assert states(run, "never_comes") == [(1, "failed")], output[-4000:]
    assert "AirflowSensorTimeout" in output
    # The message says when the sensor noticed: 4 s or later (a loaded machine starts it late).
    timed_out = re.search(r"timed out after (\d+) s waiting for pod default/never: no such pod yet", output)
    assert timed_out and int(timed_out.group(1)) >= 4, output[-4000:]
    assert states(run, "soft") == [(1, "skipped")]


def test_bad_input_fails_at_once_with_one_line(runs: dict[str, Run]) -> None:
    run = runs["e2e_sensor"]
    output = run.result.output
    assert states(run, "bad_selector") == [(1, "failed")]
    assert "label_selector 'app in (a,b' is not a valid label selector" in output
    assert states(run, "no_namespace") == [(1, "failed")]
    assert "namespace 'reports' does not exist" in output
    # No pod was read but the failed Job's (its sensor's, in the same DAG), none created.
    assert [r["name"] for r in run.requests("get", 200) if not r["name"].startswith("etl-")] == []
    assert run.requests("create") == []


def test_a_failed_job_fails_the_sensor_with_the_cause_of_its_last_pod(runs: dict[str, Run]) -> None:
    run = runs["e2e_sensor"]
    output = run.result.output
    assert states(run, "wait") == [(1, "failed")], output[-4000:]
    assert (
        "job default/etl failed (BackoffLimitExceeded: Job has reached the specified backoff limit)" in output
    )
    assert "container.exit_code" in output and "no input" in output  # the classified cause, its log
    assert len(run.all_pods) == 2
    assert run.requests("delete") == []


def create_pod(cluster: FakeCluster, name: str) -> None:
    from kubernetes import client

    api = new_client_from_config(config_file=str(cluster.kubeconfig), persist_config=False)
    try:
        body = {
            "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "export", "image": "busybox:1.37"}]},
        }
        client.CoreV1Api(api).create_namespaced_pod("default", body)
    finally:
        api.close()


def run_example(
    tmp: Path, database: MigratedDatabase
) -> tuple[DagRunResult, FakeCluster, list[dict[str, Any]]]:
    """Run dags/06_sensor.py, playing the other system: create the pod ``wait_for_export`` waits for
    once it is waiting, and evict the Job's first pod once the sensor follows it (the Job controller
    replaces it after its 10 s back-off). The Job's first pod runs until it is evicted, however late
    a busy machine lets the sensor start following it; its replacement runs 10 s."""
    dags = tmp / "dags"
    dags.mkdir()
    shutil.copy(REPO / "dags" / "06_sensor.py", dags)
    home = AirflowHome.create(tmp / "home", dags_folder=dags, database=database)
    waiting = re.compile(r"Waiting for pod default/(nightly-export-\w+) \(\d+ s so far.*no such pod yet")
    following_etl = re.compile(r"Watching pod default/(nightly-etl-\w+-\w{5}) ")
    evicted: list[str] = []
    with FakeCluster(EXAMPLE_SCENARIO) as cluster:
        started = time.monotonic()
        proc = home.start_dag("06_sensor", kubeconfig=cluster.kubeconfig)
        killer = threading.Timer(300, proc.kill)
        killer.start()
        lines: list[str] = []
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                found = waiting.search(line)
                if found:
                    # The pods made from here on are the Job's: its first one runs until evicted.
                    cluster.set_image("busybox:1.36", {"run": {"duration_seconds": 1_000_000}})
                    create_pod(cluster, found.group(1))  # another system, later
                etl_pod = following_etl.search(line)
                if etl_pod and not evicted:
                    evicted.append(etl_pod.group(1))
                    cluster.set_image("busybox:1.36", SHORT_RUN)  # for the Job's replacement
                    cluster.disrupt(etl_pod.group(1), "evict")  # a node drain under the Job's pod
            proc.wait()
        finally:
            killer.cancel()
        result = DagRunResult(
            "06_sensor", proc.returncode, "".join(lines), time.monotonic() - started, home.database
        )
        return result, cluster, cluster.all_pods()


def test_the_example_dag_waits_for_a_pod_created_later_and_follows_a_job(ran: tuple[Any, Any]) -> None:
    result, pods = ran[1]
    output = result.output
    tasks = {t.task_id: t.state for t in result.tries()}
    assert tasks == {
        "start_report": "success",
        "wait_for_report": "success",
        "wait_for_export": "success",
        "start_etl": "success",
        "wait_for_etl": "success",
    }, output[-5000:]
    assert max(t.try_number for t in result.tries()) == 1
    # The export pod appeared after the sensor started waiting for it.
    assert re.search(r"Waiting for pod default/nightly-export-\w+ \(\d+ s so far.*no such pod yet", output)
    assert re.search(r"Watching pod default/nightly-export-\w+", output)
    # The Job's first pod was evicted and replaced; the sensor waited for the Job, not the pod.
    etl = [p for p in pods if p["metadata"]["name"].startswith("nightly-etl-")]
    assert len(etl) == 2, [p["metadata"]["name"] for p in etl]
    assert "the Job decides what comes next" in output
    assert re.search(r"job default/nightly-etl-\w+ is complete \(CompletionsReached", output)
