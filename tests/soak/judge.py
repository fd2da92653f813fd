"""The soak's invariants, judged from kube-apiserver's own audit log and Airflow's metadata database.

Pure: the audit events (the API server's JSON lines), the tries as the database holds them and the
pods left at the end go in, violations come out; ``tests/unit/soak`` feeds it hand-made evidence
that breaks each invariant.

| invariant | what breaks it |
|---|---|
| ``duplicate_pod`` | a second pod created for one try and relaunch |
| ``two_live_pods`` | a pod of a task created while another of its pods ran (not ended, deleted or evicted) |
| ``leaked_pod`` | a pod of the soak left at the end, not being deleted |
| ``two_verdicts`` | a pod stamped with two different verdicts |
| ``not_terminal`` | a task not ended when the soak's time was up |
| ``retries_overspent`` | more tries than ``retries + 1`` |
| ``retries_skipped`` | failed with retries left, for a cause that is not permanent and no user's kill |
| ``wrong_end`` | succeeded though its fate can only fail |
| ``past_deadline`` | a try's pod still running (not ended, deleted or evicted) past the try's
  ``execution_timeout`` and a margin, counted from the try's start in the database; how long
  Airflow then takes to resume the task (its queue) is Airflow's, not this package's |
"""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_k8s_retry.kube.naming import RELAUNCH_LABEL, read_stamp
from tests.soak.plan import PERMANENT, Plan

#: Fates that can never end in success, however the chaos goes.
NEVER_SUCCEED = frozenset(
    {
        "exit_code",
        "oom",
        "pull_not_found",
        "pull_invalid_name",
        "missing_secret",
        "unschedulable",
        "execution_timeout",
        "user_kill",
    }
)
#: Seconds a try may run past its ``execution_timeout`` (a worker that is killed then restarted,
#: a scheduler's heartbeat timeout, the trigger's clean-up).
DEADLINE_MARGIN = 120.0
TERMINAL = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})


@dataclass(frozen=True)
class Violation:
    invariant: str
    task_id: str
    detail: str


@dataclass(frozen=True)
class Try:
    """One try of a task as the metadata database holds it."""

    task_id: str
    try_number: int
    state: str | None
    start: datetime.datetime | None
    end: datetime.datetime | None


@dataclass
class PodLife:
    uid: str
    name: str
    task_id: str
    key: tuple[str, str, str]  # task_id, try_number, relaunch
    created: float
    ended: float | None = None  # finished, being deleted or evicted: no longer running
    verdicts: set[tuple[str, str]] | None = None


def _time(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp).timestamp()


def pod_lives(events: Iterable[Mapping[str, Any]], dag_id: str) -> list[PodLife]:
    """Every pod of ``dag_id`` the audit log saw created, with when it stopped running and the
    verdicts stamped on it, in creation order."""
    lives: dict[str, PodLife] = {}
    current: dict[tuple[str, str], str] = {}  # (namespace, name) -> uid of the newest such pod
    seen: set[str] = set()
    for event in events:
        audit_id = str(event.get("auditID"))
        if audit_id in seen:  # a watch's or a long request's second stage
            continue
        seen.add(audit_id)
        ref = event.get("objectRef") or {}
        if ref.get("resource") != "pods":
            continue
        code = int((event.get("responseStatus") or {}).get("code") or 0)
        if not 200 <= code < 300:
            continue
        t = _time(event["requestReceivedTimestamp"])
        where = (ref.get("namespace", ""), ref.get("name", ""))
        verb, sub = event.get("verb"), ref.get("subresource")
        pod = (
            event.get("responseObject") if (event.get("responseObject") or {}).get("kind") == "Pod" else None
        )
        if verb == "create" and not sub and pod is not None:
            labels = pod["metadata"].get("labels") or {}
            if labels.get("dag_id") != dag_id:
                continue
            uid = pod["metadata"]["uid"]
            where = (pod["metadata"].get("namespace", ""), pod["metadata"]["name"])
            key = (labels.get("task_id", ""), labels.get("try_number", ""), labels.get(RELAUNCH_LABEL, "0"))
            lives[uid] = PodLife(uid, where[1], key[0], key, t, verdicts=set())
            current[where] = uid
            continue
        uid = pod["metadata"]["uid"] if pod is not None else current.get(where, "")
        life = lives.get(uid)
        if life is None:
            continue
        if sub == "eviction" or verb == "delete":
            life.ended = life.ended if life.ended is not None else t
        if pod is None:
            continue
        phase = (pod.get("status") or {}).get("phase")
        if life.ended is None and (
            phase in ("Succeeded", "Failed") or pod["metadata"].get("deletionTimestamp")
        ):
            life.ended = t
        stamp = read_stamp(pod)
        if stamp is not None and life.verdicts is not None:
            life.verdicts.add((str(stamp.verdict.reason), str(stamp.verdict.outcome)))
    return sorted(lives.values(), key=lambda life: life.created)


