"""The deployment tier: a real Airflow deployment in the shape users run
(``tests/support/deployment.py``: PostgreSQL, CeleryExecutor with a Redis broker and two Celery
workers, two schedulers, two triggerers and the api-server) against the simulator, started once
for this folder and always stopped. ``AIRFLOW_K8S_RETRY_DEPLOYMENT=local`` gives a lighter shape:
PostgreSQL with one scheduler running LocalExecutor (and the same two triggerers).

``airflow dags test`` runs triggers inline in one process; here a task defers through the
metadata database to a separate triggerer, its worker talks to the api-server's execution API,
and a scheduler resumes it, as in production. The DAGs in ``dags/`` are serialized once with
``airflow dags reserialize`` (what a dag-processor would do), so no dag-processor competes for the
two CPU cores. Results are read from the metadata database, the REST API and the simulator's
audit log.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_k8s_retry_testing import FakeCluster
from tests.support.deployment import Deployment, running_deployment

DAGS = Path(__file__).with_name("dags")
SCALE = 0.1  # real seconds per simulated second
SCENARIO: dict[str, Any] = {
    "time_scale": SCALE,
    "images": {
        "example.com/pool/job:1": {"run": {"duration_seconds": 150, "log": "done"}},
        "example.com/pool/broken:1": {"run": {"exit_code": 3, "duration_seconds": 80, "log": "boom"}},
        # Long enough that all three tasks of the one-slot pool are deferred at once even when each
        # launch waits seconds for the executor's one slot on a busy machine, whatever their order.
        "example.com/pool/slow-job:1": {"run": {"duration_seconds": 600, "log": "done"}},
        "example.com/pool/slow-broken:1": {"run": {"exit_code": 3, "duration_seconds": 200, "log": "boom"}},
        "registry.example.com/team/missing:1": {"pull": "not_found"},
        "example.com/long:1": {"run": {"duration_seconds": 3000}},
        # deployment_no_triggerer: the first try exits 3, the second succeeds.
        "example.com/sync/app:try1": {"run": {"exit_code": 3, "duration_seconds": 20, "log": "boom"}},
        "example.com/sync/app:try2": {"run": {"duration_seconds": 20, "log": "done"}},
        # deployment_retry_policy: the first try is OOM-killed, the second succeeds. Both pods
        # run 15 s: a verdict within a second or two of deferring can reach the resumed worker
        # before the scheduler has processed the executor's event for the deferring workload, and
        # Airflow 3.3's scheduler then fails the running resume itself ("finished with state
        # success, but the task instance's state attribute is running"; apache/airflow#72716).
        "example.com/policy/app:try1": {"run": {"oom": True, "duration_seconds": 150}},
        "example.com/policy/app:try2": {"run": {"duration_seconds": 150, "log": "done"}},
        # deployment_db_outage: ends 15 s into the database's 30 s outage.
        "example.com/outage/app:1": {"run": {"duration_seconds": 150, "log": "done"}},
        # deployment_capacity: six pods of 60 s for triggerers that run two triggers each (all six
        # tasks defer long before the first pod ends, however slowly they launch).
        "example.com/capacity/job:1": {"run": {"duration_seconds": 600, "log": "done"}},
        # deployment_scheduler_restart: runs until the test ends it, once no scheduler runs.
        "example.com/restart/app:1": {"run": {"duration_seconds": 1_000_000, "log": "done"}},
        # deployment_api_timeout: ends while the api-server is frozen.
        "example.com/api-timeout/app:1": {"run": {"duration_seconds": 100, "log": "done"}},
    },
}


#: Under ``make test`` the tier runs on two pytest-xdist workers (``--dist loadgroup``), each with
#: a deployment of its own: almost all of the tier's time is waiting on Airflow (heartbeats, the
#: scheduler's loop, the workers' start-ups), so two deployments side by side halve it for little
#: CPU. The files go to the two halves by their measured times (seconds, on an idle 2-core machine);
#: a file named nowhere fails the run, so none runs unbalanced by accident.
HALVES = {
    "test_with_kill9_chaos.py": "a",  # 257
    "test_a_database_outage.py": "a",  # 97
    "test_pools_that_count_deferred_tasks.py": "a",  # 35
    "test_triggerer_handover.py": "a",  # 34
    "test_deferrable_false_needs_no_triggerer.py": "a",  # 8
    "test_airflow_under_stress.py": "b",  # 204
    "test_user_kill_while_deferred.py": "b",  # 114
    "test_pool_slots_and_retries.py": "b",  # 67
    "test_retry_policy_under_the_scheduler.py": "b",  # 44
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.parent != Path(__file__).parent:
            continue
        half = HALVES.get(item.path.name)
        if half is None:
            raise pytest.UsageError(f"{item.path.name}: add it to HALVES in {__file__} (the xdist halves)")
        item.add_marker(pytest.mark.xdist_group(f"deployment-{half}"))


#: The deployments' Celery settings: Airflow's own, and Celery's ``imports``, the module every DAG
#: here imports. Each Celery worker imports it once as it starts, and each task's process, forked
#: from the worker, finds it loaded instead of importing it again as it parses its DAG file (about
#: 1 s of CPU per task run on these 2 cores; the tier runs well over a hundred). Airflow puts
#: ``$AIRFLOW_HOME/config`` on ``sys.path`` for modules like this one.
CELERY_CONFIG = """
from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG

CELERY_CONFIG = {**DEFAULT_CELERY_CONFIG, "imports": ("airflow_k8s_retry.operators",)}
"""


@pytest.fixture(scope="package")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    root = Path(tmp_path_factory.mktemp("deployment"))
    config = root / "home" / "config"
    config.mkdir(parents=True)
    (config / "celery_preload.py").write_text(CELERY_CONFIG)
    settings = {"AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS": "celery_preload.CELERY_CONFIG"}
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(FakeCluster(scenario=SCENARIO, audit=root / "audit.jsonl"))
        yield stack.enter_context(running_deployment(root, DAGS, cluster, settings=settings))
