"""Memory growth after OOM kills, under real Airflow (``airflow dags test``) against the simulator,
on every supported minor (``make test-compat``).

The simulator's container needs 3500Mi (``run.memory_needed``): with a smaller limit the kubelet
OOM-kills it halfway through its run. Each case is a task (its pods are read back from the
simulator, every pod ever created with the resources it was created with, and its tries from
Airflow's database); the cases that share the default nodes are the tasks of one DAG (one Airflow
start-up), the node-capped case has a cluster and a DAG of its own.
"""

from __future__ import annotations

import configparser
import json
import sqlite3
import textwrap
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet, MultiFernet

from airflow_k8s_retry.compat import HAS_RETRY_POLICIES
from airflow_k8s_retry_testing import FakeCluster
from tests.support.scenarios import DAG_HEADER
from tools.airflow_runner import AirflowHome, DagRunResult, MigratedDatabase

HEADER = (
    DAG_HEADER
    + "from kubernetes.client import models as k8s\n"
    + "from airflow_k8s_retry.memory_growth import MemoryGrowth\n"
)

TASK = """
RetryingPodOperator(
    task_id="{task_id}",
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


def dag_file(dag_id: str, tasks: dict[str, Case], template: Path) -> str:
    bodies = []
    for task_id, case in tasks.items():
        resources = f"pod_template_file={str(template)!r}," if case.templated else SIZED
        growth = f"memory_growth={case.growth}," if case.growth else ""
        bodies.append(
            TASK.format(
                task_id=task_id, image=case.image, growth=growth, retries=case.retries, resources=resources
            ).strip()
        )
    return (
        HEADER
        + f"\nwith DAG(dag_id={dag_id!r}, schedule=None, start_date=datetime(2024, 1, 1)):\n"
        + textwrap.indent("\n".join(bodies) + "\n", "    ")
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
        self.runs = 0
        self.home = AirflowHome.create(root / "home", dags_folder=dags, database=database)
        self.cluster = FakeCluster(scenario={"time_scale": 0.1, **cluster}, audit=root / "audit.jsonl")

    def run(self, then_alone: Sequence[str] = ()) -> list[DagRunResult]:
        """Run the DAG, then once more for each task of ``then_alone``, that task alone (the others
        marked successful unrun), all in one Airflow interpreter; the runs' results in order."""
        runs = [self.dag_id, *(f"{self.dag_id}:{task_id}" for task_id in then_alone)]
        results = self.home.run_dags(runs, kubeconfig=self.cluster.kubeconfig, timeout=600)
        for result in results:
            self.runs += 1
            (self.home.home / f"output-{self.runs}.log").write_text(result.output)
        return results

    def limits(self, task_id: str) -> list[tuple[str, str]]:
        """(memory limit, request) of the base container of every pod of the task so far, in order."""
        out = []
        for pod in self.cluster.all_pods():
            if pod["metadata"]["labels"].get("task_id") != task_id:
                continue
            resources = pod["spec"]["containers"][0].get("resources") or {}
            out.append((resources["limits"]["memory"], resources["requests"]["memory"]))
        return out

    def reasons(self, task_id: str) -> list[str]:
        with sqlite3.connect(self.home.database) as db:
            rows = db.execute(
                "select retry_reason from task_instance_history where dag_id = ? and task_id = ? "
                "order by try_number",
                (self.dag_id, task_id),
            ).fetchall()
        return [r[0] or "" for r in rows]

    def variable(self, task_id: str) -> Any:
        """The task's memory Variable as Airflow stores it: read from the metadata database and,
        encrypted as it is, decrypted with the home's Fernet key (Airflow wrote it to airflow.cfg on
        its first start), as Airflow's own ``Variable.get`` does; None when there is none."""
        key = f"k8s_retry.memory.{self.dag_id}.{task_id}"
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
    """One case: a task (named as the case) of its deployment's DAG."""

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
    """A case after its DAG's runs: the first run, the next run of its task alone (when its test
    reads one: :data:`NEXT_RUN`), and its memory Variable after them."""

    task_id: str
    deployment: Deployment
    result: DagRunResult
    variable: Any
    next_run: DagRunResult | None = None

    @property
    def output(self) -> str:
        return self.result.output_of(self.task_id)

    @property
    def limits(self) -> list[tuple[str, str]]:
        return self.deployment.limits(self.task_id)

    @property
    def reasons(self) -> list[str]:
        return self.deployment.reasons(self.task_id)

    @property
    def state(self) -> str | None:
        return self.result.final_state(self.task_id)


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


#: Cases whose test reads a second run of the DAG with the case's task alone. It runs in the same
#: Airflow interpreter right after the first (an interpreter costs 10-20 s of CPU to start).
NEXT_RUN = {"grows"}


