"""Memory growth after OOM kills, under real Airflow (``airflow dags test``) against the simulator,
on every supported minor (``make test-compat``).

The simulator's container needs 3500Mi (``run.memory_needed``): with a smaller limit the kubelet
OOM-kills it halfway through its run. Each scenario's pods are read back from the simulator (every
pod ever created, with the resources it was created with) and the tries from Airflow's database.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from airflow_k8s_retry.compat import HAS_RETRY_POLICIES
from airflow_k8s_retry_testing import FakeCluster
from tests.support.airflow_runner import AIRFLOW, AirflowHome, DagRunResult, MigratedDatabase
from tests.support.scenarios import DAG_HEADER

HEADER = (
    DAG_HEADER
    + "from kubernetes.client import models as k8s\n"
    + "from airflow_k8s_retry.memory_growth import MemoryGrowth\n"
)

TASK = """
RetryingPodOperator(
    task_id="job",
    image="{image}",
    retries={retries},
    retry_delay=timedelta(seconds=0),
    {resources}
    {growth}
)
"""

IMAGES = {
    "example.com/hungry:1": {"run": {"memory_needed": "3500Mi", "duration_seconds": 2}},
    "example.com/flaky:try1": {"run": {"exit_code": 3, "duration_seconds": 1}},
    "example.com/mixed:try1": {"run": {"memory_needed": "3500Mi", "duration_seconds": 2}},
    "example.com/mixed:try2": {"run": {"exit_code": 3, "duration_seconds": 1}},
}


SIZED = (
    'container_resources=k8s.V1ResourceRequirements(requests={"memory": "1Gi"}, limits={"memory": "2Gi"}),'
)

#: A pod template whose base container sets the memory itself (no container_resources).
TEMPLATE = """
apiVersion: v1
kind: Pod
metadata:
  namespace: default
spec:
  containers:
    - name: base
      image: example.com/hungry:1
      resources:
        limits: {memory: 2Gi}
        requests: {memory: 1Gi}
