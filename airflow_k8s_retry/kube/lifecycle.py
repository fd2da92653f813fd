"""The life of one try's pod, shared by the operator and the sensor: create or adopt, sweep what
earlier tries left, stamp the verdict, delete by UID (with bounded retries), judge a create error.

Airflow-free: it works on API JSON and a :class:`~airflow_k8s_retry.kube.pods.PodClient`, so the
rules that keep "one pod per try" and "nothing left behind" are in one place and unit-testable.

The verdict stamp is written and read by :mod:`~airflow_k8s_retry.kube.stamps` (its one owner,
whose reader tolerates anything malformed). Every pod is stamped before it is deleted or kept
(:func:`finish`), so whatever meets it afterwards (a late trigger, a sweep, ``kubectl get pod``
while it terminates) reads the verdict instead of judging again; a pod whose delete did not get
through is left to the next try's sweep unless it was kept on purpose.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from enum import StrEnum
from typing import Any

from airflow_k8s_retry.classification.model import Outcome, Reason, Verdict
from airflow_k8s_retry.kube import snapshot
from airflow_k8s_retry.kube.errors import (
    BadRequest,
    CertificateError,
    Conflict,
    Invalid,
    KubeError,
    NotFound,
    TransportError,
)
from airflow_k8s_retry.kube.naming import (
    RELAUNCH_LABEL,
    TryIdentity,
)
from airflow_k8s_retry.kube.pods import CreatedPod, PodClient, PodOfAnotherTry
from airflow_k8s_retry.kube.stamps import encode_stamp, read_stamp

Json = dict[str, Any]
Log = Callable[..., None]

#: Seconds between delete attempts; four attempts in all, about 3.5 s at most.
DELETE_BACKOFF = (0.5, 1.0, 2.0)
#: Seconds between attempts to delete the pod of a finished try: seven attempts over about 30 s.
#: On a last try nothing deletes that pod afterwards (no next try sweeps), and an API server that
#: restarts refuses connections for tens of seconds (the soak leaked a pod to 3.5 s).
FINISH_BACKOFF = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)
#: Pauses between attempts to read and delete the pod of a task a user killed (seconds): eight
#: attempts over about 22 s (inside Airflow's 30 s for a trigger's ``on_kill``). Nothing else
#: deletes that pod, so a flapping authorizer's 403 and a 5xx are both worth the wait.
KILL_BACKOFF = (0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0)
#: Seconds between the sweep's looks at earlier tries' pods that are still there (each look deletes
#: them again); about 30 s in all, on the caller's clock.
SWEEP_BACKOFF = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)
#: Seconds between create attempts after a transient error (the name makes creates idempotent).
CREATE_BACKOFF = (1.0, 2.0)


def stamp(
    client: PodClient,
    pod: CreatedPod,
    verdict: Verdict,
    *,
    kept: bool,
    log: Log,
    sleep: Callable[[float], None] = time.sleep,
    backoff: tuple[float, ...] = DELETE_BACKOFF,
) -> bool:
    """Stamp the verdict, retrying transient errors with backoff; a last error is logged and
    False returned (the cleanup goes on regardless; a pod meant to be kept is then deleted)."""
    for attempt in range(len(backoff) + 1):
        try:
            return client.stamp_verdict(pod.namespace, pod.name, pod.uid, encode_stamp(verdict, kept=kept))
        except KubeError as exc:
            if not (exc.transient or isinstance(exc, TransportError)) or attempt == len(backoff):
                log("Could not stamp the verdict on pod %s: %s", pod.name, exc)
                return False
            sleep(backoff[attempt])
    return False  # pragma: no cover


def withhold_termination_messages(verdict: Verdict, pod: Mapping[str, Any] | None) -> Verdict:
    """``verdict`` without the containers' termination messages (in its message and evidence).

    A termination message is whatever the container wrote (with ``FallbackToLogsOnError``, the end
    of its log), so it stays out of XCom, the pod's annotation and the exception text.
    """
    messages = sorted(snapshot.termination_messages(pod), key=len, reverse=True)
    if not messages:
        return verdict

    def scrub(text: str) -> str:
        for message in messages:
            for piece in (message, message[:500]):
                text = text.replace(piece, "<termination message withheld>")
        return text

    evidence = tuple(replace(e, message=scrub(e.message)) for e in verdict.evidence)
    return replace(verdict, message=scrub(verdict.message), evidence=evidence)


# -- deleting ----------------------------------------------------------------------------------


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


def delete(
    client: PodClient,
    namespace: str,
    name: str,
    uid: str,
    *,
    grace_period_seconds: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
    backoff: tuple[float, ...] = DELETE_BACKOFF,
) -> bool:
    """Delete the pod with this UID, retrying API errors with backoff.

    True when this call deleted it, False when it was already gone or replaced. A delete is
    idempotent (the UID is a precondition), so retrying is safe. Raises the last
    :class:`KubeError` when every attempt failed or the API found the request malformed (400, 422).
    """
    for attempt in range(len(backoff) + 1):
        try:
            return client.delete(namespace, name, uid, grace_period_seconds=grace_period_seconds)
        except KubeError as exc:
            # Only a request the API found malformed fails the same way again. A 403 may be an
            # authorizer that failed for a moment (a webhook's timeout denies): a pod left running
            # costs far more than the few seconds a real denial costs here.
            if isinstance(exc, (BadRequest, Invalid)) or attempt == len(backoff):
                raise
            sleep(backoff[attempt])
    raise AssertionError("unreachable")  # pragma: no cover


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
    backoff: tuple[float, ...] = SWEEP_BACKOFF,
) -> list[str]:
    """Delete the pods earlier tries of this task left behind, and return once they are out of the
    way; return their names.

    An earlier try can end without its cleanup: it was marked failed or cleared while deferred
    before a triggerer ran its trigger, its worker died, or its delete failed after the stamp. Its
    pod may also still be stopping: a graceful delete leaves the containers running until they
    stop (``deletionTimestamp`` set). A new try proves the earlier one is over, so such a pod is
    deleted with no grace (which also shortens a pending graceful deletion) until it is gone or
    none of its containers runs. Pods stamped as *kept* stay (``on_finish_action``); pods of
    another deployment, DAG run, map index or task are never touched.

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
    """Pods of earlier tries of this task that are neither kept on purpose nor stopped for good."""
    found = []
    for pod in client.list_pods(namespace, identity.selector("instance")):
        meta = pod.get("metadata") or {}
        pod_labels = meta.get("labels") or {}
        try_label = str(pod_labels.get("try_number", ""))
        if not try_label.isdigit() or int(try_label) >= identity.try_number:
            continue
        stamp_found = read_stamp(pod)
        if not identity.earlier(int(try_label)).owns(pod_labels) or (
            stamp_found is not None and stamp_found.kept
        ):
            continue
        if not (meta.get("deletionTimestamp") and not _runs(pod)):
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
) -> None:
    """Delete pods of this try's earlier relaunches that are still there (their delete failed
    when the relaunch started): nothing else would once the try succeeds."""
    try:
        pods = client.list_pods(namespace, identity.selector("try"))
    except KubeError as exc:
        log("Could not look for pods of earlier relaunches: %s", exc)
        return
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
            log("Pod %s of relaunch %s left behind: delete failed: %s", meta["name"], number, exc)


