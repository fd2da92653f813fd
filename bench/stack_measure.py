"""What the whole-stack benchmark (``bench/stack.py``) reads: the API server's audit log (pods, their
failures, requests per namespace), Airflow's task logs (how long a try held a worker), the
database's statements by group, and the processes' CPU and memory from ``/proc``.

Pure functions of files and ``/proc``, unit-tested in
``tests/unit/bench/test_the_stack_benchmark_reads_the_audit_log.py``.
"""

from __future__ import annotations

import datetime
import itertools
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.controlplane.realcluster import read_audit_events

#: The user Airflow's processes (and the benchmark's own set-up) talk to kube-apiserver as.
ADMIN = "kubernetes-admin"
#: Seconds each benchmark pod runs (its image's scripted ``duration_seconds``).
RUN_SECONDS = 10
#: Seconds each operator waits, by default, before a failed image pull fails the try, from the first
#: sighting of the failed pull: ours 90 (the rule ``image_not_found``: a just-pushed tag or a registry
#: hiccup can look missing); the cncf operator (provider 10.x) fails the try at the first
#: ``ErrImagePull`` ("Image cannot be pulled, unable to start").
PULL_GRACE = {"rpo": 90.0, "kpo_deferrable": 0.0, "kpo": 0.0}


def namespace(operator: str, kind: str) -> str:
    """The namespace of one operator's tasks of one kind (each has its own, to count its requests)."""
    return f"{kind}-{operator}".replace("_", "-")


@dataclass
class PodSeen:
    dag_id: str
    task_id: str
    try_number: int
    namespace: str
    name: str
    created: float
    failed: float | None = None  # first write showing the pod failed (or its pull failing, its eviction)


