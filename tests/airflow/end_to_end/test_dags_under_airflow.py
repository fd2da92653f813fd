"""The promise, end to end: real Airflow (``airflow dags test``) runs RetryingPodOperator DAGs
against the simulator, and the metadata database and the simulator's audit log agree that every
try got exactly one pod, every pod was deleted, and the task ended on the right try.

The operator's cases are the tasks of one DAG, the sensor's DAG runs beside it; both run in one
module fixture and each test reads its own task's share of the outcome.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from airflow_k8s_retry.classification import hint_for
from tests.support.scenarios import Run, Scenario, run_all
from tools.airflow_runner import MigratedDatabase

FAST = 0.1  # real seconds per simulated second

# One DAG of independent tasks, each a case (Airflow runs them one after another under
# ``airflow dags test``; one Airflow start-up serves them all), and one simulator whose scenario
# gives each task an image of its own. Each test reads its task's share (``Run.of_task``).
TASKS = {
    "pull_missing": (
        """
        RetryingPodOperator(
            task_id="pull_missing",
            image="notavalidimage",
            cmds=["true"],
            retries=3,
            retry_delay=timedelta(seconds=1),
            failure_policy=FailurePolicy(grace={"image.not_found": 2}),
        )
        """,
        {"notavalidimage": {"pull": "not_found"}},
    ),
    "pull_invalid": (
        """
        RetryingPodOperator(
            task_id="pull_invalid",
            image="registry.example.com/Team/App:1",
            retries=3,
            retry_delay=timedelta(seconds=1),
        )
        """,
        {"registry.example.com/Team/App:1": {"pull": "invalid_name"}},
    ),
    "run": (
        """
        RetryingPodOperator(
            task_id="run",
            image="example.com/app:broken",
            retries=2,
            retry_delay=timedelta(seconds=1),
        )
        """,
        {"example.com/app:broken": {"run": {"exit_code": 3, "duration_seconds": 2, "log": "boom"}}},
    ),
    "pull_throttled": (
        """
        RetryingPodOperator(task_id="pull_throttled", image="registry.example.com/team/report:1.4", retries=2)
        """,
        {"registry.example.com/team/report:1.4": {"pull": "rate_limited", "for_seconds": 30}},
    ),
    "train": (
        """
        RetryingPodOperator(task_id="train", image="example.com/ml/train:2", retries=0)
        """,
        {"example.com/ml/train:2": {"run": {"duration_seconds": 30}}},
    ),
    "count": (
        """
        RetryingPodOperator(
            task_id="count",
            image="example.com/counter:1",
            do_xcom_push=True,
            # A deadline set but not reached: the trigger carries it, and the run's own bound
            # (480 s) comes first however busy the machine (60 s was likely reached on a loaded one).
            execution_timeout=timedelta(seconds=900),
        )
        """,
        {"example.com/counter:1": {"run": {"xcom": {"rows": 42}, "log": "42 rows"}}},
    ),
    # A kubeconfig that does not exist: no retry can fix it, and nothing was created to clean up.
    "broken_config": (
        """
        RetryingPodOperator(
            task_id="broken_config",
            image="example.com/never:1",
            config_file="/nonexistent/kubeconfig",
            retries=2,
            retry_delay=timedelta(seconds=1),
        )
        """,
        {},
    ),
    "slow": (
        """
        RetryingPodOperator(
            task_id="slow",
            image="example.com/slow:1",
            retries=0,
            execution_timeout=timedelta(seconds=8),
        )
        """,
        {"example.com/slow:1": {"run": {"duration_seconds": 900}}},
    ),
}

SCENARIOS = [
    Scenario(
        "e2e",
        "\n".join(textwrap.dedent(body).strip() for body, _ in TASKS.values()),
        {
            "time_scale": FAST,
            "images": {ref: how for _, images in TASKS.values() for ref, how in images.items()},
            "disruptions": [{"pod_name_prefix": "e2e-train-", "after_seconds": 10, "kind": "evict"}],
        },
    ),
]

SENSOR_HEADER = """
from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, task

