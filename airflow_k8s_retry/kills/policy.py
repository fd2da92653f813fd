"""The kill policy: which task instance states mean a user (or a cleared or deleted run) killed the
try, so its pod is deleted by whoever notices first, and which pods such a deletion leaves alone.

One policy for the trigger's ``on_kill`` (:mod:`.trigger`) and the api-server's kill listener
(:mod:`.listener`); the worker's own ``on_kill`` is Airflow's signal that the try is being killed,
so it needs no state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from typing import Any

from airflow_k8s_retry.kube.naming import TryIdentity, read_stamp

#: Task instance states only a user action (or a cleared / deleted run) produces while the task is
#: deferred or waits for a worker: its pod is deleted in these. In every other state (``deferred``:
#: the trigger is moving to another triggerer; ``scheduled``, ``queued``, ``running``: another
#: triggerer fired and the worker is acting on the verdict; ``up_for_retry``, ``restarting``) the
#: pod belongs to someone else now, and the next try's sweep removes anything left over. ``None``
#: is a cleared task instance.
KILLED_STATES = frozenset({"failed", "success", "skipped", "upstream_failed", "removed", None})

#: Work on a killed try's pod that outlives its caller (``on_kill``, which Airflow cancels on each
#: of its state syncs); referenced here until it is done.
_KILL_WORK: set[asyncio.Future[None]] = set()


def keep_until_done(work: Awaitable[None]) -> asyncio.Future[None]:
    """Run ``work`` on the event loop, referenced in :data:`_KILL_WORK` until it is done."""
    future = asyncio.ensure_future(work)
    _KILL_WORK.add(future)
    future.add_done_callback(_KILL_WORK.discard)
    return future


def kept_on_kill(pod: Mapping[str, Any] | None, uid: str) -> str | None:
    """Why a killed task's pod (as read now) is not deleted, or None: delete it by ``uid``.

    Gone or replaced under the same name: nothing to do. Already being deleted (a delete with a
    grace period is under way): deleting it again changes nothing. Stamped with a verdict: finished
    business, the worker acted on that verdict and keeps (or is deleting) it itself.
    """
    meta = (pod or {}).get("metadata") or {}
    if pod is None or meta.get("uid") != uid:
        return "was already gone"
    if meta.get("deletionTimestamp"):
        return "is being deleted"
    if read_stamp(pod) is not None:
        return "carries a verdict; left to the worker"
    return None


def killed_why(state: str | None) -> str | None:
    """Why a try's pod may be deleted when its task instance is in ``state``, or None (kept)."""
    return f"Task instance is {state or 'cleared'}" if state in KILLED_STATES else None


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
