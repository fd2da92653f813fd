"""What the task log says about a pod that waits behind scheduling gates, and what Kueue says about it.

A gated pod may wait for hours in an admission queue (the classifier's ``scheduling_gated`` rule:
``schedule.gated`` until ``queue_timeout`` or the task's ``execution_timeout``), so a silent task log
would leave its reader guessing. Once a few minutes the trigger's log says which gates hold the pod,
since when, and until when it waits. Where the gate is Kueue's (``kueue.x-k8s.io/admission``) and the
trigger may read Kueue's Workloads, it adds why the pod's Workload is not admitted yet: the messages
of its ``QuotaReserved`` and ``Admitted`` conditions, in Kueue's own words. Where it may not (no
Kueue, or RBAC refuses), it says no more, and does not ask again.

Pure, like the tracker that uses it: the Workload comes in as the JSON the API served.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

#: The gate Kueue's webhook puts on the pods it queues, and removes when it admits their Workload.
KUEUE_GATE = "kueue.x-k8s.io/admission"
#: The first gate note comes after this long (a queue with room admits within seconds), then one
#: every :data:`QUEUE_NOTE_EVERY`.
QUEUE_FIRST_NOTE = 30.0
QUEUE_NOTE_EVERY = 300.0
#: The Workload conditions that say where admission stands, in the order they happen.
ADMISSION_CONDITIONS = ("QuotaReserved", "Admitted")


def gates_of(pod: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The names of the pod's scheduling gates, in spec order."""
    gates = ((pod or {}).get("spec") or {}).get("schedulingGates") or []
    return tuple(str(g.get("name")) for g in gates if isinstance(g, Mapping) and g.get("name"))


def workload_summary(workload: Mapping[str, Any]) -> str:
    """What a Kueue Workload says about its admission, in one line.

    Example:
        >>> workload_summary({"metadata": {"name": "pod-etl-3f2a1"}, "status": {"conditions": [
        ...     {"type": "QuotaReserved", "status": "False", "reason": "Pending",
        ...      "message": "ClusterQueue cq is inactive"}]}})
        'Kueue Workload pod-etl-3f2a1: QuotaReserved=False (Pending): ClusterQueue cq is inactive'
    """
    name = str((workload.get("metadata") or {}).get("name") or "?")
    conditions = {
        str(c.get("type")): c
        for c in (workload.get("status") or {}).get("conditions") or []
        if isinstance(c, Mapping)
    }
    said = []
    for kind in ADMISSION_CONDITIONS:
        cond = conditions.get(kind)
        if cond is None:
            continue
        text = f"{kind}={cond.get('status')}"
        if cond.get("reason"):
            text += f" ({cond['reason']})"
        if cond.get("message"):
            text += f": {str(cond['message'])[:400]}"
        said.append(text)
    return f"Kueue Workload {name}: " + ("; ".join(said) or "no admission conditions yet")


def queue_note(
    gates: Sequence[str], since: float, until: float, until_what: str, workload: str | None = None
) -> str:
    """The gate note: which gates hold the pod, since when, until when it waits, and Kueue's word."""
    plural = "s" if len(gates) > 1 else ""
    text = (
        f"schedule.gated: held by scheduling gate{plural} {', '.join(gates) or '?'} since {clock(since)}; "
        f"waiting until {clock(until)} ({until_what})"
    )
    return f"{text}; {workload}" if workload else text


def clock(at: float, form: str = "%Y-%m-%d %H:%M:%S UTC") -> str:
    try:
        return datetime.fromtimestamp(at, UTC).strftime(form)
    except (OverflowError, OSError, ValueError):  # past year 9999: say so rather than crash
        return "never"
