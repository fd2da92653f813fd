"""``known.diagnose`` places what a run shows; what it cannot place stays ``unexplained``."""

from __future__ import annotations

from tests.chaos.harness import Result, Violation
from tests.chaos.known import diagnose

PLAN_130 = "fate=disruption_delete retries=2 on_finish=delete_pod stops_in=5s triggerer=stale@+51s"
WRONG_END = Violation("wrong_end", "fate disruption_delete should end failed, ended success")
LATE = "the simulator ran up to 353 sim s late (a loaded machine)"
MISSED = "the drawn disruption never reached try 2's pod"


def result(*notes: str) -> Result:
    return Result(130, PLAN_130, "success", 2, 2.4, 2360.6, [WRONG_END], notes=list(notes))


def test_a_disruption_that_never_came_in_a_starved_run_is_the_machine() -> None:
    # Seed 130 in a full run: try 2's pod finished before the late harness loop disrupted it.
    assert diagnose(WRONG_END, result(LATE, MISSED)) == "starved_run"


def test_a_wrong_end_is_not_excused_without_both_signs() -> None:
    assert diagnose(WRONG_END, result(MISSED)) == "unexplained"  # not starved: look at it
    assert diagnose(WRONG_END, result(LATE)) == "unexplained"  # every try was disrupted


def test_a_kill_before_the_triggers_first_turn_is_told_apart_from_a_failed_on_kill() -> None:
    # A kill -9 hand-over at +17 s, the user's action at +18 s, before triggerer B had run the
    # trigger: Airflow runs no on_kill. A deleted DAG run also calls no listener, so no package
    # code could delete the pod; a task marked failed has the api-server's listener (seed 107).
    plan = "fate=run_ok retries=0 on_finish=delete_pod triggerer=kill9@+17s user=delete_run@+18s"
    leaked = Violation("leaked_pod", "pod chaos-task107-t1 (uid 1, Running) left behind, not stamped")
    killed = "trigger 1: user delete_run while deferred"
    unstarted = "trigger 1: the kill came before its first turn on triggerer B (Airflow runs no on_kill then)"
    run = Result(107, plan, "failed", 1, 0.4, 20.0, [leaked], notes=[killed, unstarted])
    assert diagnose(leaked, run) == "killed_before_first_turn"
    run.notes = [killed]
    assert diagnose(leaked, run) == "deleted_run_keeps_pod"
    run.plan = plan.replace("user=delete_run", "user=mark_failed")
    run.notes = [killed.replace("delete_run", "mark_failed"), unstarted]
    assert diagnose(leaked, run) == "kill_listener_failed"
    run.notes = run.notes[:1]
    assert diagnose(leaked, run) == "on_kill_delete_failed"
