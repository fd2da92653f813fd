"""The deployment tier: a real Airflow deployment in the shape users run
(``tools/deployment.py``: PostgreSQL, CeleryExecutor with a Redis broker and two Celery
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
import json
import time
from collections.abc import Generator, Iterator
from datetime import datetime
from pathlib import Path

import pytest

from airflow_k8s_retry_testing import FakeCluster
from tests.deployment.scenario import SCENARIO
from tools.deployment import Deployment, running_deployment

DAGS = Path(__file__).with_name("dags")


#: Under ``make test`` the tier runs on two pytest-xdist workers (``--dist loadgroup``), each with
#: a deployment of its own: almost all of the tier's time is waiting on Airflow (heartbeats, the
#: scheduler's loop, the workers' start-ups), so two deployments side by side halve it for little
#: CPU. The files go to the two halves by their measured times (seconds, on an idle 2-core machine);
#: a file named nowhere fails the run, so none runs unbalanced by accident.
HALVES = {
    "test_with_kill9_chaos.py": "a",  # 257
    "test_a_database_outage.py": "a",  # 97
    "test_pools_that_count_deferred_tasks.py": "a",  # 35
    "test_triggerer_handover.py": "a",  # 49
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


#: Log levels a failed test's report shows from the task, trigger and process logs it touched.
_TELLING_LEVELS = ("warning", "error", "critical")
#: Words that make a process's log line telling whatever its level (the scheduler logs a try's
#: failure, a state mismatch with its executor and a heartbeat timeout at info).
_TELLING_WORDS = ("fail", "up_for_retry", "heartbeat", "externally", "state attribute", "orphan", "reset")
#: Lines that say nothing about a test: every request's access line, and warnings each process
#: prints at start-up.
_NOISE = ("[http.access]", "HMAC key", "visibility_timeout")


def _telling_lines(path: Path, since: float, limit: int = 40) -> list[str]:
    """The telling lines of one log (a task's JSON lines, or a process's text lines that start with
    a timestamp and ``[level]``) written since ``since``: warnings and worse, and lines on failures."""
    if not path.is_file() or path.stat().st_mtime < since:
        return []
    lines = []
    for raw in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(raw)
        except ValueError:
            record = None
        if isinstance(record, dict):
            stamp, level = str(record.get("timestamp", "")), str(record.get("level", ""))
            text = str(record.get("event"))
        else:
            stamp, _, rest = raw.partition(" ")
            level, text = rest[1 : rest.find("]")].strip() if rest.startswith("[") else "", raw
        try:
            when = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        except ValueError:
            continue  # a continuation line or a banner
        if when < since or any(noise in raw for noise in _NOISE):
            continue
        if level.lower() in _TELLING_LEVELS or any(word in text.lower() for word in _TELLING_WORDS):
            lines.append(f"{stamp} {level}: {text}"[:600] if record is not None else raw[:600])
    return lines[-limit:]


#: When a test's call began (its logs are read from then on).
_STARTED = pytest.StashKey[float]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    item.stash[_STARTED] = time.time()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test's report carries what Airflow said while it ran: the warnings and errors of
    every task and trigger log, and of each process's own log, written since the test started (a
    try that failed says why; a run on another machine leaves nothing else to read)."""
    report: pytest.TestReport = yield
    dep = getattr(item, "funcargs", {}).get("deployment")
    since = item.stash.get(_STARTED, None)
    if report.when != "call" or not report.failed or not isinstance(dep, Deployment) or since is None:
        return report
    sections = []
    logs = dep.home.home / "logs"
    for path in sorted(logs.rglob("attempt=*.log*")) if logs.exists() else []:
        if lines := _telling_lines(path, since):
            sections.append(f"-- {path.relative_to(logs)}\n" + "\n".join(lines))
    for name in sorted(dep.procs):
        if lines := _telling_lines(dep.log_path(name), since, limit=25):
            sections.append(f"-- {name}.log\n" + "\n".join(lines))
    if sections:
        report.sections.append(("Airflow's warnings and errors during the test", "\n".join(sections)))
    return report
