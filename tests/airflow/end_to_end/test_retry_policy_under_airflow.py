"""Airflow 3.3's retry policies, under real Airflow (``airflow dags test``) against the simulator.

Each try's image is templated on ``ti.try_number``, so one task meets a different cause on each
try. What is checked is Airflow's own record: every failed try's ``task_instance_history`` row holds
its reason code as ``retry_reason`` and the policy's delay as ``retry_delay_override``, and the
scheduler's dependency check (which ``dags test`` runs) starts the next try no sooner than that
delay. A DAG author's ``ExceptionRetryPolicy`` written against the documented exception classes
fails an OOM at once and delays a rate limit by ten minutes; a policy that raises or answers
nonsense is logged and the package's defaults decide.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from airflow_k8s_retry.compat import HAS_RETRY_POLICIES
from airflow_k8s_retry_testing import FakeCluster
from tests.support.scenarios import DAG_HEADER, Run, Scenario, run_all
from tools.airflow_runner import AirflowHome, MigratedDatabase

pytestmark = [
    pytest.mark.skipif(not HAS_RETRY_POLICIES, reason="retry policies are Airflow 3.3+"),
]

FAST = 0.1  # real seconds per simulated second
HEADER = (
    DAG_HEADER
    + """
from airflow.sdk import ExceptionRetryPolicy, RetryAction, RetryDecision, RetryPolicy, RetryRule

from airflow_k8s_retry.retry_policy import Delay, PodFailureRetryPolicy

IMAGE = "example.com/{{ ti.task_id }}:try{{ ti.try_number }}"


class RaisingPolicy(RetryPolicy):
    def evaluate(self, exception, try_number, max_tries, context=None):
        raise RuntimeError("a bug in the DAG author's policy")


class NonsensePolicy(RetryPolicy):
    def evaluate(self, exception, try_number, max_tries, context=None):
        return "retry soon, please"
