"""What a trigger saw when it judged a pod, compact enough to travel in its event.

The trigger holds the pod (its last look) and the pod's Events (the shared Events feed) when it
emits a verdict. :func:`take` keeps the parts a failure report and the worker's decisions read
(:func:`~airflow_k8s_retry.kube.pods.failure_report`,
:func:`~airflow_k8s_retry.kube.lifecycle.withhold_termination_messages`,
:func:`~airflow_k8s_retry.kube.lifecycle.started_containers`, the memory growth after an OOM
kill): the pod's name and UID, its containers' names, termination-message policies, resources and
restart policies, its status without the containers' termination messages (``withheld`` says
whether there were any), and its last Events. The spec's
env, commands, volumes and annotations are left behind, so no secret value travels with it.

A snapshot larger than :data:`SIZE_LIMIT` (as JSON) is left out; the worker then reads the pod and
its Events itself, as it does for an event without a snapshot (an older trigger's, a sensor's).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

Json = dict[str, Any]

#: The largest snapshot (bytes of JSON) an event carries.
SIZE_LIMIT = 16 * 1024
#: How many of the pod's Events travel (the newest), as many as a failure report shows.
EVENTS_KEPT = 10

_STATUS_FIELDS = ("phase", "reason", "message", "conditions", "initContainerStatuses", "containerStatuses")
_EVENT_FIELDS = ("type", "reason", "count", "message")
_CONTAINER_FIELDS = ("name", "terminationMessagePolicy", "resources", "restartPolicy")


def take(pod: Mapping[str, Any] | None, events: Sequence[Mapping[str, Any]], uid: str) -> Json | None:
    """The snapshot of ``pod`` (``None`` when it is not the pod with ``uid``: gone or replaced) and
    its newest Events; ``None`` when it would be larger than :data:`SIZE_LIMIT`."""
    ours = uid_of(pod) == uid
    body = _pod_part(pod) if ours else None
    snapshot: Json = {
        "uid": uid,
        "pod": body,
        "withheld": ours and withheld_messages(pod),
        "events": [{k: e[k] for k in _EVENT_FIELDS if k in e} for e in list(events)[-EVENTS_KEPT:]],
    }
    try:
        size = len(json.dumps(snapshot, separators=(",", ":")).encode())
    except (TypeError, ValueError):
        return None
    return snapshot if size <= SIZE_LIMIT else None


def unpack(snapshot: Mapping[str, Any] | None, uid: str) -> tuple[Json | None, list[Json]] | None:
    """The pod body (``None``: it was gone) and Events a snapshot of the pod with ``uid`` holds;
    ``None`` for no snapshot, an unreadable one, or one of another pod."""
    if not isinstance(snapshot, Mapping) or snapshot.get("uid") != uid or "events" not in snapshot:
        return None
    pod, events = snapshot.get("pod"), snapshot.get("events")
    if not isinstance(events, list) or not (pod is None or isinstance(pod, Mapping)):
        return None
    return (dict(pod) if pod is not None else None), [dict(e) for e in events if isinstance(e, Mapping)]


def _pod_part(pod: Mapping[str, Any] | None) -> Json:
    meta = (pod or {}).get("metadata") or {}
    spec = (pod or {}).get("spec") or {}
    status = (pod or {}).get("status") or {}
    return {
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"), "uid": meta.get("uid")},
        "spec": {
            kind: [{k: c[k] for k in _CONTAINER_FIELDS if k in c} for c in spec.get(kind) or []]
            for kind in ("initContainers", "containers")
            if spec.get(kind)
        },
        "status": {k: _without_termination_messages(k, status[k]) for k in _STATUS_FIELDS if k in status},
    }


def _without_termination_messages(field: str, value: Any) -> Any:
    """Container statuses without ``terminated.message``: a container may write anything there (a
    Secret's value too), and the event is stored in Airflow's database as it is."""
    if field not in ("initContainerStatuses", "containerStatuses") or not isinstance(value, list):
        return value
    out = []
    for item in value:
        if not isinstance(item, Mapping):
            out.append(item)
            continue
        status = dict(item)
        for key in ("state", "lastState"):
            state = status.get(key)
            if isinstance(state, Mapping) and isinstance(state.get("terminated"), Mapping):
                terminated = {k: v for k, v in state["terminated"].items() if k != "message"}
                status[key] = {**state, "terminated": terminated}
        out.append(status)
    return out


def termination_messages(pod: Mapping[str, Any] | None, states: Sequence[str] = ("state",)) -> set[str]:
    """The non-empty ``terminated.message`` texts of ``pod``'s containers (init containers too),
    read from each of ``states`` (``"state"``, ``"lastState"``)."""
    status = (pod or {}).get("status") or {}
    found = {
        str(((cs.get(key) or {}).get("terminated") or {}).get("message") or "").strip()
        for kind in ("initContainerStatuses", "containerStatuses")
        for cs in status.get(kind) or []
        if isinstance(cs, Mapping)
        for key in states
    }
    return found - {""}


def withheld_messages(pod: Mapping[str, Any] | None) -> bool:
    """Whether ``pod`` (a full body) has termination messages a snapshot of it leaves out."""
    return bool(termination_messages(pod, ("state", "lastState")))


def uid_of(pod: Mapping[str, Any] | None) -> str | None:
    uid = ((pod or {}).get("metadata") or {}).get("uid")
    return str(uid) if uid else None