def stamp_seconds(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def shows_failure(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") == "Failed":
        return True
    for c in status.get("containerStatuses") or []:
        state = c.get("state") or {}
        if (state.get("terminated") or {}).get("exitCode", 0) != 0:
            return True
        if (state.get("waiting") or {}).get("reason") in ("ErrImagePull", "ImagePullBackOff"):
            return True
    return False


@dataclass
class Audit:
    pods: dict[str, PodSeen]  # by UID
    #: Airflow's requests per namespace, each as the second it was received (evictions, which the
    #: benchmark's disruptor posts, are not Airflow's and are left out).
    requests: dict[str, list[float]]

    def count(self, namespace: str, start: float = 0.0, end: float = float("inf")) -> int:
        return sum(1 for t in self.requests.get(namespace, ()) if start <= t <= end)


def read_audit(path: Path, since: float = 0.0) -> Audit:
    """The benchmark's pods by UID, and the requests made per namespace from ``since`` on (the
    benchmark's own set-up requests come before)."""
    pods: dict[str, PodSeen] = {}
    by_name: dict[tuple[str, str], str] = {}
    requests: dict[str, list[float]] = {}
    seen: set[str] = set()
    for event in read_audit_events(path):
        audit_id = str(event.get("auditID"))
        if audit_id in seen:
            continue
        seen.add(audit_id)
        ref = event.get("objectRef") or {}
        t = stamp_seconds(event["requestReceivedTimestamp"])
        code = int((event.get("responseStatus") or {}).get("code") or 0)
        eviction = ref.get("subresource") == "eviction"
        if eviction and event.get("verb") == "create" and 200 <= code < 300:
            uid = by_name.get((ref.get("namespace", ""), ref.get("name", "")))
            if uid is not None and pods[uid].failed is None:
                pods[uid].failed = t
            continue
        # KWOK's Logs objects are the control plane harness's (it serves each pod's log through them).
        harness = ref.get("apiGroup") == "kwok.x-k8s.io"
        if (
            (event.get("user") or {}).get("username") == ADMIN
            and ref.get("namespace")
            and t >= since
            and not harness
        ):
            requests.setdefault(ref["namespace"], []).append(t)
        pod = event.get("responseObject")
        if not isinstance(pod, dict) or pod.get("kind") != "Pod" or not 200 <= code < 300:
            continue
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        if not str(labels.get("dag_id", "")).startswith("stack_"):
            continue
        uid = meta["uid"]
        if event.get("verb") == "create" and not ref.get("subresource"):
            try_number = int(labels.get("try_number", 0))
            pods[uid] = PodSeen(
                labels["dag_id"], labels.get("task_id", ""), try_number, meta["namespace"], meta["name"], t
            )
            by_name[(meta["namespace"], meta["name"])] = uid
        one = pods.get(uid)
        if one is not None and one.failed is None and shows_failure(pod):
            one.failed = t
    return Audit(pods, requests)


def kind_of(task_id: str) -> str:
    """A task's kind of try from its id: ``exit_03`` -> ``exit``."""
    return task_id.rsplit("_", 1)[0]


def turnarounds(
    pods: dict[str, PodSeen], dag_id: str, kind: str | None = None, *, pull_grace: float = 0.0
) -> list[float]:
    """Seconds from each pod showing its failure to the create of the task's next pod (the next
    try's, or a relaunch in the same try); with ``pull_grace`` (``PULL_GRACE[operator]``), from the
    end of the operator's grace."""
    return sorted(
        round(nxt.created - pod.failed - pull_grace, 3)
        for its in pods_by_task(pods, dag_id, kind).values()
        for pod, nxt in itertools.pairwise(its)
        if pod.failed is not None
    )


def pods_by_task(pods: dict[str, PodSeen], dag_id: str, kind: str | None = None) -> dict[str, list[PodSeen]]:
    """The DAG's pods (of one kind of try) by task, each task's in the order of their create."""
    by_task: dict[str, list[PodSeen]] = {}
    for pod in pods.values():
        if pod.dag_id == dag_id and (kind is None or kind_of(pod.task_id) == kind):
            by_task.setdefault(pod.task_id, []).append(pod)
    for its in by_task.values():
        its.sort(key=lambda p: p.created)
    return by_task


# -- Airflow's task logs -----------------------------------------------------------------------

#: The stages of a retry turnaround, in order (``turnaround_stages``).
STAGES = ("detected", "worker resumed", "try ended", "next try started", "next pod created")


def turnaround_stages(
    pods: dict[str, PodSeen], logs: Path, dag_id: str, kind: str | None = None
) -> list[dict[str, float | None]]:
    """Where each turnaround (:func:`turnarounds`, no grace) went, from the audit log and the task
    logs, in seconds per stage of :data:`STAGES`:

    * ``detected``: from the failure to the trigger's event (None without a trigger: the worker
      that waits on the pod finds it);
    * ``worker resumed``: from the event to the first line of the worker that resumes the try;
    * ``try ended``: from there to the try's last line (without a trigger, from the failure); for a
      pod relaunched in the same try, to the relaunch's create (and no stage after it);
    * ``next try started``: from the try's end to the first line of the next try's worker
      (the scheduler, the executor and the process's start);
    * ``next pod created``: from there to the next pod's create.

    A turnaround whose logs cannot be found is left out."""
    out = []
    for task_id, its in pods_by_task(pods, dag_id, kind).items():
        attempts = _attempt_logs(logs, dag_id, task_id)
        for pod, nxt in itertools.pairwise(its):
            stages = _stages(pod, nxt, attempts) if pod.failed is not None else None
            if stages is not None:
                out.append(stages)
    return out


@dataclass
class _Attempt:
    stretches: list[tuple[float, float]]
    fired: list[float]  # the trigger events of the try, in order


def _attempt_logs(logs: Path, dag_id: str, task_id: str) -> dict[int, _Attempt]:
    out: dict[int, _Attempt] = {}
    for path in (logs / f"dag_id={dag_id}").glob(f"run_id=*/task_id={task_id}/attempt=*.log*"):
        number, _, rest = path.name.removeprefix("attempt=").partition(".log")
        if not number.isdigit():
            continue
        attempt = out.setdefault(int(number), _Attempt([], []))
        lines = path.read_text(errors="replace").splitlines()
        if not rest:
            attempt.stretches = _stretches(lines)
            continue
        for line in lines:  # attempt=N.log.trigger.M.log: one trigger's lines
            try:
                entry = json.loads(line)
                if entry.get("event") == "Trigger fired event":
                    attempt.fired.append(stamp_seconds(entry["timestamp"]))
            except (ValueError, KeyError, TypeError):
                continue
    for attempt in out.values():
        attempt.fired.sort()
    return out


def _stages(pod: PodSeen, nxt: PodSeen, attempts: dict[int, _Attempt]) -> dict[str, float | None] | None:
    failed = pod.failed
    this = attempts.get(pod.try_number)
    if failed is None or this is None:
        return None
    # The worker that acts on the failure: the one running at it (a try waiting in its worker), or
    # the first to start after it (a deferred try's resume).
    stretch = next((s for s in this.stretches if s[1] >= failed), None)
    if stretch is None:
        return None
    fired = [t for t in this.fired if failed - 1.0 <= t <= stretch[0]]
    detected: float | None = None
    resumed: float | None = None
    if stretch[0] < failed:  # no trigger: the worker waiting on the pod found the failure
        acting_from = failed
    else:
        acting_from = stretch[0]
        if fired:
            detected, resumed = fired[0] - failed, stretch[0] - fired[0]
        else:
            # A relaunch's trigger writes the same trigger log as the first pod's and replaces it:
            # the event's line is gone, so this stage runs from the failure.
            resumed = stretch[0] - failed
    stages: dict[str, float | None] = {"detected": detected, "worker resumed": resumed}
    if nxt.try_number == pod.try_number:  # relaunched in the same try
        stages.update(
            {"try ended": nxt.created - acting_from, "next try started": None, "next pod created": None}
        )
    else:
        following = attempts.get(nxt.try_number)
        if following is None or not following.stretches:
            return None
        stages.update(
            {
                "try ended": stretch[1] - acting_from,
                "next try started": following.stretches[0][0] - stretch[1],
                "next pod created": nxt.created - following.stretches[0][0],
            }
        )
    return {k: None if v is None else round(v, 3) for k, v in stages.items()}


def logged_worker_seconds(logs: Path, dag_id: str) -> float:
    """Seconds the DAG's tries held a worker, from their task logs: each stretch from a ``Pre
    Execute`` to the stretch's last line (a deferred task's log has one stretch per worker run).
    The process's start before its first line is not in it."""
    total = 0.0
    for path in (logs / f"dag_id={dag_id}").glob("run_id=*/task_id=*/attempt=*.log"):
        if not path.name.removeprefix("attempt=").removesuffix(".log").isdigit():
            continue  # a trigger's log, attempt=N.log.trigger.M.log
        total += sum(end - start for start, end in _stretches(path.read_text(errors="replace").splitlines()))
    return round(total, 2)


def _stretches(lines: Iterable[str]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for line in lines:
        try:
            entry = json.loads(line)
            t = stamp_seconds(entry["timestamp"])
        except (ValueError, KeyError, TypeError):
            continue
        if entry.get("event") == "::group::Pre Execute" or not out:
            out.append((t, t))
        else:
            out[-1] = (out[-1][0], t)
    return out


# -- the database's statements -----------------------------------------------------------------

_TABLE = r"\s+(?:only\s+)?\"?([a-z_][a-z0-9_]*)"
_GROUP_PATTERNS = (
    ("insert", re.compile(r"^insert\s+into" + _TABLE)),
    ("update", re.compile(r"^update" + _TABLE)),
    ("delete", re.compile(r"^delete\s+from" + _TABLE)),
    ("select", re.compile(r"^select\b.*?\bfrom" + _TABLE)),
)


def statement_group(query: str) -> str:
    """A statement's group, from its text as ``pg_stat_statements`` keeps it: its verb and the first
    table it names (``select task_instance``, ``insert xcom``, ``update trigger``), or its verb alone
    (``begin``, ``commit``, ``select``: a ``select 1`` ping)."""
    text = " ".join(query.lower().split())
    if text.startswith("with "):  # a common table expression: the statement it leads to
        main = re.search(r"\)\s*(select|insert|update|delete)\b.*$", text)
        text = main.group(0).lstrip(") ") if main else text
    for verb, pattern in _GROUP_PATTERNS:
        found = pattern.match(text)
        if found:
            return f"{verb} {found.group(1)}"
    return text.split(" ", 1)[0].rstrip(";") if text else "?"


def statement_groups(rows: Iterable[tuple[str, int, str]]) -> dict[str, int]:
    """Calls per ``"<user>: <group>"`` (the database user a process role connects as, and
    :func:`statement_group`) of ``(user, calls, query)`` rows, most first."""
    out: dict[str, int] = {}
    for user, calls, query in rows:
        key = f"{user}: {statement_group(query)}"
        out[key] = out.get(key, 0) + int(calls)
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


# -- processes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    cpu: float  # seconds, user + system, reaped children included
    rss: float  # MiB of the processes alive now


def session_usage(session: int, proc: Path = Path("/proc")) -> Usage:
    """CPU and resident memory of every process in session ``session`` (an Airflow process started
    in a session of its own, with its children). A child's CPU moves into its parent's
    ``cutime``/``cstime`` once reaped, so the sum over live processes only grows."""
    ticks, page = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")
    cpu = rss = 0.0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the command name: state, ppid, pgrp, session, ...; utime, stime, cutime, cstime are
        # the 12th to 15th; rss (pages) the 22nd.
        if int(fields[3]) != session:
            continue
        cpu += sum(int(x) for x in fields[11:15]) / ticks
        rss += int(fields[21]) * page / 2**20
    return Usage(round(cpu, 2), round(rss, 1))