"""
)

#: The cases are independent tasks of one DAG (one Airflow start-up); each task's image is its own
#: (``IMAGE``: named by the task and the try).
SCENARIO = Scenario(
    "policy",
    """
    RetryingPodOperator(
        task_id="three_tries",
        image=IMAGE,
        retries=2,
        retry_delay=timedelta(0),
        failure_policy=FailurePolicy(grace={"image.rate_limited": 20}),
        retry_policy=PodFailureRetryPolicy(
            {"container.oom": timedelta(seconds=3), "image": Delay.fixed(6)}
        ),
    )
    RetryingPodOperator(
        task_id="defaults",
        image=IMAGE,
        retries=1,
        name="evicted",
        retry_delay=timedelta(hours=1),
        failure_policy=FailurePolicy(relaunch_budget=0),
    )
    for name, policy in (("raising", RaisingPolicy()), ("nonsense", NonsensePolicy())):
        RetryingPodOperator(
            task_id=name,
            name=name,
            image=IMAGE,
            retries=1,
            retry_delay=timedelta(seconds=1),
            retry_policy=policy,
        )
    """,
    {
        "time_scale": FAST,
        "images": {
            "example.com/three_tries:try1": {"run": {"oom": True, "duration_seconds": 1}},
            "example.com/three_tries:try2": {"pull": "rate_limited"},
            "example.com/defaults:try1": {"run": {"exit_code": 0, "duration_seconds": 600}},
            "example.com/raising:try1": {"run": {"exit_code": 3, "duration_seconds": 1}},
            "example.com/nonsense:try1": {"run": {"exit_code": 3, "duration_seconds": 1}},
        },
        "disruptions": [{"pod_name_prefix": "evicted", "after_seconds": 5, "kind": "evict"}],
    },
    header=HEADER,
)


@dataclass(frozen=True)
class HistoryRow:
    try_number: int
    state: str
    retry_reason: str | None
    retry_delay_override: float | None
    start: datetime
    end: datetime


def history(database: Path, dag_id: str, task_id: str) -> list[HistoryRow]:
    with sqlite3.connect(database) as db:
        rows = db.execute(
            "select try_number, state, retry_reason, retry_delay_override, start_date, end_date "
            "from task_instance_history where dag_id = ? and task_id = ? order by try_number",
            (dag_id, task_id),
        ).fetchall()
    return [HistoryRow(r[0], r[1], r[2], r[3], _time(r[4]), _time(r[5])) for r in rows]


def current(database: Path, dag_id: str, task_id: str) -> tuple[int, str, datetime | None]:
    with sqlite3.connect(database) as db:
        try_number, state, start = db.execute(
            "select try_number, state, start_date from task_instance where dag_id = ? and task_id = ?",
            (dag_id, task_id),
        ).fetchone()
    return try_number, state, _time(start) if start else None


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, migrated_database: MigratedDatabase) -> Run:
    return run_all([SCENARIO], tmp_path_factory.mktemp("policy"), migrated_database, timeout=480)["policy"]


def test_every_failed_try_keeps_its_reason_and_its_delay_in_airflows_history(run: Run) -> None:
    assert run.result.returncode == 0, run.result.output[-3000:]
    rows = history(run.result.database, "policy", "three_tries")
    assert [(r.try_number, r.state) for r in rows] == [(1, "failed"), (2, "failed")]
    assert rows[0].retry_reason is not None and rows[0].retry_reason.startswith("container.oom: ")
    assert rows[1].retry_reason is not None and rows[1].retry_reason.startswith("image.rate_limited: ")
    assert [r.retry_delay_override for r in rows] == [3.0, 6.0]
    try_number, state, start = current(run.result.database, "policy", "three_tries")
    assert (try_number, state) == (3, "success")
    # The scheduler's retry-period check held each next try back for the cause's delay.
    second_start = rows[1].start
    assert start is not None
    assert (second_start - rows[0].end).total_seconds() >= 3.0
    assert (start - rows[1].end).total_seconds() >= 6.0
    assert run.live_pods == []
    assert len(run.of_task("three_tries").created) == 3


def test_the_default_policy_retries_a_lost_pod_at_once_whatever_the_retry_delay(run: Run) -> None:
    assert run.result.returncode == 0, run.result.output[-3000:]
    (row,) = history(run.result.database, "policy", "defaults")
    assert row.retry_reason is not None and row.retry_reason.startswith("node.disruption: ")
    assert row.retry_delay_override == 0.0  # the task's own retry_delay is an hour
    assert current(run.result.database, "policy", "defaults")[:2] == (2, "success")


def test_a_policy_that_raises_or_answers_nonsense_is_logged_and_the_defaults_decide(run: Run) -> None:
    assert run.result.returncode == 0, run.result.output[-3000:]
    output = run.result.output
    assert "RaisingPolicy raised while evaluating the retry policy" in output
    assert "NonsensePolicy returned 'retry soon, please' instead of a RetryDecision" in output
    for task in ("raising", "nonsense"):
        (row,) = history(run.result.database, "policy", task)
        assert row.retry_reason is not None and row.retry_reason.startswith("container.exit_code: ")
        assert current(run.result.database, "policy", task)[:2] == (2, "success")


def test_explain_lists_every_try_of_a_task_with_its_cause(run: Run) -> None:
    home = run.result.database.parent
    env = AirflowHome(home, home / "dags").env()
    cli = str(Path(sys.executable).with_name("airflow-k8s-retry"))
    args = [cli, "explain", "--dag-id", "policy", "--task-id", "three_tries", "--json"]
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, check=True)
    tries = json.loads(out.stdout)["tries"]
    assert [(t["try_number"], t["state"], t["reason"]) for t in tries] == [
        (1, "failed", "container.oom"),
        (2, "failed", "image.rate_limited"),
        (3, "success", None),
    ]
    assert tries[0]["pod_name"] and tries[0]["pod_name"].startswith("policy-three-tries-")
    text = subprocess.run(args[:-1], env=env, capture_output=True, text=True, timeout=120, check=True)
    assert "try 1  failed         container.oom: " in text.stdout


AUTHOR_POLICY = Scenario(
    "policy_by_the_author",
    """
    AUTHOR = ExceptionRetryPolicy(
        rules=[
            RetryRule(exception="airflow_k8s_retry.exceptions.PodOOMKilled", action=RetryAction.FAIL),
            RetryRule(
                exception="airflow_k8s_retry.exceptions.ImagePullFailure",
                action=RetryAction.RETRY,
                retry_delay=timedelta(minutes=10),
            ),
        ]
    )
    RetryingPodOperator(task_id="oom", name="oom", image="example.com/oom", retries=3, retry_policy=AUTHOR)
    RetryingPodOperator(
        task_id="pull",
        name="pull",
        image="example.com/limited",
        retries=3,
        retry_policy=AUTHOR,
        failure_policy=FailurePolicy(grace={"image.rate_limited": 20}),
    )
    """,
    {
        "time_scale": FAST,
        "images": {
            "example.com/oom": {"run": {"oom": True, "duration_seconds": 1}},
            "example.com/limited": {"pull": "rate_limited"},
        },
    },
    header=HEADER,
)


def test_an_authors_exception_policy_fails_an_oom_at_once_and_delays_a_rate_limit(
    tmp_path: Path, migrated_database: MigratedDatabase
) -> None:
    scenario = AUTHOR_POLICY
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / f"{scenario.dag_id}.py").write_text(scenario.dag_file())
    home = AirflowHome.create(tmp_path / "home", dags_folder=dags, database=migrated_database)
    with FakeCluster(scenario=scenario.cluster) as cluster:
        proc = home.start_dag(scenario.dag_id, kubeconfig=cluster.kubeconfig)
        started, deadline = time.monotonic(), time.monotonic() + 240
        try:
            # The rate-limited task waits ten minutes for its next try: stop once it is up for retry
            # and the OOM task (which `dags test` may run before or after it) has ended its try.
            ended = ("failed", "success", "up_for_retry")
            while time.monotonic() < deadline and proc.poll() is None:
                pull, oom = (_state(home.database, scenario.dag_id, t) for t in ("pull", "oom"))
                if pull == "up_for_retry" and oom in ended:
                    break
                time.sleep(0.5)
            states = {t: _state(home.database, scenario.dag_id, t) for t in ("oom", "pull")}
        finally:
            proc.kill()
            output, _ = proc.communicate()
        assert states["pull"] == "up_for_retry", (states, output[-3000:], time.monotonic() - started)
        # The OOM failed on its first try, its three retries unspent.
        assert current(home.database, scenario.dag_id, "oom")[:2] == (1, "failed")
        assert history(home.database, scenario.dag_id, "oom") == []
        (row,) = history(home.database, scenario.dag_id, "pull")
        assert row.retry_delay_override == 600.0
        assert row.retry_reason is not None
        assert row.retry_reason.startswith("image.rate_limited: ")
        assert "(decided by ExceptionRetryPolicy: Matched rule for ImagePullFailure)" in row.retry_reason
        cluster.wait_for(lambda c: not c.pods(), timeout=30)


def _state(database: Path, dag_id: str, task_id: str) -> str | None:
    try:
        with sqlite3.connect(database, timeout=5) as db:
            row = db.execute(
                "select state from task_instance where dag_id = ? and task_id = ?", (dag_id, task_id)
            ).fetchone()
    except sqlite3.OperationalError:  # the table is being written; ask again
        return None
    return None if row is None else row[0]
