"""One failed try under real Airflow (``airflow dags test``) stays in few of the package's modules,
and the design page lists exactly those it runs code in.

The task's image exits 1 at once and it has no retry left: ``execute`` creates the pod and defers,
the trigger judges ``container.exit_code``, and the resumed worker reports, cleans up and raises.
``tests/support/trace_a_try.py`` records, by part of the try, every module of the package one of
whose functions ran.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest

from airflow_k8s_retry_testing import FakeCluster
from tests.support.paths import REPO
from tools.airflow_runner import AirflowHome, MigratedDatabase

#: The worker's side of a failed try (to the deferral, and from the resume to the raise) touches
#: at most this many of the package's modules.
WORKER_MODULES_AT_MOST = 10
DAG = """
from datetime import datetime

from airflow.sdk import DAG

from airflow_k8s_retry.operators import RetryingPodOperator

with DAG(dag_id="one_failed_try", schedule=None, start_date=datetime(2024, 1, 1)):
    RetryingPodOperator(task_id="load", image="example.com/etl:broken", retries=0)
"""
SCENARIO = {"time_scale": 0.1, "images": {"example.com/etl:broken": {"run": {"exit_code": 1, "log": "boom"}}}}
DESIGN = REPO / "docs" / "design.md"


@pytest.fixture(scope="module")
def traced(
    tmp_path_factory: pytest.TempPathFactory, migrated_database: MigratedDatabase
) -> dict[str, list[str]]:
    work = tmp_path_factory.mktemp("trace")
    dags = work / "dags"
    dags.mkdir()
    (dags / "one_failed_try.py").write_text(textwrap.dedent(DAG))
    home = AirflowHome.create(work / "home", dags_folder=dags, database=migrated_database)
    out = work / "trace.json"
    with FakeCluster(scenario=SCENARIO) as cluster:
        proc = subprocess.run(
            [sys.executable, str(REPO / "tests" / "support" / "trace_a_try.py"), str(out), "one_failed_try"],
            env=home.env(cluster.kubeconfig),
            cwd=home.home,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    assert "container.exit_code" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-4000:]
    return dict(json.loads(out.read_text()))


def listed_in_the_design_page(part: str) -> list[str]:
    """The modules ``docs/design.md`` lists for ``part`` (its "One failed try" section)."""
    section = DESIGN.read_text().split("## One failed try", 1)[1].split("\n## ", 1)[0]
    match = re.search(rf"^- {re.escape(part)} \((\d+) modules\): (.+)$", section, re.MULTILINE)
    assert match, f"docs/design.md: no line for {part!r} in its 'One failed try' section"
    names = [name.strip().strip("`") for name in match.group(2).rstrip(".").split(",")]
    assert int(match.group(1)) == len(names)
    return names


def test_the_workers_side_of_a_failed_try_stays_in_few_modules(traced: dict[str, list[str]]) -> None:
    worker = sorted(set(traced["execute"]) | set(traced["resume"]))
    assert len(worker) <= WORKER_MODULES_AT_MOST, worker


def test_the_design_page_lists_the_modules_each_part_runs(traced: dict[str, list[str]]) -> None:
    worker = sorted(set(traced["execute"]) | set(traced["resume"]))
    assert listed_in_the_design_page("the worker") == worker
    assert listed_in_the_design_page("the trigger") == traced["trigger"]