# -- finishing ---------------------------------------------------------------------------------


class Ending(StrEnum):
    """What :func:`finish` did with a pod."""

    DELETED = "deleted"
    GONE = "gone"  # it was already gone, or another pod has the name now
    KEPT = "kept"  # kept on purpose, and stamped
    LEFT = "left"  # the delete failed; stamped "not kept" where the API allowed it


def finish(
    client: PodClient,
    pod: CreatedPod,
    verdict: Verdict | None,
    *,
    kept: bool,
    log: Log,
    sleep: Callable[[float], None] = time.sleep,
    grace_period_seconds: int | None = None,
) -> Ending:
    """End a pod's business: stamp its verdict, then delete it by UID unless kept; API errors are
    logged, never raised.

    The stamp comes first, so whatever finds the pod afterwards (a trigger that starts late, a
    sweep, ``kubectl get pod`` while it terminates, the demo's table) reads the verdict instead of
    judging it again. A pod to be kept whose stamp does not get through is deleted instead: an
    unmarked pod could not be told from a leaked one. A delete that does not get through (transient
    errors retried for about 30 s, :data:`FINISH_BACKOFF`) leaves the pod to the next try's sweep.
    """
    stamped = verdict is not None and stamp(client, pod, verdict, kept=kept, log=log, sleep=sleep)
    if kept and stamped:
        return Ending.KEPT
    try:
        deleted = delete(
            client,
            pod.namespace,
            pod.name,
            pod.uid,
            grace_period_seconds=grace_period_seconds,
            sleep=sleep,
            backoff=FINISH_BACKOFF,
        )
    except KubeError as exc:
        log(
            "Could not delete pod %s/%s (uid %s): %s; the next try deletes it",
            pod.namespace,
            pod.name,
            pod.uid,
            exc,
        )
        if kept and verdict is not None:
            stamp(client, pod, verdict, kept=False, log=log, sleep=sleep)  # no longer kept: sweep it
        return Ending.LEFT
    return Ending.DELETED if deleted else Ending.GONE


