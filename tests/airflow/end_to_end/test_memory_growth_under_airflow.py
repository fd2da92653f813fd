"""Memory growth after OOM kills, under real Airflow (``airflow dags test``) against the simulator,
on every supported minor (``make test-compat``).

The simulator's container needs 3500Mi (``run.memory_needed``): with a smaller limit the kubelet
OOM-kills it halfway through its run. Each scenario's pods are read back from the simulator (every
pod ever created, with the resources it was created with) and the tries from Airflow's database.
"""

from __future__ import annotations

import configparser
import json
import sqlite3
import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet, MultiFernet

from airflow_k8s_retry.compat import HAS_RETRY_POLICIES
from airflow_k8s_retry_testing import FakeCluster
from tests.support.airflow_runner import AirflowHome, DagRunResult, MigratedDatabase
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
        result = self.home.run_dag(self.dag_id, kubeconfig=self.cluster.kubeconfig, timeout=600)
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
        """The task's memory Variable as Airflow stores it: read from the metadata database and,
        encrypted as it is, decrypted with the home's Fernet key (Airflow wrote it to airflow.cfg on
        its first start), as Airflow's own ``Variable.get`` does; None when there is none."""
        key = f"k8s_retry.memory.{self.dag_id}.job"
        with sqlite3.connect(self.home.database) as db:
            row = db.execute("select val, is_encrypted from variable where key = ?", (key,)).fetchone()
        if row is None:
            return None
        value, encrypted = row
        if encrypted:
            config = configparser.ConfigParser(interpolation=None)
            config.read(self.home.home / "airflow.cfg")
            keys = [Fernet(k.strip().encode()) for k in config.get("core", "fernet_key").split(",")]
            value = MultiFernet(keys).decrypt(value.encode()).decode()
        return json.loads(value)


@dataclass(frozen=True)
class Case:
    """One scenario: its own DAG, Airflow home and simulated cluster."""

    image: str
    growth: str
    retries: int = 3
    nodes: tuple[dict[str, Any], ...] = ()
    templated: bool = False  # the memory comes from a pod template, not container_resources


CASES = {
    "grows": Case("example.com/hungry:1", "MemoryGrowth(factor=2, maximum='8Gi', remember=True)"),
    "capped": Case("example.com/hungry:1", "MemoryGrowth()", nodes=({"name": "small", "memory": "3Gi"},)),
    "untouched": Case("example.com/hungry:1", ""),
    "exit_code": Case("example.com/flaky:try{{ ti.try_number }}", "MemoryGrowth(remember=True)"),
    "last_try": Case("example.com/hungry:1", "MemoryGrowth(factor=1.5)", retries=1),
    "mixed": Case("example.com/mixed:try{{ ti.try_number }}", "MemoryGrowth()"),
    "templated": Case("example.com/hungry:1", "MemoryGrowth()", templated=True),
}


@dataclass
class Ran:
    """A scenario's deployment after its DAG's first run: the run and the memory Variable after it."""

    deployment: Deployment
    result: DagRunResult
    variable: Any


#: The case each test reads. Each ``airflow dags test`` costs seconds of CPU, so the fixture runs
#: only the cases of the tests selected (``make test-compat`` selects a few on the older minors).
CASE_OF_TEST = {
    "test_an_oom_killed_task_succeeds_on_try_2_with_twice_the_memory_and_the_next_run_starts_there": "grows",
    "test_growth_capped_by_the_largest_node_fails_at_once_naming_the_node": "capped",
    "test_without_growth_every_retry_meets_the_same_kill": "untouched",
    "test_only_an_oom_kill_grows_the_memory": "exit_code",
    "test_an_oom_kill_on_the_last_try_leaves_no_plan_behind": "last_try",
    "test_a_later_failure_of_a_grown_try_says_what_it_ran_with_and_keeps_the_size": "mixed",
    "test_growth_applies_on_top_of_a_pod_template": "templated",
}


@pytest.fixture(scope="module")
def ran(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    migrated_database: MigratedDatabase,
) -> Iterator[dict[str, Ran]]:
    """The first run of every case a selected test reads, all at once (the runs overlap: together
    they take little more than the longest), then each case's Variable."""
    tests = {name for name in vars(request.module) if name.startswith("test_")}
    assert tests == set(CASE_OF_TEST), f"CASE_OF_TEST must name each test once: {tests ^ set(CASE_OF_TEST)}"
    selected = {
        CASE_OF_TEST[item.originalname]
        for item in request.session.items
        if getattr(item, "module", None) is request.module
    }
    work = Path(tmp_path_factory.mktemp("memory-growth"))
    template = work / "pod.yaml"
    template.write_text(TEMPLATE)
    deployments: dict[str, Deployment] = {}
    try:
        for dag_id, case in CASES.items():
            if dag_id not in selected:
                continue
            resources = f"pod_template_file={str(template)!r}," if case.templated else SIZED
            cluster: dict[str, Any] = {"images": IMAGES}
            if case.nodes:
                cluster["nodes"] = list(case.nodes)
            dag = dag_file(dag_id, case.image, case.growth, case.retries, resources)
            deployments[dag_id] = d = Deployment(work / dag_id, migrated_database, dag_id, dag, cluster)
            d.cluster.start()
        with ThreadPoolExecutor(max_workers=len(deployments)) as pool:
            results = list(pool.map(Deployment.run, deployments.values()))
        variables = [d.variable() for d in deployments.values()]
        yield {
            dag_id: Ran(d, result, variable)
            for (dag_id, d), result, variable in zip(deployments.items(), results, variables, strict=True)
        }
    finally:
        for d in deployments.values():
            d.cluster.stop()