"""


def dag_file(dag_id: str, image: str, growth: str, retries: int, resources: str = SIZED) -> str:
    body = TASK.format(
        image=image, growth=f"memory_growth={growth}," if growth else "", retries=retries, resources=resources
    )
    return (
        HEADER
        + f"\nwith DAG(dag_id={dag_id!r}, schedule=None, start_date=datetime(2024, 1, 1)):\n"
        + textwrap.indent(textwrap.dedent(body).strip() + "\n", "    ")
    )


class Deployment:
    """One Airflow home and one simulated cluster; the DAG may run several times."""

    def __init__(
        self, root: Path, database: MigratedDatabase, dag_id: str, dag: str, cluster: dict[str, Any]
    ):
        dags = root / "dags"
        dags.mkdir(parents=True)
        (dags / f"{dag_id}.py").write_text(dag)
        self.dag_id = dag_id
        self.home = AirflowHome.create(root / "home", dags_folder=dags, database=database)
        self.cluster = FakeCluster(scenario={"time_scale": 0.1, **cluster}, audit=root / "audit.jsonl")

    def run(self) -> DagRunResult:
        result = self.home.run_dag(self.dag_id, kubeconfig=self.cluster.kubeconfig, timeout=240)
        (self.home.home / f"output-{len(self.limits())}.log").write_text(result.output)
        return result

    def limits(self) -> list[tuple[str, str]]:
        """(memory limit, request) of the base container of every pod created so far, in order."""
        out = []
        for pod in self.cluster.all_pods():
            resources = pod["spec"]["containers"][0].get("resources") or {}
            out.append((resources["limits"]["memory"], resources["requests"]["memory"]))
        return out

    def reasons(self) -> list[str]:
        with sqlite3.connect(self.home.database) as db:
            rows = db.execute(
                "select retry_reason from task_instance_history where dag_id = ? order by try_number",
                (self.dag_id,),
            ).fetchall()
        return [r[0] or "" for r in rows]

    def variable(self) -> Any:
        """The task's memory Variable as Airflow's own CLI reads it (its value is encrypted)."""
        key = f"k8s_retry.memory.{self.dag_id}.job"
        out = subprocess.run(
            [AIRFLOW, "variables", "get", key, "--default", "null"],
            env=self.home.env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        lines = out.stdout.splitlines()
        start = next(i for i, line in enumerate(lines) if line in ("{", "null"))  # after any warnings
        return json.loads("\n".join(lines[start:]))


@pytest.fixture
def deploy(tmp_path: Path, migrated_database: MigratedDatabase):  # type: ignore[no-untyped-def]
    made: list[Deployment] = []

    def make(
        dag_id: str,
        image: str,
        growth: str,
        nodes: list[dict[str, Any]] | None = None,
        retries: int = 3,
        resources: str = SIZED,
    ) -> Deployment:
        cluster: dict[str, Any] = {"images": IMAGES}
        if nodes:
            cluster["nodes"] = nodes
        d = Deployment(
            tmp_path / dag_id, migrated_database, dag_id, dag_file(dag_id, image, growth, retries), cluster
        )
        d.cluster.start()
        made.append(d)
        return d

    yield make
    for d in made:
        d.cluster.stop()


def test_an_oom_killed_task_succeeds_on_try_2_with_twice_the_memory_and_the_next_run_starts_there(
    deploy,
) -> None:  # type: ignore[no-untyped-def]
    d = deploy("grows", "example.com/hungry:1", "MemoryGrowth(factor=2, maximum='8Gi', remember=True)")
    first = d.run()
    assert first.returncode == 0, first.output[-4000:]
    assert [t.try_number for t in first.tries("job")] == [1, 2]
    assert first.final_state("job") == "success"
    assert d.limits() == [("2Gi", "1Gi"), ("4Gi", "2Gi")]
    assert "Try 2: memory 4Gi for container base: container base try 1 was OOMKilled at 2Gi" in first.output
    grown = "memory growth: try 2 asks for memory 4Gi (container base try 1 was OOMKilled at 2Gi)"
    assert grown in first.output  # the try's failure, as raised and logged
    if HAS_RETRY_POLICIES:  # and as Airflow 3.3 keeps the try's cause
        (reason,) = d.reasons()[:1]
        assert reason.startswith("container.oom: ") and grown in reason
    remembered = d.variable()["remembered"]
    assert remembered["size"] == {"limit": "4Gi", "request": "2Gi"}
    assert "next" not in d.variable()
    # The next run's first try starts from the size that succeeded: one pod, no OOM kill.
    second = d.run()
    assert second.returncode == 0, second.output[-4000:]
    assert d.limits()[2:] == [("4Gi", "2Gi")]
    assert "Try 1: memory 4Gi for container base: succeeded in run " in second.output


def test_growth_capped_by_the_largest_node_fails_at_once_naming_the_node(deploy) -> None:  # type: ignore[no-untyped-def]
    d = deploy("capped", "example.com/hungry:1", "MemoryGrowth()", nodes=[{"name": "small", "memory": "3Gi"}])
    result = d.run()
    assert result.returncode != 0
    # Try 2 got what the node could give (3Gi, not 4Gi), was OOM-killed again, and the task failed
    # then with two of its three retries unspent.
    assert d.limits() == [("2Gi", "1Gi"), ("3Gi", "2Gi")]
    assert [t.try_number for t in result.tries("job")] == [1, 2]
    assert result.final_state("job") == "failed"
    stopped = (
        "memory growth stopped: container base try 2 was OOMKilled at 3Gi, and the largest node's "
        "allocatable memory (small: 3Gi) allows no more than 3Gi"
    )
    assert stopped in result.output
    capped = (
        "try 2 asks for memory 3Gi (container base try 1 was OOMKilled at 2Gi, capped by the largest node's"
    )
    assert capped in (d.reasons()[0] if HAS_RETRY_POLICIES else result.output)
    assert d.variable() is None  # nothing left behind


def test_without_growth_every_retry_meets_the_same_kill(deploy) -> None:  # type: ignore[no-untyped-def]
    d = deploy("untouched", "example.com/hungry:1", "")
    result = d.run()
    assert result.returncode != 0
    assert d.limits() == [("2Gi", "1Gi")] * 4
    assert [t.try_number for t in result.tries("job")] == [1, 2, 3, 4]
    assert result.final_state("job") == "failed"
    assert "memory growth" not in result.output.lower()


def test_only_an_oom_kill_grows_the_memory(deploy) -> None:  # type: ignore[no-untyped-def]
    d = deploy("exit_code", "example.com/flaky:try{{ ti.try_number }}", "MemoryGrowth(remember=True)")
    result = d.run()
    assert result.returncode == 0, result.output[-4000:]
    assert d.limits() == [("2Gi", "1Gi"), ("2Gi", "1Gi")]
    assert d.variable() is None


def test_an_oom_kill_on_the_last_try_leaves_no_plan_behind(deploy) -> None:  # type: ignore[no-untyped-def]
    d = deploy("last_try", "example.com/hungry:1", "MemoryGrowth(factor=1.5)", retries=1)
    result = d.run()
    assert result.returncode != 0
    assert d.limits() == [("2Gi", "1Gi"), ("3Gi", "1536Mi")]  # 3Gi is still below the 3500Mi needed
    assert result.final_state("job") == "failed"
    assert "try 3 asks for memory" not in result.output
    assert d.variable() is None


def test_a_later_failure_of_a_grown_try_says_what_it_ran_with_and_keeps_the_size(deploy) -> None:  # type: ignore[no-untyped-def]
    d = deploy("mixed", "example.com/mixed:try{{ ti.try_number }}", "MemoryGrowth()")
    result = d.run()
    assert result.returncode == 0, result.output[-4000:]
    # Try 2 ran at 4Gi and failed with exit code 3; try 3 keeps 4Gi (only an OOM kill grows it).
    assert d.limits() == [("2Gi", "1Gi"), ("4Gi", "2Gi"), ("4Gi", "2Gi")]
    said = "this try ran with memory 4Gi for container base: container base try 1 was OOMKilled at 2Gi"
    assert said in (d.reasons()[1] if HAS_RETRY_POLICIES else result.output)
    assert d.variable() is None


def test_growth_applies_on_top_of_a_pod_template(deploy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    template = tmp_path / "pod.yaml"
    template.write_text(TEMPLATE)
    d = deploy(
        "templated",
        "example.com/hungry:1",
        "MemoryGrowth()",
        resources=f"pod_template_file={str(template)!r},",
    )
    result = d.run()
    assert result.returncode == 0, result.output[-4000:]
    assert d.limits() == [("2Gi", "1Gi"), ("4Gi", "2Gi")]