def started_containers(pod: Mapping[str, Any] | None) -> frozenset[str]:
    """Names of the containers of ``pod`` that ever ran (running or terminated, now or before):
    only those have a log to read."""
    status = (pod or {}).get("status") or {}
    ran = set()
    for kind in ("initContainerStatuses", "containerStatuses"):
        for cs in status.get(kind) or []:
            states = [cs.get("state") or {}, cs.get("lastState") or {}]
            if any(s.get("running") or s.get("terminated") for s in states):
                ran.add(str(cs.get("name")))
    return frozenset(ran)


def keeps(client: PodClient, pod: CreatedPod, on_finish_action: str, verdict: Verdict) -> bool:
    """Whether ``on_finish_action`` (KPO's values and meanings) keeps the pod after ``verdict``.

    ``delete_succeeded_pod`` keeps anything but a success (a skip included); ``delete_active_pod``
    keeps pods that have finished and deletes those still pending or running.
    """
    if on_finish_action == "keep_pod":
        return True
    if on_finish_action == "delete_succeeded_pod":
        return verdict.outcome is not Outcome.SUCCEED
    if on_finish_action == "delete_active_pod":
        if verdict.outcome is Outcome.SUCCEED:
            return True
        try:
            body = client.read(pod.namespace, pod.name)
        except KubeError:
            return False
        return ((body or {}).get("status") or {}).get("phase") in ("Succeeded", "Failed")
    return False


#: ``evidence(log_container=FIRST_CONTAINER)``: the tail of the pod's first container (a pod this
#: package did not build has no base container by name).
FIRST_CONTAINER = ""


def evidence(
    client: PodClient, pod: CreatedPod, log_container: str | None, *, log: Log
) -> tuple[Json | None, list[Json], str]:
    """The pod (if it still has this UID), its Events and, when ``log_container`` is given, the last
    20 lines of that container's log (of the first container for :data:`FIRST_CONTAINER`; none when
    no container ran): what a failure report is made of. API errors are logged."""
    body: Json | None = None
    events: list[Json] = []
    tail = ""
    try:
        body = client.read(pod.namespace, pod.name)
        if body is None or body["metadata"].get("uid") != pod.uid:
            return None, [], ""
        events = client.events(pod.namespace, pod.name, pod.uid)
        if log_container == FIRST_CONTAINER:
            log_container = next(
                iter(c.get("name") for c in (body.get("spec") or {}).get("containers") or []), None
            )
        if log_container and log_container in started_containers(body):
            tail = client.log(pod.namespace, pod.name, log_container, tail_lines=20)
    except KubeError as exc:
        log("Could not read the evidence of pod %s: %s", pod.name, exc)
    return body, events, tail


