"""The state of a try's task instance, read from inside the triggerer through the Task SDK."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_k8s_retry.kube.naming import TryIdentity


class TaskInstanceGone(LookupError):
    """The task instance no longer exists: its DAG run (or DAG) was deleted."""


async def airflow_task_state(identity: TryIdentity) -> str | None:
    """The task instance's current state, read through the Task SDK (works inside the triggerer).

    Raises :class:`TaskInstanceGone` when Airflow answers without this task instance (its DAG run
    was deleted: the execution API then returns an empty map), and any other exception when the
    state cannot be read; the caller decides what that means.
    """
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance
    from asgiref.sync import sync_to_async

    map_index = identity.map_index if identity.map_index >= 0 else None
    states = await sync_to_async(RuntimeTaskInstance.get_task_states)(
        dag_id=identity.dag_id,
        map_index=map_index,
        task_ids=[identity.task_id],
        run_ids=[identity.run_id],
    )
    per_run = dict(states.get(identity.run_id) or {})
    key = identity.task_id if map_index is None else f"{identity.task_id}_{map_index}"
    if key not in per_run:
        raise TaskInstanceGone(f"no task instance {identity.dag_id}.{key} in run {identity.run_id}")
    state = per_run[key]
    return None if state is None else str(getattr(state, "value", state))
