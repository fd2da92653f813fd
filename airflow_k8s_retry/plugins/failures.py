"""What the failures page shows, computed from every try's record of its cause (no Airflow imports).

Each try's cause is read from where Airflow keeps it:

- the latest try of a task instance: the XCom ``verdict`` (outcome, reason code, message) that the
  operator and the sensor publish next to ``pod_name`` and ``pod_namespace``;
- every earlier try (Airflow clears a task instance's XComs when its next try starts), from its row
  in ``task_instance_history``: on Airflow 3.3+ its ``retry_reason``, which the package's retry
  policy sets to ``"<reason code>: <message>"``; on Airflow 3.1 and 3.2 (no retry policies), or when
  another policy left no reason, the verdict in the trigger's event that the try resumed with
  (``next_kwargs``), which Airflow keeps in the same row.

So a task that failed twice and then succeeded shows its two failed tries.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from airflow_k8s_retry.classification import hint_for
from airflow_k8s_retry.classification.model import Reason, Verdict
from airflow_k8s_retry.report import Snapshot, withhold_termination_messages

#: Outcomes that count as failures on the page (a skip is published too, and shown, not counted).
FAILURE_OUTCOMES = frozenset({"retry", "fail"})
#: The time ranges the page offers, in hours, and the chart's bucket for each.
RANGES: dict[int, timedelta] = {
    1: timedelta(minutes=5),
    6: timedelta(minutes=15),
    24: timedelta(hours=1),
    168: timedelta(hours=6),
    720: timedelta(days=1),
}
DEFAULT_HOURS = 168


@dataclass(frozen=True)
class FailureRecord:
    """One task instance's published verdict, with the try and pod it belongs to."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int
    try_number: int | None
    state: str | None
    at: datetime
    outcome: str
    reason: str
    message: str
    pod_name: str | None = None
    namespace: str | None = None

    @property
    def hint(self) -> str | None:
        return hint_for(self.reason)

    @property
    def is_failure(self) -> bool:
        return self.outcome in FAILURE_OUTCOMES

    @property
    def task(self) -> str:
        return f"{self.dag_id}.{self.task_id}" + (f"[{self.map_index}]" if self.map_index >= 0 else "")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "at": self.at.isoformat(), "hint": self.hint}


def record_from_xcom(
    value: Any, *, dag_id: str, task_id: str, run_id: str, map_index: int, at: datetime, **extra: Any
) -> FailureRecord | None:
    """A :class:`FailureRecord` from a ``verdict`` XCom value, or ``None`` when it is not one."""
    if not isinstance(value, Mapping) or not isinstance(value.get("reason"), str):
        return None
    return FailureRecord(
        dag_id=dag_id,
        task_id=task_id,
        run_id=run_id,
        map_index=map_index,
        at=at,
        outcome=str(value.get("outcome") or "?"),
        reason=str(value["reason"]),
        message=str(value.get("message") or ""),
        **extra,
    )


_REASON_TEXT = re.compile(r"^(?P<reason>[a-z_]+\.[a-z_]+): (?P<message>.*)$", re.DOTALL)


def record_from_history(retry_reason: str | None, next_kwargs: Any, **row: Any) -> FailureRecord | None:
    """A :class:`FailureRecord` from an earlier try's ``task_instance_history`` row (``row``: its
    ``dag_id``, ``task_id``, ``run_id``, ``map_index``, ``try_number``, ``state`` and ``at``): its
    ``retry_reason`` when that names a reason code, else the verdict in the event it resumed with;
    ``None`` when the row holds neither (a try of another operator, or one that never deferred on
    Airflow 3.1/3.2)."""
    event = _event_of(next_kwargs)
    pod_name = _text(event.get("pod_name")) if event is not None else None
    namespace = _text(event.get("namespace")) if event is not None else None
    found = _REASON_TEXT.match(retry_reason or "")
    if found and found["reason"] in {r.value for r in Reason}:
        value: Any = {"outcome": "retry", "reason": found["reason"], "message": found["message"]}
    else:
        value = _published(event) if event is not None else None
    return record_from_xcom(value, **row, pod_name=pod_name, namespace=namespace)