def test_an_oom_killed_task_succeeds_on_try_2_with_twice_the_memory_and_the_next_run_starts_there(
    ran: dict[str, Ran],
) -> None:
    d, first = ran["grows"].deployment, ran["grows"].result
    assert first.returncode == 0, first.output[-4000:]
    assert [t.try_number for t in first.tries("job")] == [1, 2]
    assert first.final_state("job") == "success"
    assert d.limits() == [("2Gi", "1Gi"), ("4Gi", "2Gi")]
    assert "Try 2: memory 4Gi for container base: container base try 1 was OOMKilled at 2Gi" in first.output
    grown = "memory growth: try 2 asks for memory 4Gi (container base try 1 was OOMKilled at 2Gi)"
    assert grown in first.output  # the try's failure, as raised and logged
    if HAS_RETRY_POLICIES:  # and as Airflow 3.3 keeps the try's cause
        reason = d.reasons()[0]
        assert reason.startswith("container.oom: ") and grown in reason
    assert ran["grows"].variable["remembered"]["size"] == {"limit": "4Gi", "request": "2Gi"}
    assert "next" not in ran["grows"].variable
    # The next run's first try starts from the size that succeeded: one pod, no OOM kill.
    second = d.run()
    assert second.returncode == 0, second.output[-4000:]
    assert d.limits()[2:] == [("4Gi", "2Gi")]
    assert "Try 1: memory 4Gi for container base: succeeded in run " in second.output


def test_growth_capped_by_the_largest_node_fails_at_once_naming_the_node(ran: dict[str, Ran]) -> None:
    d, result = ran["capped"].deployment, ran["capped"].result
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
    assert ran["capped"].variable is None  # nothing left behind


def test_without_growth_every_retry_meets_the_same_kill(ran: dict[str, Ran]) -> None:
    d, result = ran["untouched"].deployment, ran["untouched"].result
    assert result.returncode != 0
    assert d.limits() == [("2Gi", "1Gi")] * 4
    assert [t.try_number for t in result.tries("job")] == [1, 2, 3, 4]
    assert result.final_state("job") == "failed"
    assert "memory growth" not in result.output.lower()
    assert ran["untouched"].variable is None


def test_only_an_oom_kill_grows_the_memory(ran: dict[str, Ran]) -> None:
    d, result = ran["exit_code"].deployment, ran["exit_code"].result
    assert result.returncode == 0, result.output[-4000:]
    assert d.limits() == [("2Gi", "1Gi"), ("2Gi", "1Gi")]
    assert ran["exit_code"].variable is None


def test_an_oom_kill_on_the_last_try_leaves_no_plan_behind(ran: dict[str, Ran]) -> None:
    d, result = ran["last_try"].deployment, ran["last_try"].result
    assert result.returncode != 0
    assert d.limits() == [("2Gi", "1Gi"), ("3Gi", "1536Mi")]  # 3Gi is still below the 3500Mi needed
    assert result.final_state("job") == "failed"
    assert "try 3 asks for memory" not in result.output
    assert ran["last_try"].variable is None


def test_a_later_failure_of_a_grown_try_says_what_it_ran_with_and_keeps_the_size(ran: dict[str, Ran]) -> None:
    d, result = ran["mixed"].deployment, ran["mixed"].result
    assert result.returncode == 0, result.output[-4000:]
    # Try 2 ran at 4Gi and failed with exit code 3; try 3 keeps 4Gi (only an OOM kill grows it).
    assert d.limits() == [("2Gi", "1Gi"), ("4Gi", "2Gi"), ("4Gi", "2Gi")]
    said = "this try ran with memory 4Gi for container base: container base try 1 was OOMKilled at 2Gi"
    assert said in (d.reasons()[1] if HAS_RETRY_POLICIES else result.output)
    assert ran["mixed"].variable is None


def test_growth_applies_on_top_of_a_pod_template(ran: dict[str, Ran]) -> None:
    d, result = ran["templated"].deployment, ran["templated"].result
    assert result.returncode == 0, result.output[-4000:]
    assert d.limits() == [("2Gi", "1Gi"), ("4Gi", "2Gi")]
    assert ran["templated"].variable is None