def judge(
    plan: Plan,
    lives: list[PodLife],
    tries: list[Try],
    pods_left: list[Mapping[str, Any]],
    killed: set[str],
) -> list[Violation]:
    """Every invariant broken, given the pods' lives, the tries, the pods left and the tasks a user
    marked failed."""
    out: list[Violation] = []
    by_key: dict[tuple[str, str, str], list[PodLife]] = {}
    by_task: dict[str, list[PodLife]] = {}
    for life in lives:
        by_key.setdefault(life.key, []).append(life)
        by_task.setdefault(life.task_id, []).append(life)
        if life.verdicts and len(life.verdicts) > 1:
            out.append(Violation("two_verdicts", life.task_id, f"{life.name}: {sorted(life.verdicts)}"))
    for key, same in by_key.items():
        if len(same) > 1:
            out.append(
                Violation("duplicate_pod", key[0], f"try {key[1]} relaunch {key[2]}: {len(same)} pods")
            )
    for task_id, pods in by_task.items():
        for earlier, later in itertools.pairwise(pods):
            if earlier.ended is None or earlier.ended > later.created:
                out.append(
                    Violation("two_live_pods", task_id, f"{later.name} created while {earlier.name} ran")
                )
    for pod in pods_left:
        meta = pod.get("metadata") or {}
        if not meta.get("deletionTimestamp"):
            labels = meta.get("labels") or {}
            out.append(Violation("leaked_pod", str(labels.get("task_id", "?")), str(meta.get("name"))))
    per_task: dict[str, list[Try]] = {}
    for one in tries:
        per_task.setdefault(one.task_id, []).append(one)
    timeouts = {t.task_id: float(t.operator.get("execution_timeout", 0)) for t in plan.tasks}
    for task in plan.tasks:
        mine = sorted(per_task.get(task.task_id, []), key=lambda one: one.try_number)
        last = mine[-1] if mine else None
        state = last.state if last is not None else None
        count = last.try_number if last is not None else 0
        if state not in TERMINAL:
            out.append(Violation("not_terminal", task.task_id, f"{task.fate}: state {state}, try {count}"))
            continue
        if count > task.retries + 1:
            out.append(Violation("retries_overspent", task.task_id, f"{count} tries, retries={task.retries}"))
        if (
            state == "failed"
            and count < task.retries + 1
            and task.fate not in PERMANENT
            and task.task_id not in killed
        ):
            out.append(
                Violation(
                    "retries_skipped",
                    task.task_id,
                    f"{task.fate}: failed on try {count} of {task.retries + 1}",
                )
            )
        if state == "success" and task.fate in NEVER_SUCCEED:
            out.append(Violation("wrong_end", task.task_id, f"{task.fate} succeeded"))
        limit = timeouts[task.task_id] or float(plan.execution_timeout)
        out += _past_deadline(task.task_id, mine, by_task.get(task.task_id, []), limit)
    return out


def _past_deadline(task_id: str, tries: list[Try], pods: list[PodLife], limit: float) -> list[Violation]:
    """Each pod of a try that ran on past the try's start plus ``limit`` and the margin."""
    out = []
    for one in tries:
        if one.start is None:
            continue
        for life in pods:
            if life.key[1] != str(one.try_number) or life.ended is None:
                continue  # a pod never ended is leaked_pod's
            ran = life.ended - one.start.timestamp()
            if ran > limit + DEADLINE_MARGIN:
                detail = f"try {one.try_number}'s pod {life.name} ran until {ran:.0f} s of {limit:.0f}"
                out.append(Violation("past_deadline", task_id, detail))
    return out