@pytest.fixture(scope="module")
def ran(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    migrated_database: MigratedDatabase,
) -> Iterator[dict[str, Ran]]:
    """The first run of every case a selected test reads: the cases on the default nodes as tasks of
    one DAG, the node-capped case beside it (the two runs overlap), then each case's Variable."""
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
    groups: dict[str, dict[str, Case]] = {}  # DAG id -> its cases (a case with nodes of its own alone)
    for name, case in CASES.items():
        if name in selected:
            groups.setdefault(f"memory_{name}" if case.nodes else "memory", {})[name] = case
    deployments: dict[str, Deployment] = {}
    try:
        for dag_id, cases in groups.items():
            cluster: dict[str, Any] = {"images": IMAGES}
            nodes = [node for case in cases.values() for node in case.nodes]
            if nodes:
                cluster["nodes"] = nodes
            dag = dag_file(dag_id, cases, template)
            deployments[dag_id] = d = Deployment(work / dag_id, migrated_database, dag_id, dag, cluster)
            d.cluster.start()
        alone = {dag_id: sorted(NEXT_RUN & set(cases)) for dag_id, cases in groups.items()}

        def run(dag_id: str) -> list[DagRunResult]:
            return deployments[dag_id].run(then_alone=alone[dag_id])

        with ThreadPoolExecutor(max_workers=len(deployments)) as pool:
            results = dict(zip(deployments, pool.map(run, deployments), strict=True))
        next_runs = {
            name: result
            for dag_id in groups
            for name, result in zip(alone[dag_id], results[dag_id][1:], strict=True)
        }
        yield {
            name: Ran(name, d, results[dag_id][0], d.variable(name), next_runs.get(name))
            for dag_id, cases in groups.items()
            for name in cases
            for d in [deployments[dag_id]]
        }
    finally:
        for d in deployments.values():
            d.cluster.stop()


def test_an_oom_killed_task_succeeds_on_try_2_with_twice_the_memory_and_the_next_run_starts_there(
    ran: dict[str, Ran],
) -> None:
    r = ran["grows"]
    assert [t.try_number for t in r.result.tries("grows")] == [1, 2]
    assert r.state == "success", r.output[-4000:]
    assert r.limits[:2] == [("2Gi", "1Gi"), ("4Gi", "2Gi")]
    assert "Try 2: memory 4Gi for container base: container base try 1 was OOMKilled at 2Gi" in r.output
    grown = "memory growth: try 2 asks for memory 4Gi (container base try 1 was OOMKilled at 2Gi)"
    assert grown in r.output  # the try's failure, as raised and logged
    if HAS_RETRY_POLICIES:  # and as Airflow 3.3 keeps the try's cause
        reason = r.reasons[0]
        assert reason.startswith("container.oom: ") and grown in reason
    assert r.variable["remembered"]["size"] == {"limit": "4Gi", "request": "2Gi"}
    assert "next" not in r.variable
    # The next run's first try starts from the size that succeeded: one pod, no OOM kill (the DAG's
    # other tasks are marked successful unrun).
    second = r.next_run
    assert second is not None and second.returncode == 0, second and second.output[-4000:]
    assert [t.try_number for t in second.tries("grows")] == [1]
    assert r.limits[2:] == [("4Gi", "2Gi")]
    assert "Try 1: memory 4Gi for container base: succeeded in run " in second.output_of("grows")


def test_growth_capped_by_the_largest_node_fails_at_once_naming_the_node(ran: dict[str, Ran]) -> None:
    r = ran["capped"]
    # Try 2 got what the node could give (3Gi, not 4Gi), was OOM-killed again, and the task failed
    # then with two of its three retries unspent.
    assert r.limits == [("2Gi", "1Gi"), ("3Gi", "2Gi")]
    assert [t.try_number for t in r.result.tries("capped")] == [1, 2]
    assert r.state == "failed"
    stopped = (
        "memory growth stopped: container base try 2 was OOMKilled at 3Gi, and the largest node's "
        "allocatable memory (small: 3Gi) allows no more than 3Gi"
    )
    assert stopped in r.output
    capped = (
        "try 2 asks for memory 3Gi (container base try 1 was OOMKilled at 2Gi, capped by the largest node's"
    )
    assert capped in (r.reasons[0] if HAS_RETRY_POLICIES else r.output)
    assert r.variable is None  # nothing left behind


def test_without_growth_every_retry_meets_the_same_kill(ran: dict[str, Ran]) -> None:
    r = ran["untouched"]
    assert r.limits == [("2Gi", "1Gi")] * 4
    assert [t.try_number for t in r.result.tries("untouched")] == [1, 2, 3, 4]
    assert r.state == "failed"
    assert "oomkilled" in r.output.lower()  # the task's own output: each try's kill is reported
    assert "memory growth" not in r.output.lower()
    assert r.variable is None


def test_only_an_oom_kill_grows_the_memory(ran: dict[str, Ran]) -> None:
    r = ran["exit_code"]
    assert r.state == "success", r.output[-4000:]
    assert r.limits == [("2Gi", "1Gi"), ("2Gi", "1Gi")]
    assert r.variable is None


def test_an_oom_kill_on_the_last_try_leaves_no_plan_behind(ran: dict[str, Ran]) -> None:
    r = ran["last_try"]
    assert r.limits == [("2Gi", "1Gi"), ("3Gi", "1536Mi")]  # 3Gi is still below the 3500Mi needed
    assert r.state == "failed"
    assert "try 2 asks for memory 3Gi" in r.output
    assert "try 3 asks for memory" not in r.output
    assert r.variable is None


def test_a_later_failure_of_a_grown_try_says_what_it_ran_with_and_keeps_the_size(ran: dict[str, Ran]) -> None:
    r = ran["mixed"]
    assert r.state == "success", r.output[-4000:]
    # Try 2 ran at 4Gi and failed with exit code 3; try 3 keeps 4Gi (only an OOM kill grows it).
    assert r.limits == [("2Gi", "1Gi"), ("4Gi", "2Gi"), ("4Gi", "2Gi")]
    said = "this try ran with memory 4Gi for container base: container base try 1 was OOMKilled at 2Gi"
    assert said in (r.reasons[1] if HAS_RETRY_POLICIES else r.output)
    assert r.variable is None


def test_growth_applies_on_top_of_a_pod_template(ran: dict[str, Ran]) -> None:
    r = ran["templated"]
    assert r.state == "success", r.output[-4000:]
    assert r.limits == [("2Gi", "1Gi"), ("4Gi", "2Gi")]
    assert r.variable is None
