"""The example DAGs in dags/, run end to end as ``make demo`` runs them, do what their docstrings say.

Every DAG runs under real Airflow (``airflow dags test``, one DAG after another in one interpreter:
``AirflowHome.run_dags``) against one simulator with the demo's scenario, and the metadata
database, the pods' verdict stamps and the simulator's audit log are read back: how many tries
each task took and how it ended, how many pods each try cost, why each pod failed, and that
nothing is left running.
``make test-compat`` also runs this on each older supported Airflow minor; ``make test`` runs it on
the newest only (the Makefile's ``COMPAT_SCOPE`` says why).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from airflow_k8s_retry_testing import FakeCluster
from demo.run import DAGS, SCENARIO, Row, build_rows, print_table
from tests.support.example_dags import EXPECTED
from tools.airflow_runner import AirflowHome, DagRunResult, MigratedDatabase


@dataclass
class Outcome:
    results: dict[str, DagRunResult]
    rows: list[Row]
    deleted: set[str]
    live: list[str]
    pods: list[str]


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory, migrated_database: MigratedDatabase) -> Outcome:
    work = Path(tmp_path_factory.mktemp("examples"))
    dag_ids = sorted(p.stem for p in DAGS.glob("[0-9][0-9]_*.py"))
    with FakeCluster(scenario=SCENARIO, audit=work / "audit.jsonl") as cluster:
        home = AirflowHome.create(work / "home", dags_folder=DAGS, database=migrated_database)
        results = {r.dag_id: r for r in home.run_dags(dag_ids, kubeconfig=cluster.kubeconfig, timeout=900)}
        (work / "airflow-output.log").write_text("".join(r.output for r in results.values()))
        cluster.wait_for(
            lambda c: not any(p["metadata"].get("deletionTimestamp") for p in c.pods()), timeout=15
        )
        audit = cluster.audit_records()
        pods = cluster.all_pods()
        live = [p["metadata"]["name"] for p in cluster.pods()]
    deleted = {
        str(r["name"])
        for r in audit
        if r.get("kind") == "request"
        and r.get("verb") == "delete"
        and r.get("resource") == "pods"
        and r.get("status") == 200
    }
    rows = [row for dag_id in dag_ids for row in build_rows(results[dag_id], pods, deleted)]
    return Outcome(results, rows, deleted, live, [p["metadata"]["name"] for p in pods])


def test_every_example_dag_is_expected():
    assert sorted(EXPECTED) == sorted(p.stem for p in DAGS.glob("[0-9][0-9]_*.py"))


@pytest.mark.parametrize("dag_id", sorted(EXPECTED))
def test_the_example_dag_ends_as_its_docstring_says(outcome: Outcome, dag_id: str):
    expected = EXPECTED[dag_id]
    result = outcome.results[dag_id]
    assert result.dag_run_state() == expected.dag_run, result.output[-4000:]
    for task_id, (tries, final) in expected.tasks.items():
        numbers = [t.try_number for t in result.tries(task_id)]
        assert max(numbers) == tries, (task_id, numbers)
        assert result.final_state(task_id) == final, task_id
    mine = [r for r in outcome.rows if r.dag == dag_id and r.created]
    assert len(mine) == expected.pods, mine
    assert all(r.deleted for r in mine), "every pod the operator created is deleted"
    if expected.reasons:
        assert {r.reason for r in mine} == expected.reasons


def test_nothing_is_left_running_and_the_demo_table_prints(
    outcome: Outcome, capsys: pytest.CaptureFixture[str]
):
    assert outcome.live == []
    assert set(outcome.pods) == outcome.deleted
    print_table(outcome.rows)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["dag", "task", "try"]
    assert sum(1 for line in lines[2:] if line.strip()) == len(outcome.rows)


def test_the_queued_pod_waited_as_queued_and_its_log_says_what_held_it(outcome: Outcome):
    """08: the gate held the pod past schedule_timeout (20 s) until the scenario admitted it (45 s):
    the try waited as queued, and its log named the gate once (the first note, after 30 s); the
    simulator serves no Kueue, so the note says nothing of a Workload."""
    output = outcome.results["08_queued_pod"].output
    notes = [line for line in output.splitlines() if "schedule.gated: held by scheduling gate" in line]
    assert len(notes) == 1, output[-4000:]
    assert "kueue.x-k8s.io/admission" in notes[0] and "Kueue Workload" not in notes[0]
    assert "schedule.timeout" not in output