from airflow_k8s_retry.sensors import PodCompletionSensor


@task
def start_report(run_id=None):
    import hashlib

    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
    from kubernetes import client

    run = hashlib.sha256(str(run_id).encode()).hexdigest()[:10]
    with KubernetesHook(conn_id="kubernetes_default").api_client as api:
        client.CoreV1Api(api).create_namespaced_pod(
            "default",
            {
                "metadata": {"name": f"report-{run}", "labels": {"app": "report", "run": run}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1.36"}]},
            },
        )
    return run
"""

SCENARIOS.append(
    Scenario(
        "e2e_sensor",
        """
        start_report() >> PodCompletionSensor(
            task_id="wait",
            label_selector="app=report,run={{ ti.xcom_pull(task_ids='start_report') }}",
            poke_interval=1,
        )
        """,
        {"time_scale": FAST, "images": {"busybox:1.36": {"run": {"duration_seconds": 20}}}},
        header=SENSOR_HEADER,
    )
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, migrated_database: MigratedDatabase) -> dict[str, Run]:
    return run_all(SCENARIOS, Path(tmp_path_factory.mktemp("e2e")), migrated_database, timeout=480)


def one_pod_per_try(run: Run, tries: int) -> None:
    created = run.created
    assert [int(r["labels"]["try_number"]) for r in created] == list(range(1, tries + 1)), run.result.output[
        -4000:
    ]
    names = [r["name"] for r in created]
    assert len(set(names)) == len(names)
    # (A pod whose execution deadline passed is deleted by the trigger at the deadline and again,
    # a no-op, by the resumed worker.)
    assert sorted(set(run.deleted_names)) == sorted(names), "every pod is deleted"
    assert run.live_pods == []


def reason_logged_for_each_try(run: Run, reason: str, tries: int) -> None:
    for n in range(1, tries + 1):
        # The report opens with the reason's fix hint, then the reason line.
        [pod] = [r["name"] for r in run.created if r["labels"]["try_number"] == str(n)]
        pattern = rf"Pod {re.escape(pod)}: fix: {re.escape(hint_for(reason))}\n{re.escape(reason)}: "
        assert re.search(pattern, run.result.output), f"try {n} does not log {reason}"


def test_image_not_found_costs_one_pod_per_try_and_fails_after_the_last(runs):
    run = runs["e2e"].of_task("pull_missing")
    assert [(t.try_number, t.state) for t in run.result.tries("pull_missing")] == [
        (1, "failed"),
        (2, "failed"),
        (3, "failed"),
        (4, "failed"),
    ]
    assert run.result.dag_run_state() == "failed"  # it and the other failing tasks fail the run
    one_pod_per_try(run, 4)
    reason_logged_for_each_try(run, "image.not_found", 4)
    # Stamped before cleanup: one verdict patch per pod, each before that pod's delete.
    for pod in run.created:
        patch = [r for r in run.requests("patch", 200) if r["name"] == pod["name"]]
        delete = [r for r in run.requests("delete", 200) if r["name"] == pod["name"]]
        assert patch and delete and patch[-1]["t"] <= delete[0]["t"]


def test_an_invalid_image_name_fails_at_once_without_retrying(runs):
    run = runs["e2e"].of_task("pull_invalid")
    assert [(t.try_number, t.state) for t in run.result.tries("pull_invalid")] == [(1, "failed")]
    one_pod_per_try(run, 1)
    reason_logged_for_each_try(run, "image.invalid_name", 1)


def test_a_non_zero_exit_is_retried_and_fails_after_the_last_try(runs):
    run = runs["e2e"].of_task("run")
    assert [(t.try_number, t.state) for t in run.result.tries("run")] == [
        (1, "failed"),
        (2, "failed"),
        (3, "failed"),
    ]
    one_pod_per_try(run, 3)
    reason_logged_for_each_try(run, "container.exit_code", 3)
    assert "boom" in run.result.output, "the log tail is part of the evidence"


def test_a_rate_limit_that_clears_inside_the_grace_succeeds_on_the_first_try(runs):
    run = runs["e2e"].of_task("pull_throttled")
    assert [(t.try_number, t.state) for t in run.result.tries("pull_throttled")] == [(1, "success")]
    one_pod_per_try(run, 1)
    throttled = [
        r
        for r in run.audit
        if r.get("kind") == "lifecycle"
        and r.get("change") == "waiting:ErrImagePull"
        and "429 Too Many Requests" in r.get("message", "")
    ]
    assert throttled, "the registry did throttle the pull"
    backoffs = [r for r in run.audit if r.get("change") == "waiting:ImagePullBackOff"]
    assert backoffs, "the pod went through ImagePullBackOff and still was not failed"


def test_an_eviction_is_relaunched_inside_the_same_try(runs):
    run = runs["e2e"].of_task("train")
    assert [(t.try_number, t.state) for t in run.result.tries("train")] == [(1, "success")]
    created = run.created
    assert [r["labels"]["try_number"] for r in created] == ["1", "1"]
    assert [r["labels"]["airflow-k8s-retry.io/relaunch"] for r in created] == ["0", "1"]
    assert sorted(run.deleted_names) == sorted(r["name"] for r in created)
    assert run.live_pods == []
    assert "node.disruption" in run.result.output


def test_xcom_comes_back_through_the_sidecar(runs):
    run = runs["e2e"].of_task("count")
    assert [(t.try_number, t.state) for t in run.result.tries("count")] == [(1, "success")], (
        run.result.output_of("count")[-4000:]
    )
    assert run.result.xcom("count") == {"rows": 42}
    assert run.result.xcom("count", "pod_name") == run.created[0]["name"]
    assert run.result.xcom("count", "pod_namespace") == "default"
    one_pod_per_try(run, 1)


def test_the_sensor_waits_for_a_pod_it_did_not_create_and_leaves_it_alone(runs):
    run = runs["e2e_sensor"]
    assert [(t.task_id, t.state) for t in run.result.tries()] == [
        ("start_report", "success"),
        ("wait", "success"),
    ], run.result.output[-3000:]
    [pod] = run.all_pods
    assert pod["metadata"]["name"].startswith("report-")
    assert run.requests("delete") == [], "the sensor deletes nothing it did not create"
    assert run.live_pods == [pod["metadata"]["name"]]
    assert f"Watching pod default/{pod['metadata']['name']}" in run.result.output


def test_execution_timeout_ends_the_try_and_deletes_the_pod(runs):
    run = runs["e2e"].of_task("slow")
    assert [(t.try_number, t.state) for t in run.result.tries("slow")] == [(1, "failed")]
    one_pod_per_try(run, 1)
    reason_logged_for_each_try(run, "execution.timeout", 1)


def test_a_kubeconfig_that_does_not_exist_fails_at_once_in_one_line_and_the_cleanup_in_one(runs):
    run = runs["e2e"].of_task("broken_config")
    assert [(t.try_number, t.state) for t in run.result.tries("broken_config")] == [(1, "failed")]
    assert run.created == []
    output = run.result.output_of("broken_config")
    errors = [line for line in output.splitlines() if "configuration error" in line]
    assert errors, output[-3000:]
    assert all("kubeconfig file /nonexistent/kubeconfig, which does not exist" in line for line in errors), (
        errors
    )
    # The failure callback that looks for pods left behind cannot reach the cluster either: it says
    # so in one line, and raises nothing. The one traceback is Airflow's of the task's own failure,
    # ending in that line; none ends in the client's ConfigException.
    [looked] = [line for line in output.splitlines() if "Could not look for pods left by try 1" in line]
    assert "ConfigException" in looked, looked
    assert output.count("Traceback (most recent call last)") == 1, output[-3000:]
    assert "config_exception.ConfigException" not in output, output[-3000:]
