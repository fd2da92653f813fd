"""Server-side printing (``meta.k8s.io/v1`` Table) for ``kubectl get``.

kubectl asks the apiserver to render rows (``Accept: ...;as=Table``); without it, it can only show
names and ages. Pods get the familiar NAME/READY/STATUS/RESTARTS/AGE columns, computed the way
kubectl's pod printer does, so ``kubectl get pods -w`` shows ``ErrImagePull``, ``Init:0/1`` or
``Terminating`` like on a real cluster.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def _age(timestamp: str | None) -> str:
    if not timestamp:
        return "<unknown>"
    seconds = max(0, int(time.time() - calendar.timegm(time.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ"))))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 3600 * 3:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


def _init_status(init_statuses: list[Any]) -> str | None:
    """``Init:...`` while an init container has not finished successfully, else None."""
    for i, cs in enumerate(init_statuses):
        state = cs.get("state") or {}
        term = state.get("terminated")
        if term and term.get("exitCode") == 0:
            continue
        if term:
            return f"Init:{term.get('reason') or 'ExitCode:' + str(term.get('exitCode'))}"
        if (state.get("waiting") or {}).get("reason") not in (None, "PodInitializing"):
            return f"Init:{state['waiting']['reason']}"
        return f"Init:{i}/{len(init_statuses)}"
    return None


def _containers_status(statuses: list[Any], reason: str) -> str:
    """The reason the main containers give (the first one's wins), as kubectl reads them."""
    has_running = False
    for cs in reversed(statuses):
        state = cs.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif state.get("terminated"):
            term = state["terminated"]
            reason = term.get("reason") or (
                f"Signal:{term['signal']}" if term.get("signal") else f"ExitCode:{term.get('exitCode')}"
            )
        elif state.get("running") and cs.get("ready"):
            has_running = True
    return "Running" if reason == "Completed" and has_running else reason


def pod_status_text(pod: Mapping[str, Any]) -> str:
    """The STATUS column, following kubectl's pod printer."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    init = _init_status(status.get("initContainerStatuses") or [])
    reason = init if init is not None else _containers_status(status.get("containerStatuses") or [], reason)
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return str(reason)


def _pod_row(pod: Mapping[str, Any]) -> list[Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    ready = sum(1 for cs in statuses if cs.get("ready"))
    restarts = sum(int(cs.get("restartCount", 0)) for cs in statuses)
    meta = pod.get("metadata") or {}
    return [
        meta.get("name"),
        f"{ready}/{total}",
        pod_status_text(pod),
        restarts,
        _age(meta.get("creationTimestamp")),
    ]


def _event_row(event: Mapping[str, Any]) -> list[Any]:
    involved = event.get("involvedObject") or {}
    return [
        _age(event.get("lastTimestamp")),
        event.get("type", ""),
        event.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        event.get("message", ""),
    ]


def _generic_row(obj: Mapping[str, Any]) -> list[Any]:
    meta = obj.get("metadata") or {}
    return [meta.get("name"), _age(meta.get("creationTimestamp"))]


COLUMNS = {
    "pods": (["Name", "Ready", "Status", "Restarts", "Age"], _pod_row),
    "events": (["Last Seen", "Type", "Reason", "Object", "Message"], _event_row),
}


def table(
    resource: str, objects: list[Mapping[str, Any]], resource_version: str, *, headers: bool = True
) -> Obj:
    names, row = COLUMNS.get(resource, (["Name", "Age"], _generic_row))
    types = {"Restarts": "integer"}
    out: Obj = {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "rows": [
            {
                "cells": row(obj),
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": obj.get("metadata") or {},
                },
            }
            for obj in objects
        ],
    }
    if headers:
        out["columnDefinitions"] = [
            {
                "name": name,
                "type": types.get(name, "string"),
                "format": "name" if name == "Name" else "",
                "description": name,
                "priority": 0,
            }
            for name in names
        ]
    return out
