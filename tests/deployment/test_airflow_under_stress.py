"""Airflow itself under stress, with the package's tasks in flight: triggerers at their
``[triggerer] capacity``, and every scheduler stopped while a pod ends. Each leaves no pod behind,
no second pod for a try, and no task hanging."""

from __future__ import annotations

import time

from tests.deployment.dags.deployment_capacity import TASKS
from tests.deployment.scenario import SCALE
from tools.deployment import SCHEDULERS, TRIGGERERS, Deployment

CAPACITY = 2


def _one_pod_per_task_and_none_left(dep: Deployment, dag_id: str, tasks: int) -> None:
    pods = dep.pods_of(dag_id)
    per_task = sorted(p["metadata"]["labels"]["task_id"] for p in pods)
    assert len(per_task) == tasks and len(set(per_task)) == tasks, per_task
    dep.wait(lambda: not dep.live_pods(dag_id), 30, "every pod to be deleted", lambda: dep.live_pods(dag_id))


def test_triggerers_at_capacity_run_every_trigger_in_turn(deployment: Deployment) -> None:
    dep = deployment
    dag_id = "deployment_capacity"
    dep.stop(*TRIGGERERS)
    try:
        for name in TRIGGERERS:
            dep.start_triggerer(name, {"AIRFLOW__TRIGGERER__CAPACITY": str(CAPACITY)})
        run_id = dep.trigger_dag(dag_id)
        most_assigned = most_waiting = 0

        def ended() -> bool:
            nonlocal most_assigned, most_waiting
            rows = dep.query(
                "select t.triggerer_id from task_instance ti join trigger t on t.id = ti.trigger_id "
                "where ti.dag_id = ? and ti.run_id = ? and ti.state = 'deferred'",
                dag_id,
                run_id,
            )
            per_triggerer: dict[int, int] = {}
            for (job,) in rows:
                if job is not None:
                    per_triggerer[job] = per_triggerer.get(job, 0) + 1
            most_assigned = max([most_assigned, *per_triggerer.values()])
            if sum(per_triggerer.values()) == CAPACITY * len(TRIGGERERS):  # both full: the rest wait
                most_waiting = max(most_waiting, sum(1 for (job,) in rows if job is None))
            return dep.dag_run_state(dag_id, run_id) in ("success", "failed")

        dep.wait(ended, 300, "every task to end", lambda: dep.task_states(dag_id, run_id))
        states = dep.task_states(dag_id, run_id)
        assert states == {f"job_{n}": (1, "success") for n in range(TASKS)}, states
        assert most_assigned == CAPACITY  # no triggerer ran more than its capacity...
        assert most_waiting >= 1  # ...while deferred tasks waited for a free place
        _one_pod_per_task_and_none_left(dep, dag_id, TASKS)
    finally:
        dep.stop(*TRIGGERERS)
        for name in TRIGGERERS:
            dep.start_triggerer(name)


def test_a_pod_that_ends_while_every_scheduler_is_down_is_judged_once_they_return(
    deployment: Deployment,
) -> None:
    dep = deployment
    dag_id, task_id = "deployment_scheduler_restart", "app"
    run_id = dep.trigger_dag(dag_id)
    dep.wait_deferred(dag_id, run_id, task_id)
    [pod] = dep.pods_of(dag_id)
    dep.stop(*SCHEDULERS)
    try:
        # The pod ends (the test ends it: a scripted end could come before the schedulers are
        # down on a loaded machine) and its trigger fires with no scheduler to resume the task: it
        # stays scheduled, and the pod waits for the worker that will judge it.
        name, namespace = pod["metadata"]["name"], pod["metadata"]["namespace"]
        dep.wait(
            lambda: ((dep.cluster.pod(name, namespace) or {}).get("status") or {}).get("phase") == "Running",
            60,
            "the pod to run",
            lambda: dep.cluster.pod(name, namespace),
        )
        dep.cluster.exit_container(name, 0, namespace=namespace)
        dep.wait(
            lambda: dep.task_states(dag_id, run_id)[task_id][1] == "scheduled",
            60,
            "the trigger to fire",
            lambda: dep.task_states(dag_id, run_id),
        )
        time.sleep(5)
        assert [p["metadata"]["uid"] for p in dep.live_pods(dag_id)] == [pod["metadata"]["uid"]]
    finally:
        for name in SCHEDULERS:
            dep.start(name, "scheduler")
    dep.wait(
        lambda: dep.dag_run_state(dag_id, run_id) in ("success", "failed"),
        120,
        "the run to end once the schedulers are back",
        lambda: dep.task_states(dag_id, run_id),
    )
    assert dep.tries(dag_id, run_id, task_id) == [(1, "success")]
    _one_pod_per_task_and_none_left(dep, dag_id, 1)


def test_an_execution_api_that_answers_nothing_costs_the_try_and_the_next_try_cleans_up(
    deployment: Deployment,
) -> None:
    """The api-server is frozen (SIGSTOP: it accepts connections and answers nothing) from before
    the pod ends until the resumed try has spent the worker's whole execution-API retry budget (5 s
    timeouts, with back-off between them) without starting: Airflow fails that try and schedules
    the next. Once the api-server answers again, the next try sweeps the pod the lost resume never
    judged, runs its own and succeeds: no hang, one pod per try, none left behind."""
    dep = deployment
    dag_id, task_id = "deployment_api_timeout", "app"
    run_id = dep.trigger_dag(dag_id)
    dep.wait_deferred(dag_id, run_id, task_id)
    [first] = dep.pods_of(dag_id)
    dep.freeze("api-server")
    try:
        dep.wait(
            lambda: dep.task_states(dag_id, run_id)[task_id][1] == "up_for_retry",
            100 * SCALE + 180,
            "the resumed try to fail on the execution API",
            lambda: dep.task_states(dag_id, run_id),
        )
        # The pod ended; no worker could judge it, so it is still there.
        assert [p["metadata"]["uid"] for p in dep.live_pods(dag_id)] == [first["metadata"]["uid"]]
    finally:
        dep.thaw("api-server")
    dep.wait(
        lambda: dep.dag_run_state(dag_id, run_id) in ("success", "failed"),
        240,
        "the run to end once the api-server answers",
        lambda: dep.task_states(dag_id, run_id),
    )
    assert dep.dag_run_state(dag_id, run_id) == "success", dep.tries(dag_id, run_id, task_id)
    # Try 2 ran and succeeded. (Airflow 3.3 writes no task_instance_history row for a try that the
    # executor failed before it started, so try 1 shows only in the try number and in its pod.)
    assert dep.task_states(dag_id, run_id)[task_id] == (2, "success")
    pods = dep.pods_of(dag_id)
    assert [p["metadata"]["labels"]["try_number"] for p in pods] == ["1", "2"], pods
    assert pods[0]["metadata"]["uid"] == first["metadata"]["uid"]
    dep.wait(lambda: not dep.live_pods(dag_id), 30, "every pod to be deleted", lambda: dep.live_pods(dag_id))
    dep.wait_healthy("the deployment to report healthy again")
