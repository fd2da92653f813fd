"""Run one DAG per scenario under ``airflow dags test`` against its own simulator, in parallel.

Each scenario is a DAG file (written to its own dags folder), a simulator scenario, and what the
tests assert afterwards. A run records the metadata database's tries, the simulator's audit log
(pods created and deleted, with their labels), Airflow's output, and the pods still alive after the
run settles.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_k8s_retry_testing import FakeCluster
from tools.airflow_runner import AirflowHome, DagRunResult, MigratedDatabase

DAG_HEADER = """
from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_k8s_retry.classification.policy import FailurePolicy
from airflow_k8s_retry.operators import RetryingPodOperator
"""


@dataclass(frozen=True)
class Scenario:
    dag_id: str
    body: str  # the DAG's tasks, inside ``with DAG(...)``
    cluster: dict[str, Any]
    header: str = DAG_HEADER

    def dag_file(self) -> str:
        return (
            textwrap.dedent(self.header)
            + f"\nwith DAG(dag_id={self.dag_id!r}, schedule=None, start_date=datetime(2024, 1, 1)):\n"
            + textwrap.indent(textwrap.dedent(self.body).strip() + "\n", "    ")
        )


@dataclass
class Run:
    scenario: Scenario
    result: DagRunResult
    audit: list[dict[str, Any]]
    live_pods: list[str]
    all_pods: list[dict[str, Any]] = field(default_factory=list)

    def requests(self, verb: str, status: int | None = None) -> list[dict[str, Any]]:
        return [
            r
            for r in self.audit
            if r.get("kind") == "request"
            and r.get("verb") == verb
            and r.get("resource") == "pods"
            and (status is None or r.get("status") == status)
        ]

    @property
    def created(self) -> list[dict[str, Any]]:
        """Pods created, in order, from the simulator's lifecycle records (name, uid and labels)."""
        pods = [r for r in self.audit if r.get("kind") == "lifecycle" and r.get("change") == "created"]
        assert len(pods) == len(self.requests("create", 201))
        return pods

    @property
    def deleted_names(self) -> list[str]:
        return [r["name"] for r in self.requests("delete", 200)]

    def of_task(self, task_id: str) -> Run:
        """This run as one task's: the audit records, live pods and pods of the pods it created only
        (by name, or by UID for a create) (a scenario's DAG may hold several independent tasks; the
        output and the database stay whole)."""
        created = [r for r in self.created if (r.get("labels") or {}).get("task_id") == task_id]
        names, uids = {r["name"] for r in created}, {r["uid"] for r in created}
        return Run(
            scenario=self.scenario,
            result=self.result,
            audit=[r for r in self.audit if r.get("name") in names or r.get("uid") in uids],
            live_pods=[n for n in self.live_pods if n in names],
            all_pods=[p for p in self.all_pods if p["metadata"]["name"] in names],
        )


def run_scenario(scenario: Scenario, root: Path, database: MigratedDatabase, timeout: float) -> Run:
    work = root / scenario.dag_id
    dags = work / "dags"
    dags.mkdir(parents=True)
    (dags / f"{scenario.dag_id}.py").write_text(scenario.dag_file())
    home = AirflowHome.create(work / "home", dags_folder=dags, database=database)
    with FakeCluster(scenario=scenario.cluster, audit=work / "audit.jsonl") as cluster:
        result = home.run_dag(scenario.dag_id, kubeconfig=cluster.kubeconfig, timeout=timeout)
        (work / "airflow-output.log").write_text(result.output)
        # Deletion is graceful: let terminating pods go before counting what is left.
        cluster.wait_for(
            lambda c: not any(p["metadata"].get("deletionTimestamp") for p in c.pods()), timeout=10
        )
        return Run(
            scenario=scenario,
            result=result,
            audit=cluster.audit_records(),
            live_pods=[p["metadata"]["name"] for p in cluster.pods()],
            all_pods=cluster.all_pods(),
        )


def run_all(
    scenarios: Iterable[Scenario],
    root: Path,
    database: MigratedDatabase,
    *,
    parallel: int = 3,
    timeout: float = 240,
) -> dict[str, Run]:
    """Run every scenario, ``parallel`` at a time (each run is mostly waiting on graces and pods)."""
    items = list(scenarios)
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        futures = {s.dag_id: pool.submit(run_scenario, s, root, database, timeout) for s in items}
        return {dag_id: future.result() for dag_id, future in futures.items()}
