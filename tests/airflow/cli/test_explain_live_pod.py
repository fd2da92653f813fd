"""``airflow-k8s-retry explain --pod NAME``: a live pod and its Events read from the simulator
through the real ``kubernetes`` client, by the installed console script (default kubeconfig, or an
Airflow connection given with ``--conn-id``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from airflow_k8s_retry.classification import hint_for
from airflow_k8s_retry.kube.naming import HISTORY_ANNOTATION
from airflow_k8s_retry_testing import FakeCluster
from tools.airflow_runner import kubernetes_connection

CLI = str(Path(sys.executable).with_name("airflow-k8s-retry"))
SCENARIO = {
    "time_scale": 0.05,
    "images": {
        "registry.example.com/team/report:1.4": {"pull": "rate_limited"},
        "example.com/app:broken": {"run": {"exit_code": 3, "duration_seconds": 1, "log": "boom"}},
    },
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeCluster]:
    with FakeCluster(scenario=SCENARIO) as running:
        client = kubernetes.config.new_client_from_config(str(running.kubeconfig))
        core = kubernetes.client.CoreV1Api(client)
        core.create_namespace({"metadata": {"name": "jobs"}})
        for name, image in (
            ("report", "registry.example.com/team/report:1.4"),
            ("broken", "example.com/app:broken"),
        ):
            core.create_namespaced_pod(
                "jobs",
                {
                    "metadata": {"name": name},
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "base", "image": image}]},
                },
            )
        assert running.wait_for(
            lambda c: (
                _waiting(c.pod("report", "jobs")) == "ErrImagePull"
                or _waiting(c.pod("report", "jobs")) == "ImagePullBackOff"
            ),
            20,
        )
        assert running.wait_for(
            lambda c: ((c.pod("broken", "jobs") or {}).get("status") or {}).get("phase") == "Failed", 20
        )
        client.close()
        yield running


def _waiting(pod: dict[str, Any] | None) -> str | None:
    for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        reason = (status.get("state") or {}).get("waiting", {}).get("reason")
        if reason:
            return str(reason)
    return None


def explain(
    cluster: FakeCluster, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {
        "KUBECONFIG": str(cluster.kubeconfig),
        "PATH": "/usr/bin:/bin",
        "AIRFLOW_HOME": str(cluster.kubeconfig.parent),
    }
    return subprocess.run(
        [CLI, "explain", *args],
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_live_pod_is_read_with_its_events_through_the_kubeconfig(cluster: FakeCluster) -> None:
    proc = explain(cluster, "--pod", "report", "-n", "jobs")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert "pod:      jobs/report" in proc.stdout
    assert "verdict:  WAIT  image.rate_limited" in proc.stdout
    assert "toomanyrequests" in proc.stdout or "429" in proc.stdout
    events = next(line for line in proc.stdout.splitlines() if line.startswith("read:"))
    assert events.startswith("read:     live from the default kubeconfig, ")
    assert int(events.split(", ")[1].split()[0]) >= 1


def test_a_finished_pod_gets_its_final_verdict_in_json(cluster: FakeCluster) -> None:
    proc = explain(cluster, "--pod", "broken", "-n", "jobs", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["outcome"], result["reason"], result["rule"]) == (
        "retry",
        "container.exit_code",
        "exit_code",
    )
    assert result["source"] == "the default kubeconfig"
    assert result["stamped"] is None
    assert result["hint"] == hint_for("container.exit_code")


def test_trace_works_on_a_live_pod(cluster: FakeCluster) -> None:
    proc = explain(cluster, "--pod", "broken", "-n", "jobs", "--json", "--trace")
    assert proc.returncode == 0, proc.stderr
    trace = json.loads(proc.stdout)["trace"]
    assert trace[-1] == {**trace[-1], "rule": "exit_code", "matched": True}
    assert not any(step["matched"] for step in trace[:-1])


def test_an_airflow_connection_is_used_with_conn_id(cluster: FakeCluster, tmp_path: Path) -> None:
    env = {
        "AIRFLOW_CONN_SIMULATED": kubernetes_connection(cluster.kubeconfig, namespace="jobs"),
        "KUBECONFIG": str(tmp_path / "missing-kubeconfig"),  # only the connection can find the cluster
        "AIRFLOW_HOME": str(tmp_path),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    proc = explain(cluster, "--pod", "broken", "--conn-id", "simulated", "--json", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["source"] == "connection 'simulated'"
    assert result["reason"] == "container.exit_code"


def test_the_triggers_history_on_the_pod_sets_the_timers(cluster: FakeCluster) -> None:
    client = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
    core = kubernetes.client.CoreV1Api(client)
    try:
        pod = core.read_namespaced_pod("report", "jobs")
        first = {key: time.time() - 16 * 60 for key in ("image.rate_limited:base", "pod.pending")}
        history = json.dumps({"first_seen": first, "strongest": None})
        core.patch_namespaced_pod(
            "report", "jobs", {"metadata": {"annotations": {HISTORY_ANNOTATION: history}}}
        )
        assert pod.metadata.uid
    finally:
        client.close()
    proc = explain(cluster, "--pod", "report", "-n", "jobs")
    assert proc.returncode == 0, proc.stderr
    assert "verdict:  RETRY  image.rate_limited" in proc.stdout
    assert "timers from the trigger's history on the pod" in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pod", "nope", "-n", "jobs"], "error: pod jobs/nope not found through the default kubeconfig; "),
        (["--pod", "report", "--conn-id", "absent"], "error: there is no Airflow connection 'absent'; "),
        ([], "error: give a pod file (POD.json) or a live pod (--pod NAME)"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    cluster: FakeCluster, tmp_path: Path, args: list[str], message: str
) -> None:
    proc = explain(
        cluster, *args, env={"AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith(message), proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1
