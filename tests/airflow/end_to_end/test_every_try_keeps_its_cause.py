"""Every failed try keeps its cause after the next try starts, on every supported Airflow.

Airflow clears a task instance's XComs (the ``verdict`` among them) when its next try starts. The
cause of each earlier try is read from ``task_instance_history`` instead: its ``retry_reason`` on
Airflow 3.3+ (set by the package's retry policy), the verdict in the trigger event the try resumed
with on 3.1 and 3.2. ``explain --dag-id`` and the failures page read both through one loader
(``airflow_k8s_retry.plugins.tries``). ``make test-compat`` runs this on every minor.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_k8s_retry.compat import HAS_RETRY_POLICIES
from tests.support.scenarios import Run, Scenario, run_all
from tools.airflow_runner import AirflowHome, MigratedDatabase

SCENARIO = Scenario(
    "every_try_kept",
    """
    RetryingPodOperator(
        task_id="job",
        image="example.com/job:try{{ ti.try_number }}",
        retries=2,
        retry_delay=timedelta(seconds=1),
    )
    """,
    {
        "time_scale": 0.1,
        "images": {
            "example.com/job:try1": {"run": {"exit_code": 3, "duration_seconds": 1}},
            "example.com/job:try2": {"run": {"oom": True, "duration_seconds": 1}},
        },
    },
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, migrated_database: MigratedDatabase) -> Run:
    return run_all([SCENARIO], tmp_path_factory.mktemp("kept"), migrated_database)[SCENARIO.dag_id]


def test_a_task_that_failed_twice_and_succeeded_shows_both_failed_tries(run: Run) -> None:
    assert run.result.returncode == 0, run.result.output[-3000:]
    home = run.result.database.parent
    cli = str(Path(sys.executable).with_name("airflow-k8s-retry"))
    out = subprocess.run(
        [cli, "explain", "--dag-id", SCENARIO.dag_id, "--task-id", "job", "--json"],
        env=AirflowHome(home, home / "dags").env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    tries = json.loads(out.stdout)["tries"]
    assert [(t["try_number"], t["reason"]) for t in tries] == [
        (1, "container.exit_code"),
        (2, "container.oom"),
        (3, None),
    ]
    assert tries[2]["state"] == "success"
    assert "exit code 3" in tries[0]["message"]
    assert tries[1]["hint"]
    assert all(t["pod_name"] for t in tries[:2])


def test_the_cause_comes_from_airflows_own_try_record(run: Run) -> None:
    with sqlite3.connect(run.result.database) as db:
        columns = {r[1] for r in db.execute("pragma table_info(task_instance_history)")}
        assert ("retry_reason" in columns) == HAS_RETRY_POLICIES
        if HAS_RETRY_POLICIES:
            reasons = [
                r[0] for r in db.execute("select retry_reason from task_instance_history order by try_number")
            ]
            assert [r.split(":")[0] for r in reasons] == ["container.exit_code", "container.oom"]
        else:
            kwargs = [
                r[0] for r in db.execute("select next_kwargs from task_instance_history order by try_number")
            ]
            assert all(k and "container." in k for k in kwargs)