# -- creating ----------------------------------------------------------------------------------


def create(
    client: PodClient,
    pod: Mapping[str, Any],
    identity: TryIdentity,
    *,
    relaunch: int,
    sleep: Callable[[float], None] = time.sleep,
    backoff: tuple[float, ...] = CREATE_BACKOFF,
) -> CreatedPod:
    """Create (or adopt) the try's pod, retrying transient errors in-process.

    The name is deterministic per try, so a create whose response was lost is found again by the
    next attempt (409, then adopted when it is this try's). When every attempt failed, a pod the
    API may have written anyway is looked up and deleted, so nothing is left behind.
    """
    meta = pod["metadata"]
    last: KubeError | None = None
    for attempt in range(len(backoff) + 1):
        try:
            return client.create_or_adopt(pod, identity, relaunch=relaunch)
        except PodOfAnotherTry:
            raise
        except KubeError as exc:
            last = exc
            if create_error_outcome(exc)[0] is not Outcome.RETRY or attempt == len(backoff):
                break
            sleep(backoff[attempt])
    assert last is not None
    if create_error_outcome(last)[0] is Outcome.RETRY:
        remove_if_written(client, meta["namespace"], meta["name"], identity)
    raise last


def remove_if_written(client: PodClient, namespace: str, name: str, identity: TryIdentity) -> None:
    """Delete the try's pod if a create that seemed to fail did write it (best effort)."""
    try:
        existing = client.read(namespace, name)
        if existing is not None and identity.owns_pod(existing):
            delete(client, namespace, name, existing["metadata"]["uid"])
    except KubeError:
        pass  # the next try's sweep finds it


def create_error_outcome(exc: KubeError) -> tuple[Outcome, Reason]:
    """Judge an API error at create by the Status's code, reason and message.

    Transient (an Airflow retry, the next try meets other conditions): a ResourceQuota
    ``exceeded quota`` 403, 401 (a credential that expired or is being rotated), 409 after the
    adoption found no pod of this try, 429, 5xx and no answer at all. Permanent (another try would
    meet it again): 422 invalid spec, 400, 404 (namespace), RBAC, PodSecurity and LimitRange 403s.
    """
    text = str(exc).lower()
    if isinstance(exc, CertificateError):  # a wrong CA: every try would meet it
        return Outcome.FAIL, Reason.API_TLS_ERROR
    if exc.status == 403:
        if "exceeded quota" in text:
            return Outcome.RETRY, Reason.API_QUOTA_EXCEEDED
        return Outcome.FAIL, Reason.API_REJECTED
    if exc.status == 401:
        return Outcome.RETRY, Reason.API_UNAUTHORIZED
    if isinstance(exc, Conflict) and not isinstance(exc, PodOfAnotherTry):
        return Outcome.RETRY, Reason.API_CONFLICT
    if exc.transient or isinstance(exc, TransportError) or (exc.status or 0) >= 500:
        return Outcome.RETRY, Reason.API_UNAVAILABLE
    if isinstance(exc, NotFound) or exc.status in (400, 404, 422):
        return Outcome.FAIL, Reason.API_REJECTED
    # Any other answer (a 410 from a proxy, a 408) says nothing permanent: Airflow's retry decides.
    return Outcome.RETRY, Reason.API_UNAVAILABLE


def create_error_verdict(exc: KubeError, namespace: str, name: str) -> Verdict:
    outcome, reason = create_error_outcome(exc)
    status = f"HTTP {exc.status}" if exc.status else "no answer"
    verb = "refused to create" if outcome is Outcome.FAIL else "could not create"
    return Verdict(
        outcome=outcome,
        reason=reason,
        message=f"the API {verb} pod {namespace}/{name}: {status}: {exc}",
        rule="api.create",
    )
