"""Every try's cause, read from Airflow's metadata database: the failures page's and ``explain``'s source.

The latest try of a task instance has its ``verdict`` XCom; every earlier try has its row in
``task_instance_history``, whose ``retry_reason`` (Airflow 3.3+) or resumed trigger event holds the
cause (:func:`airflow_k8s_retry.plugins.failures.record_from_history`). An earlier try's record
replaces the XCom of the same try number: between a failed try and the start of the next one the
task instance keeps its XCom and already has its history row.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from airflow_k8s_retry.plugins.failures import FailureRecord, record_from_history, record_from_xcom

#: Keys the operator and the sensor publish for each failing try.
VERDICT_KEY, POD_NAME_KEY, POD_NAMESPACE_KEY = "verdict", "pod_name", "pod_namespace"
#: At most this many records of each kind are read per page.
LIMIT = 5000


def load_records(
    since: datetime,
    until: datetime,
    dag_id: str | None,
    *,
    task_id: str | None = None,
    run_id: str | None = None,
) -> list[FailureRecord]:
    """Every try's published cause in the range, with its try's number and state and its pod."""
    from airflow.utils.session import create_session

    with create_session() as session:
        current = _current_tries(session, since, until, dag_id, task_id=task_id, run_id=run_id)
        earlier = _earlier_tries(session, since, until, dag_id, task_id=task_id, run_id=run_id)
    seen = {(r.dag_id, r.run_id, r.task_id, r.map_index, r.try_number) for r in earlier}
    kept = [r for r in current if (r.dag_id, r.run_id, r.task_id, r.map_index, r.try_number) not in seen]
    return sorted([*kept, *earlier], key=lambda r: r.at, reverse=True)


def _narrowed(query: Any, model: Any, dag_id: str | None, **narrow: str | None) -> Any:
    for column, value in {"dag_id": dag_id, **narrow}.items():
        if value:
            query = query.where(getattr(model, column) == value)
    return query


def _current_tries(
    session: Any, since: datetime, until: datetime, dag_id: str | None, **narrow: str | None
) -> list[FailureRecord]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    query = (
        select(XComModel)
        .where(XComModel.key == VERDICT_KEY, XComModel.timestamp >= since, XComModel.timestamp <= until)
        .order_by(XComModel.timestamp.desc())
        .limit(LIMIT)
    )
    verdicts = list(session.scalars(_narrowed(query, XComModel, dag_id, **narrow)))
    if not verdicts:
        return []
    runs, dags = {x.run_id for x in verdicts}, {x.dag_id for x in verdicts}
    pods: dict[tuple[str, str, str, int, str], Any] = {}
    for x in session.scalars(
        select(XComModel).where(
            XComModel.key.in_([POD_NAME_KEY, POD_NAMESPACE_KEY]),
            XComModel.dag_id.in_(dags),
            XComModel.run_id.in_(runs),
        )
    ):
        pods[(x.dag_id, x.run_id, x.task_id, x.map_index, x.key)] = XComModel.deserialize_value(x)
    tries: dict[tuple[str, str, str, int], tuple[int, str | None]] = {}  # by dag, run, task, map index
    for row in session.execute(
        select(
            TaskInstance.dag_id,
            TaskInstance.run_id,
            TaskInstance.task_id,
            TaskInstance.map_index,
            TaskInstance.try_number,
            TaskInstance.state,
        ).where(TaskInstance.dag_id.in_(dags), TaskInstance.run_id.in_(runs))
    ):
        tries[(row[0], row[1], row[2], row[3])] = (int(row[4]), None if row[5] is None else str(row[5]))
    records = []
    for x in verdicts:
        key = (x.dag_id, x.run_id, x.task_id, x.map_index)
        try_number, state = tries.get(key, (None, None))
        name, namespace = pods.get((*key, POD_NAME_KEY)), pods.get((*key, POD_NAMESPACE_KEY))
        record = record_from_xcom(
            XComModel.deserialize_value(x),
            dag_id=x.dag_id,
            task_id=x.task_id,
            run_id=x.run_id,
            map_index=x.map_index,
            at=x.timestamp,
            try_number=try_number,
            state=state,
            pod_name=str(name) if name else None,
            namespace=str(namespace) if namespace else None,
        )
        if record is not None:
            records.append(record)
    return records


def _earlier_tries(
    session: Any, since: datetime, until: datetime, dag_id: str | None, **narrow: str | None
) -> list[FailureRecord]:
    from airflow.models.taskinstancehistory import TaskInstanceHistory as TIH
    from sqlalchemy import select

    reason = getattr(TIH, "retry_reason", None)  # Airflow 3.3+
    columns = [TIH.dag_id, TIH.run_id, TIH.task_id, TIH.map_index, TIH.try_number, TIH.state, TIH.end_date]
    query = (
        select(*columns, TIH.next_kwargs, *([reason] if reason is not None else []))
        .where(TIH.end_date >= since, TIH.end_date <= until)
        .order_by(TIH.end_date.desc())
        .limit(LIMIT)
    )
    return list(_history_records(session.execute(_narrowed(query, TIH, dag_id, **narrow))))


def _history_records(rows: Iterable[Any]) -> Iterable[FailureRecord]:
    for row in rows:
        dag, run, task, map_index, try_number, state, end, next_kwargs = row[:8]
        record = record_from_history(
            row[8] if len(row) > 8 else None,
            next_kwargs,
            dag_id=dag,
            task_id=task,
            run_id=run,
            map_index=map_index,
            try_number=int(try_number),
            state=None if state is None else str(state),
            at=end,
        )
        if record is not None:
            yield record


def load_task_tries(
    dag_id: str, task_id: str, run_id: str | None = None
) -> list[tuple[str, int, int, str | None]]:
    """Every try of a task's instances as ``(run_id, map_index, try_number, state)``, oldest first:
    the earlier tries from ``task_instance_history``, the latest from ``task_instance``."""
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.models.taskinstancehistory import TaskInstanceHistory as TIH
    from airflow.utils.session import create_session
    from sqlalchemy import select

    found: dict[tuple[str, int, int], str | None] = {}
    with create_session() as session:
        for model in (TIH, TI):
            query = select(model.run_id, model.map_index, model.try_number, model.state).where(
                model.dag_id == dag_id, model.task_id == task_id
            )
            if run_id:
                query = query.where(model.run_id == run_id)
            for run, map_index, try_number, state in session.execute(query):
                found[(str(run), int(map_index), int(try_number))] = None if state is None else str(state)
    return [(run, m, t, state) for (run, m, t), state in sorted(found.items())]
