"""Deleting what a try left behind, found by label: the next try's sweep of earlier tries, the
pods of a try whose deferral ended badly or whose worker was killed before it held its pod, and
the pods of earlier relaunches in a try.

Airflow-free, like :mod:`airflow_k8s_retry.kube.pods` underneath it: a
:class:`~airflow_k8s_retry.kube.pods.PodClient`, a :class:`~airflow_k8s_retry.kube.naming.TryIdentity`
and the try's namespace. Pods are deleted by UID, pods stamped as kept on purpose are left, and
pods of another deployment, DAG run, map index or task are never touched.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow_k8s_retry.kube.errors import BadRequest, Invalid, KubeError
from airflow_k8s_retry.kube.naming import RELAUNCH_LABEL, TryIdentity, read_stamp
from airflow_k8s_retry.kube.pods import OUTAGE_BACKOFF, PodClient, delete

Json = dict[str, Any]
Log = Callable[..., None]


class EarlierTryNotGone(RuntimeError):
    """A pod of an earlier try of the task is still there and running (its deletes failed), or the
    pods of earlier tries could not be listed: this try's pod is not started beside it."""


def sweep_earlier_tries(
    client: PodClient,
    identity: TryIdentity,
    namespace: str,
    *,
    log: Log,
    sleep: Callable[[float], None] = time.sleep,
    backoff: Sequence[float] = OUTAGE_BACKOFF,
) -> list[str]:
    """Delete the pods earlier tries of this task left behind, and return once they are out of the
    way; return their names.

    An earlier try can end without its cleanup: it was marked failed or cleared while deferred
    before a triggerer ran its trigger, its worker died, or its delete failed after the stamp. Its
    pod may also still be stopping: a graceful delete leaves the containers running until they
    stop (``deletionTimestamp`` set). A new try proves the earlier one is over, so such a pod is
    deleted with no grace (which also shortens a pending graceful deletion) until it is gone or
    none of its containers runs. Pods stamped as *kept* (``on_finish_action``) stay.

    Raises :class:`EarlierTryNotGone` when, after ``backoff`` (about 30 s), a pod of an earlier
    try still runs or the pods could not be listed: two pods of one task never run at once (the
    try fails and Airflow retries it).
    """
    if identity.try_number <= 1:
        return []
    deleted: list[str] = []
    went_through: set[str] = set()  # UIDs whose delete was accepted
    problem = ""
    for pause in (*backoff, None):
        try:
            in_the_way = _earlier_pods_in_the_way(client, identity, namespace)
        except KubeError as exc:
            if isinstance(exc, (BadRequest, Invalid)):
                raise EarlierTryNotGone(f"could not look for pods of earlier tries: {exc}") from exc
            problem = f"could not look for pods of earlier tries: {exc}"
            log("%s; retrying", problem)
        else:
            if not in_the_way:
                return deleted
            uids = {str(p["metadata"]["uid"]) for p in in_the_way}
            if _delete_now(client, namespace, in_the_way, deleted, log=log) and not uids <= went_through:
                went_through |= uids
                continue  # every delete went through: look again at once
            problem = "still there: " + ", ".join(str(p["metadata"]["name"]) for p in in_the_way)
        if pause is not None:
            sleep(pause)
    raise EarlierTryNotGone(
        f"pods of earlier tries of this task, {problem}; try {identity.try_number}'s pod is not "
        "started beside them (Airflow retries the try)"
    )


def _earlier_pods_in_the_way(client: PodClient, identity: TryIdentity, namespace: str) -> list[Json]:
    """Pods of earlier tries of this task not stopped for good, and not kept on purpose (a kept pod
    being deleted all the same is on its way out: it no longer counts as kept)."""
    found = []
    for pod in client.list_pods(namespace, identity.selector("instance")):
        meta = pod.get("metadata") or {}
        pod_labels = meta.get("labels") or {}
        try_label = str(pod_labels.get("try_number", ""))
        if not try_label.isdigit() or int(try_label) >= identity.try_number:
            continue
        if not identity.earlier(int(try_label)).owns(pod_labels):
            continue
        stopping = bool(meta.get("deletionTimestamp"))
        stamp_found = read_stamp(pod)
        if stamp_found is not None and stamp_found.kept and not stopping:
            continue
        if not (stopping and not _runs(pod)):
            found.append(pod)
    return found


def _runs(pod: Mapping[str, Any]) -> bool:
    """Whether any container of ``pod`` may still run (a pod that has not stopped for good)."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return False
    statuses = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    return not statuses or any("terminated" not in (cs.get("state") or {}) for cs in statuses)


def _delete_now(client: PodClient, namespace: str, pods: list[Json], deleted: list[str], *, log: Log) -> bool:
    """Delete ``pods`` with no grace, once each (the caller retries); True when none failed."""
    ok = True
    for pod in pods:
        meta = pod["metadata"]
        name, try_label = str(meta["name"]), (meta.get("labels") or {}).get("try_number")
        try:
            # No grace: the try it belongs to is over, and a container slow to stop after SIGTERM
            # would still run when this try's pod starts.
            if client.delete(namespace, name, meta["uid"], grace_period_seconds=0) and name not in deleted:
                deleted.append(name)
                log(
                    "Deleted pod %s/%s left by try %s of this task (it ended without its cleanup, or "
                    "was still stopping)",
                    namespace,
                    name,
                    try_label,
                )
        except KubeError as exc:
            ok = False
            log("Pod %s of try %s is still there: delete failed: %s", name, try_label, exc)
    return ok


def delete_try_pods(
    client: PodClient,
    identity: TryIdentity,
    namespace: str,
    *,
    log: Log,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Delete every pod of this task-instance try (any relaunch), e.g. after its deferral ended."""
    try:
        for pod in client.list_pods(namespace, identity.selector("try")):
            meta = pod["metadata"]
            if identity.owns_pod(pod) and delete(client, namespace, meta["name"], meta["uid"], sleep=sleep):
                log("Deleted pod %s/%s after the deferral ended", namespace, meta["name"])
    except KubeError as exc:
        log("Could not clean up the pods of try %d: %s", identity.try_number, exc)


def delete_earlier_relaunches(
    client: PodClient,
    identity: TryIdentity,
    namespace: str,
    relaunch: int,
    *,
    log: Log,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Delete pods of this try's earlier relaunches that are still there (their delete failed
    when the relaunch started): nothing else would once the try succeeds. False when one may be
    left (the pods could not be listed, or a delete failed)."""
    try:
        pods = client.list_pods(namespace, identity.selector("try"))
    except KubeError as exc:
        log("Could not look for pods of earlier relaunches: %s", exc)
        return False
    gone = True
    for pod in pods:
        meta = pod.get("metadata") or {}
        number = str((meta.get("labels") or {}).get(RELAUNCH_LABEL, "0"))
        found = read_stamp(pod)
        if not number.isdigit() or int(number) >= relaunch or meta.get("deletionTimestamp"):
            continue
        if not identity.owns_pod(pod) or (found is not None and found.kept):
            continue
        try:
            if delete(client, namespace, meta["name"], meta["uid"], grace_period_seconds=0, sleep=sleep):
                log(
                    "Deleted pod %s/%s of relaunch %s, left when the relaunch began",
                    namespace,
                    meta["name"],
                    number,
                )
        except KubeError as exc:
            gone = False
            log("Pod %s of relaunch %s left behind: delete failed: %s", meta["name"], number, exc)
    return gone
