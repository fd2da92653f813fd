"""What a violation shows: its likely cause, named after the item of the reliability review it maps to.

``diagnose`` reads a violation together with the run's plan and notes. It never hides anything:
a violation it cannot place is reported as ``unexplained``.
"""

from __future__ import annotations

from typing import Any

#: cause -> (review item, what it is)
CAUSES: dict[str, tuple[str, str]] = {
    "stamped_pod_not_deleted": (
        "#1",
        "a stamped pod whose DELETE (or the XCom push before it) failed is never deleted",
    ),
    "earlier_try_still_running": (
        "#1",
        "the next try started beside a stamped, undeleted pod of the try before",
    ),
    "verdict_to_delete_crash": (
        "#1 (and #6 on the last try)",
        "the worker died between the verdict and the delete on the last try: nothing deletes the pod",
    ),
    "create_to_defer_leak": (
        "#6",
        "the pod outlives a failure between create and defer (lost create answer, crash, error), or a "
        "leak the rules above do not place",
    ),
    "deleted_run_keeps_pod": ("#4", "a deleted DAG run leaves its pod (on_kill keeps it)"),
    "killed_before_first_turn": (
        "none (an Airflow limit, docs/reliability.md)",
        "a DAG run deleted before its trigger's first turn on a triggerer (a hand-over under way): "
        "Airflow runs no on_kill and calls no listener, so no package code runs; cleanup-pods is "
        "the fallback",
    ),
    "kill_listener_failed": (
        "new (the api-server's kill listener)",
        "a task marked failed before its trigger's first turn on a triggerer: the api-server's "
        "listener should have deleted its pod and did not",
    ),
    "on_kill_delete_failed": (
        "#1 in on_kill, R3-1",
        "a killed task's pod was left: on_kill found none to delete (its create was under way, and the "
        "code did not get to delete it before SIGKILL) or its read or delete failed past its retries",
    ),
    "refused_deferral_leak": (
        "new (a kill the worker hears of at its next heartbeat)",
        "a running task killed before its worker's supervisor heard of it deferred; the deferral "
        "was refused and the process ended with no on_kill, and the api-server's listener did not "
        "delete the try's pod",
    ),
    "handover_deletes_live_pod": (
        "#5",
        "a stale triggerer's on_kill deleted the pod after the other triggerer fired",
    ),
    "relaunch_overlap": ("#8", "a relaunch ran beside the disrupted pod of the same try"),
    "stale_recheck_hang": ("#3", "no verdict: the trigger never re-read a pod its watch lost"),
    "quota_403_permanent": ("#7", "a quota 403 at create failed the task permanently"),
    "disruption_judged_as_deletion": (
        "new (not in the review)",
        "a preempted/evicted pod seen only once gone is judged pod.deleted_externally: a try is spent",
    ),
    "starved_run": (
        "none (the test machine)",
        "no verdict within the bound, or a drawn disruption that never came, while the simulator "
        "itself ran late: a starved run, not a finding",
    ),
    "unexplained": ("?", "not yet placed; see the seed's replay"),
}


def _has(plan: str, *words: str) -> bool:
    return all(w in plan for w in words)


def diagnose(violation: Any, result: Any) -> str:
    kind = violation.kind
    detail = violation.detail
    plan = result.plan
    notes = " ".join(result.notes)
    if kind == "leaked_pod":
        if "before its first turn" in notes:
            return "killed_before_first_turn" if "user=delete_run" in plan else "kill_listener_failed"
        if "user=delete_run" in plan:
            return "deleted_run_keeps_pod"
        if ", stamped" in detail:
            return "stamped_pod_not_deleted"
        if "airflow=xcom_push_503" in plan:
            return "create_to_defer_leak"  # the XCom push after the create failed (#6)
        if "the deferral was refused" in notes:
            return "refused_deferral_leak"
        if "user=mark_failed" in plan or "worker=kill" in plan:
            return "on_kill_delete_failed"
        died = [n for n in result.notes if "worker died" in n]
        launching = ("POST", "pod_name", "pod_namespace", "defer")
        if died and not any(word in n for n in died for word in launching):
            return "verdict_to_delete_crash"
        return "create_to_defer_leak"
    if kind in ("two_pods_running",):
        return "earlier_try_still_running"
    if kind == "two_pods_running_in_one_try":
        return "relaunch_overlap"
    if kind == "hang":
        if "ran up to" in notes and "a loaded machine" in notes:
            return "starved_run"
        return "stale_recheck_hang"
    if kind == "deleted_under_the_worker":
        return "handover_deletes_live_pod"
    if kind == "wrong_end" and "disruption never reached" in notes and "a loaded machine" in notes:
        return "starved_run"  # the harness's loop ran late: the pod finished before its disruption
    if kind in ("wrong_end", "retries_skipped") and "exceeded quota" in notes + detail:
        return "quota_403_permanent"
    if (
        kind in ("wrong_verdict", "wrong_end")
        and "fate=disruption" in plan
        and "fate=disruption_delete" not in plan
        and ("pod.deleted_externally" in detail or "pod.deleted_externally" in " ".join(result.verdicts))
    ):
        return "disruption_judged_as_deletion"
    if kind in ("wrong_verdict", "no_verdict") and "triggerer=stale" in plan:
        return "handover_deletes_live_pod"
    return "unexplained"
