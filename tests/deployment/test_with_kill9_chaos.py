"""``kill -9`` in a real deployment: a triggerer holding 50 deferred tasks, and a worker between
create and defer. Afterwards: no pod left behind, no second pod for any try, every task judged.

The triggerer is killed with SIGKILL (no ``on_kill``, no cleanup); the other one adopts its
triggers once its heartbeat is stale and resumes them from their kwargs. The worker is the task
runner process (``airflow worker -- <ti id>``), killed while its pod create is in flight: the
simulator holds the create for a few seconds and then stores the pod, so the create lands after
the process is gone, as when a worker dies right after sending it. Airflow fails that try, and the
next try must find and delete the orphan before its own pod runs. On the last try the whole worker
dies (the task process and its supervisor): the scheduler fails the try once its heartbeat stops,
and the DAG processor runs the task's failure callbacks, the operator's own one deleting the pod.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from tests.deployment.dags.deployment_chaos import CRASH_IMAGE, TASKS, THROTTLED_IMAGE
from tools.deployment import HEALTH_THRESHOLD, TI_HEARTBEAT_TIMEOUT, Deployment

DEFERRED_DAG = "deployment_chaos_deferred"
CRASH_DAG = "deployment_chaos_worker_crash"


def _deferred(dep: Deployment, run_id: str) -> int:
    return sum(1 for _, state in dep.task_states(DEFERRED_DAG, run_id).values() if state == "deferred")


def _holders(dep: Deployment, run_id: str) -> dict[str | None, int]:
    rows = dep.query(
        "select t.triggerer_id from task_instance ti join trigger t on t.id = ti.trigger_id "
        "where ti.dag_id = ? and ti.run_id = ?",
        DEFERRED_DAG,
        run_id,
    )
    names = {job: name for name, job in dep.triggerer_jobs.items()}
    out: dict[str | None, int] = {}
    for (job,) in rows:
        out[names.get(job)] = out.get(names.get(job), 0) + 1
    return out


def _assert_clean(dep: Deployment, dag_id: str) -> list[dict[str, Any]]:
    pods = dep.pods_of(dag_id)
    per_try: dict[tuple[str, str, str], int] = {}
    for pod in pods:
        labels = pod["metadata"]["labels"]
        key = (labels["task_id"], labels["try_number"], labels.get("airflow-k8s-retry.io/relaunch", "0"))
        per_try[key] = per_try.get(key, 0) + 1
    duplicates = {k: n for k, n in per_try.items() if n > 1}
    leaked = [p["metadata"]["name"] for p in dep.live_pods(dag_id)]
    assert duplicates == {}, f"duplicate pods: {duplicates}"
    assert leaked == [], f"pods left behind: {leaked}"
    return pods


def test_kill9_of_a_triggerer_holding_50_deferred_tasks(deployment: Deployment) -> None:
    dep = deployment
    started = time.monotonic()
    dep.cluster.set_image(THROTTLED_IMAGE, {"pull": "rate_limited"})
    run_id = dep.trigger_dag(DEFERRED_DAG)
    dep.wait(
        lambda: _deferred(dep, run_id) == TASKS and None not in _holders(dep, run_id),
        900,
        f"all {TASKS} tasks deferred and held by a triggerer",
        lambda: (_deferred(dep, run_id), _holders(dep, run_id)),
    )
    deferred_after = time.monotonic() - started
    holders = _holders(dep, run_id)
    victim = max(holders, key=lambda name: holders[name])
    assert victim is not None
    survivor = next(name for name in dep.triggerer_jobs if name != victim)
    dep.signal(victim, signal.SIGKILL)
    dep.procs[victim].wait(30)
    killed_at = time.monotonic()
    try:
        dep.wait(
            lambda: _holders(dep, run_id) == {survivor: TASKS},
            HEALTH_THRESHOLD + 120,
            f"{survivor} to take over all {TASKS} triggers",
            lambda: _holders(dep, run_id),
        )
        taken_over = time.monotonic() - killed_at
        assert _deferred(dep, run_id) == TASKS
        assert len(dep.pods_of(DEFERRED_DAG)) == TASKS  # the hand-over created no pod

        # The registry recovers: every pod pulls, runs and succeeds.
        dep.cluster.set_image(THROTTLED_IMAGE, {"run": {"duration_seconds": 2, "log": "done"}})
        dep.wait(
            lambda: dep.dag_run_state(DEFERRED_DAG, run_id) in ("success", "failed"),
            900,
            "the DAG run to finish",
            lambda: dep.task_states(DEFERRED_DAG, run_id),
        )
    finally:
        # Bring the deployment back to two triggerers for the tests after this one.
        del dep.triggerer_jobs[victim]
        dep.start_triggerer(victim)
    states = dep.task_states(DEFERRED_DAG, run_id)
    assert states == {f"job{i:02d}": (1, "success") for i in range(TASKS)}, states
    dep.wait(
        lambda: not dep.live_pods(DEFERRED_DAG),
        60,
        "the pods to be gone",
        lambda: dep.live_pods(DEFERRED_DAG),
    )
    pods = _assert_clean(dep, DEFERRED_DAG)
    assert len(pods) == TASKS
    creates = [r for r in dep.pod_requests("create", DEFERRED_DAG) if r["status"] == 201]
    assert len(creates) == TASKS
    print(
        f"\n{TASKS} tasks deferred in {deferred_after:.0f} s; {survivor} took over {TASKS} triggers "
        f"{taken_over:.1f} s after the kill -9; run finished after {time.monotonic() - started:.0f} s"
    )


def _worker_pid(dep: Deployment, run_id: str, dag_id: str) -> int | None:
    rows = dep.query(
        "select id from task_instance where dag_id = ? and run_id = ? and task_id = 'crash'",
        dag_id,
        run_id,
    )
    if not rows:
        return None
    ti_id = str(uuid.UUID(str(rows[0][0])))  # the database keeps it without dashes
    listing = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, check=True).stdout
    for line in listing.splitlines():
        pid, _, args = line.strip().partition(" ")
        if f"airflow worker -- {ti_id}" in args:
            return int(pid)
    return None


def _parent_of(pid: int) -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[1])
    return None


def _kill_worker_mid_create(dep: Deployment, dag_id: str, *, whole_worker: bool = False) -> str:
    """Start ``dag_id`` and kill its worker while its pod create is in flight; returns the run id.

    ``whole_worker`` kills the task process's supervisor too (the executor's worker process that
    heartbeats for it), as when the worker's node or container is lost: nothing reports the try.
    """
    dep.cluster.set_image(CRASH_IMAGE, {"run": {"duration_seconds": 300, "log": "done"}})
    creates_before = dep.cluster.request_counts()[("create", "pods")]
    # The first pod create is held 6 s before it is stored: the worker dies while waiting for it.
    dep.cluster.add_fault(verb="create", resource="pods", status="slow", times=1, delay_seconds=6.0)
    run_id = dep.trigger_dag(dag_id)
    pid = dep.wait(lambda: _worker_pid(dep, run_id, dag_id), 120, "the task's worker process")
    dep.wait(
        lambda: dep.cluster.request_counts()[("create", "pods")] > creates_before or None,
        60,
        "the worker's pod create to reach the API server",
    )
    victims = [pid]
    supervisor = _parent_of(pid) if whole_worker else None
    if supervisor is not None and supervisor > 1:
        victims.insert(0, supervisor)
    for victim in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)
    return run_id


def test_kill9_of_a_worker_between_create_and_defer(deployment: Deployment) -> None:
    dep = deployment
    run_id = _kill_worker_mid_create(dep, CRASH_DAG)
    dep.wait(
        lambda: dep.dag_run_state(CRASH_DAG, run_id) in ("success", "failed"),
        240,
        "the DAG run to finish",
        lambda: (dep.task_states(CRASH_DAG, run_id), [p["metadata"]["name"] for p in dep.pods_of(CRASH_DAG)]),
    )
    tries = dep.tries(CRASH_DAG, run_id, "crash")
    dep.wait(
        lambda: not dep.live_pods(CRASH_DAG), 60, "the pods to be gone", lambda: dep.live_pods(CRASH_DAG)
    )
    pods = _assert_clean(dep, CRASH_DAG)
    assert tries == [(1, "failed"), (2, "success")], tries
    assert sorted(p["metadata"]["labels"]["try_number"] for p in pods) == ["1", "2"]


def test_kill9_of_a_worker_between_create_and_defer_on_the_last_try(deployment: Deployment) -> None:
    """No later try sweeps the orphan and no trigger ever ran: Airflow's own path cleans up. The
    scheduler fails the try (at once when Celery reports the lost worker process, after the
    heartbeat timeout under LocalExecutor) and sends a TaskCallbackRequest; the DAG processor runs
    the task's ``on_failure_callback``, the operator's own one deletes the pod, the held create
    included when it lands after the callback's first look."""
    dep = deployment
    dag_id = f"{CRASH_DAG}_last_try"
    dep.start("dag-processor", "dag-processor")  # only this test needs one: it runs the callbacks
    try:
        run_id = _kill_worker_mid_create(dep, dag_id, whole_worker=True)
        dep.wait(
            lambda: dep.dag_run_state(dag_id, run_id) == "failed",
            TI_HEARTBEAT_TIMEOUT + 300,
            "the scheduler to fail the try without a heartbeat",
            lambda: dep.task_states(dag_id, run_id),
        )
        assert dep.tries(dag_id, run_id, "crash") == [(1, "failed")]
        dep.wait(lambda: dep.pods_of(dag_id), 30, "the held create to land")
        dep.wait(
            lambda: not dep.live_pods(dag_id),
            300,
            "the DAG processor's failure callback to delete the orphaned pod",
            lambda: [p["metadata"]["name"] for p in dep.live_pods(dag_id)],
        )
    finally:
        dep.signal("dag-processor", signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            dep.procs["dag-processor"].wait(30)
    _assert_clean(dep, dag_id)
    deletes = [r for r in dep.pod_requests("delete", dag_id) if r["status"] == 200]
    assert len(deletes) == 1, deletes
