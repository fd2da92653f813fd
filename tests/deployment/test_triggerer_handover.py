"""A deferred trigger moves to the other triggerer and resumes where it was: the pod survives the
``on_kill`` that Airflow 3.3.0-3.3.2 sends on hand-over, no second pod is created, the grace timer
keeps its first-seen time, and the task ends with one verdict.

The triggerer running the trigger is frozen (SIGSTOP) until its heartbeat goes stale, so the other
triggerer takes the trigger over; then it is thawed (SIGCONT), finds the trigger gone from its
assignments and cancels it through the same path as a user action, which calls ``on_kill``.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

import pytest

from airflow_k8s_retry.kube.naming import HISTORY_ANNOTATION, VERDICT_ANNOTATION
from tests.deployment.dags.deployment_handover import GRACE_SECONDS
from tools.deployment import HEALTH_THRESHOLD, Deployment

DAG_ID = "deployment_handover"
TASK_ID = "pull"
ON_KILL = "invoking on_kill"
KEPT = "kept: the task instance is still deferred"


def _logged_at(line: str) -> float:
    """When a log line was written: Airflow's JSON trigger logs and its console output both lead
    with an ISO timestamp."""
    stamp = json.loads(line)["timestamp"] if line.startswith("{") else line.split(maxsplit=1)[0]
    return datetime.fromisoformat(stamp).timestamp()


def _annotations(pod: dict[str, Any]) -> dict[str, str]:
    return dict(pod["metadata"].get("annotations") or {})


def test_trigger_moves_to_the_other_triggerer_and_keeps_pod_and_timer(deployment: Deployment) -> None:
    dep = deployment
    started = time.monotonic()
    run_id = dep.trigger_dag(DAG_ID)

    def stamped_history() -> dict[str, Any] | None:
        live = dep.live_pods(DAG_ID)
        raw = _annotations(live[0]).get(HISTORY_ANNOTATION) if live else None
        return json.loads(raw) if raw else None

    history = dep.wait(
        stamped_history,
        60,
        "the trigger to stamp its history on the pod",
        lambda: dep.task_states(DAG_ID, run_id),
    )
    first_seen = min(history["first_seen"].values())
    [pod] = dep.pods_of(DAG_ID)
    uid = pod["metadata"]["uid"]
    holder = dep.wait(
        lambda: dep.trigger_holder(DAG_ID, run_id, TASK_ID), 30, "a triggerer to hold the trigger"
    )
    other = next(name for name in dep.triggerer_jobs if name != holder)
    assert dep.task_states(DAG_ID, run_id)[TASK_ID] == (1, "deferred")

    # Freeze the holder well into the grace, so a timer restarted by the new trigger would show.
    time.sleep(max(0.0, first_seen + 8 - time.time()))
    frozen_at = time.time()
    dep.freeze(holder)
    try:
        dep.wait(
            lambda: dep.trigger_holder(DAG_ID, run_id, TASK_ID) == other,
            HEALTH_THRESHOLD + 20,
            f"{other} to take the trigger over",
            lambda: dep.trigger_holder(DAG_ID, run_id, TASK_ID),
        )
    finally:
        dep.thaw(holder)
    taken_over_at = time.time()

    # The thawed triggerer cancels its copy and calls on_kill; the guard sees a deferred task. Its
    # lines may land in the triggerer's own output (Deployment.lines_about): the guard's work
    # outlives the repeated cancellations that end on_kill, and the triggerer reads a trigger's log
    # lines and its state changes from two sockets. The state lookup (the triggerer's
    # first request to its in-process execution API, which it builds then) is bounded by the
    # trigger's state_lookup_timeout (25 s); a minute covers it.
    called = str(pod["metadata"]["name"])
    kept_line = f"Pod {called} {KEPT}"

    def about_this_run(triggerer: str) -> list[str]:
        return dep.lines_about(triggerer, DAG_ID, run_id, called)

    def kill_handled() -> bool:
        lines = about_this_run(holder)
        return any(ON_KILL in line for line in lines) and any(kept_line in line for line in lines)

    dep.wait(
        kill_handled,
        60,
        f"{holder} to call on_kill and keep the pod",
        lambda: "\n".join(about_this_run(holder)[-12:]),
    )
    # (That the pod outlived the kill is held below: its only delete comes after the verdict.)

    # The new trigger emits the verdict when the original grace runs out, not a fresh one: the time
    # of the trigger's own line as it emits (one line between the two triggerers).
    verdict_line = f"Pod default/{called}: retry (image.not_found)"

    def verdict_lines() -> list[str]:
        return [line for t in (holder, other) for line in about_this_run(t) if verdict_line in line]

    dep.wait(verdict_lines, GRACE_SECONDS + 30, "the verdict", lambda: dep.task_states(DAG_ID, run_id))
    [line] = verdict_lines()
    resumed_at = _logged_at(line)
    assert resumed_at >= first_seen + GRACE_SECONDS - 1, resumed_at - first_seen
    assert resumed_at < frozen_at + GRACE_SECONDS, (
        f"the verdict came {resumed_at - frozen_at:.1f} s after the freeze: the grace was restarted"
    )
    dep.wait(
        lambda: dep.dag_run_state(DAG_ID, run_id) in ("success", "failed"),
        60,
        "the DAG run to finish",
        lambda: dep.task_states(DAG_ID, run_id),
    )
    seconds = time.monotonic() - started

    assert dep.tries(DAG_ID, run_id, TASK_ID) == [(1, "failed")]
    [pod] = dep.pods_of(DAG_ID)  # still exactly one pod
    assert pod["metadata"]["uid"] == uid
    verdict = json.loads(_annotations(pod)[VERDICT_ANNOTATION])
    assert verdict["reason"] == "image.not_found"
    # The history the new trigger carried on with still starts at the first trigger's first sighting.
    kept = json.loads(_annotations(pod)[HISTORY_ANNOTATION])
    assert min(kept["first_seen"].values()) == pytest.approx(first_seen)
    deletes = dep.pod_requests("delete", DAG_ID)
    assert [(r["uid"], r["status"]) for r in deletes] == [(uid, 200)]
    assert min(r["t"] for r in deletes) > resumed_at - 1
    # Still one verdict between the two triggerers, and at most one event fired.
    assert len(verdict_lines()) == 1
    fired = [line for t in (holder, other) for line in about_this_run(t) if "Trigger fired event" in line]
    assert len(fired) <= 1, fired
    print(
        f"\nhand-over DAG run: {seconds:.1f} s; grace {GRACE_SECONDS} s from first seen, verdict after "
        f"{resumed_at - first_seen:.1f} s; taken over {taken_over_at - frozen_at:.1f} s after the freeze"
    )