def _published(event: Mapping[str, Any]) -> Any:
    """The event's verdict as the try published it: without the containers' termination messages,
    read from the pod the trigger judged (its snapshot in the event), as the operator withholds them."""
    raw = event.get("verdict")
    try:
        verdict = Verdict.from_payload(raw if isinstance(raw, Mapping) else {})
    except (KeyError, TypeError, ValueError):
        return None
    seen = Snapshot.from_payload(event.get("seen"), str(event.get("pod_uid") or ""))
    return withhold_termination_messages(verdict, seen.pod if seen is not None else None).summary()


def _event_of(next_kwargs: Any) -> Mapping[str, Any] | None:
    """The trigger event in a try's ``next_kwargs`` (Airflow may keep it in its serialized form)."""
    kwargs = _plain(next_kwargs)
    event = _plain(kwargs.get("event")) if isinstance(kwargs, Mapping) else None
    if isinstance(event, Mapping) and "target" in event:  # the sensor's: the pod event inside
        event = _plain(event.get("event"))
    return event if isinstance(event, Mapping) and "verdict" in event else None


def _plain(value: Any) -> Any:
    """``value`` without Airflow's serialization envelopes (``{"__type": ..., "__var": ...}``)."""
    if isinstance(value, Mapping):
        if "__var" in value and "__type" in value:
            return _plain(value["__var"])
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _text(value: Any) -> str | None:
    return str(value) if value else None


@dataclass(frozen=True)
class TaskFailures:
    dag_id: str
    task_id: str
    failures: int
    reasons: dict[str, int]
    last: datetime

    @property
    def task(self) -> str:
        return f"{self.dag_id}.{self.task_id}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "last": self.last.isoformat()}


@dataclass(frozen=True)
class Summary:
    """The page's content: a chart of failures by reason over time, the worst tasks, every record."""

    since: datetime
    until: datetime
    bucket: timedelta
    buckets: list[datetime]
    #: reason -> failures per bucket (same order as ``buckets``)
    series: dict[str, list[int]]
    top_tasks: list[TaskFailures]
    records: list[FailureRecord] = field(default_factory=list)

    @property
    def failures(self) -> int:
        return sum(sum(counts) for counts in self.series.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "bucket_seconds": self.bucket.total_seconds(),
            "buckets": [b.isoformat() for b in self.buckets],
            "series": self.series,
            "failures": self.failures,
            "top_tasks": [t.to_json() for t in self.top_tasks],
            "records": [r.to_json() for r in self.records],
        }


def summarize(
    records: Iterable[FailureRecord], *, since: datetime, until: datetime, bucket: timedelta, top: int = 10
) -> Summary:
    """Count failures by reason per time bucket and by task; newest records first."""
    if bucket <= timedelta(0):
        raise ValueError(f"bucket must be positive, got {bucket}")
    start = since - timedelta(seconds=since.timestamp() % bucket.total_seconds())
    buckets: list[datetime] = []
    at = start
    while at < until:
        buckets.append(at)
        at += bucket
    kept = sorted((r for r in records if since <= r.at <= until), key=lambda r: r.at, reverse=True)
    series: dict[str, list[int]] = {}
    by_task: dict[tuple[str, str], list[FailureRecord]] = {}
    for r in kept:
        if not r.is_failure:
            continue
        index = min(len(buckets) - 1, int((r.at - start) / bucket))
        series.setdefault(r.reason, [0] * len(buckets))[index] += 1
        by_task.setdefault((r.dag_id, r.task_id), []).append(r)
    tops = sorted(
        (
            TaskFailures(
                dag_id=dag,
                task_id=task,
                failures=len(rs),
                reasons=dict(Counter(r.reason for r in rs).most_common()),
                last=max(r.at for r in rs),
            )
            for (dag, task), rs in by_task.items()
        ),
        key=lambda t: (-t.failures, t.task),
    )[:top]
    ordered = dict(sorted(series.items(), key=lambda kv: (-sum(kv[1]), kv[0])))
    return Summary(since, until, bucket, buckets, ordered, tops, kept)
