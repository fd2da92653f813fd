"""The life of one try's pod, shared by the operator and the sensor: create or adopt, stamp the
verdict, delete by UID (with bounded retries), judge a create error.

Airflow-free: it works on API JSON and a :class:`~airflow_k8s_retry.kube.pods.PodClient`, so the
rules that keep "one pod per try" and "nothing left behind" are in one place and unit-testable.

The verdict stamp is written and read by :mod:`~airflow_k8s_retry.kube.naming` (its one owner,
whose reader tolerates anything malformed). Every pod is stamped before it is deleted or kept
(:func:`finish`), so whatever meets it afterwards (a late trigger, a sweep, ``kubectl get pod``
while it terminates) reads the verdict instead of judging again; a pod whose delete did not get
through is left to the next try's sweep (:mod:`airflow_k8s_retry.kills`) unless it was kept on
purpose. Every retry of an API call here, and in the kill handlers, goes through :func:`retrying`
(or :func:`aretrying`) with one of the pauses below.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from enum import StrEnum
from typing import Any, TypeVar

from airflow_k8s_retry.classification.model import Outcome, Reason, Verdict
from airflow_k8s_retry.kube.errors import (
    BadRequest,
    CertificateError,
    Conflict,
    Invalid,
    KubeError,
    NotFound,
    TransportError,
)
from airflow_k8s_retry.kube.naming import TryIdentity, encode_stamp
from airflow_k8s_retry.kube.pods import CreatedPod, PodClient, PodOfAnotherTry

Json = dict[str, Any]
Log = Callable[..., None]
T = TypeVar("T")

#: Pauses (seconds) for a call whose failure the caller can live with: four attempts, about 3.5 s.
SHORT_BACKOFF = (0.5, 1.0, 2.0)
#: Pauses for a call that nothing repeats later (deleting a last try's pod, the sweep's looks):
#: seven attempts over about 30 s, as long as an API server's restart refuses connections (the
#: soak leaked a pod to 3.5 s).
OUTAGE_BACKOFF = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)
#: Pauses for reading and deleting the pod of a task a user killed: eight attempts over about 22 s,
#: inside Airflow's 30 s for a trigger's ``on_kill``. Nothing else deletes that pod, so a flapping
#: authorizer's 403 and a 5xx are both worth the wait.
KILL_BACKOFF = (0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0)
#: Pauses between create attempts after a transient error (the name makes creates idempotent).
CREATE_BACKOFF = (1.0, 2.0)


def _always(_exc: KubeError) -> bool:
    return True


def retrying(
    call: Callable[[], T],
    pauses: Sequence[float],
    *,
    sleep: Callable[[float], None] = time.sleep,
    retry_if: Callable[[KubeError], bool] = _always,
    before_pause: Callable[[KubeError], None] | None = None,
) -> T:
    """``call()``, again after each of ``pauses`` while it raises a :class:`KubeError` that
    ``retry_if`` accepts; the last error (or one ``retry_if`` refuses) is raised."""
    for pause in (*pauses, None):
        try:
            return call()
        except KubeError as exc:
            if pause is None or not retry_if(exc):
                raise
            if before_pause is not None:
                before_pause(exc)
            sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover


async def aretrying(
    call: Callable[[], Awaitable[T]],
    pauses: Sequence[float],
    *,
    sleep: Callable[[float], Awaitable[None]],
    before_pause: Callable[[KubeError], None] | None = None,
) -> T:
    """:func:`retrying` for a coroutine, pausing with ``sleep`` (a clock's)."""
    for pause in (*pauses, None):
        try:
            return await call()
        except KubeError as exc:
            if pause is None:
                raise
            if before_pause is not None:
                before_pause(exc)
            await sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover


def transient(exc: KubeError) -> bool:
    """An error the same request may not meet again: 429, 5xx, no answer."""
    return exc.transient or isinstance(exc, TransportError)


def stamp(
    client: PodClient,
    pod: CreatedPod,
    verdict: Verdict,
    *,
    kept: bool,
    log: Log,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Stamp the verdict, retrying transient errors; a last error is logged and False returned
    (the cleanup goes on regardless; a pod meant to be kept is then deleted)."""
    value = encode_stamp(verdict, kept=kept)
    try:
        return retrying(
            lambda: client.stamp_verdict(pod.namespace, pod.name, pod.uid, value),
            SHORT_BACKOFF,
            sleep=sleep,
            retry_if=transient,
        )
    except KubeError as exc:
        log("Could not stamp the verdict on pod %s: %s", pod.name, exc)
        return False


# -- deleting ----------------------------------------------------------------------------------


def delete(
    client: PodClient,
    namespace: str,
    name: str,
    uid: str,
    *,
    grace_period_seconds: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
    backoff: Sequence[float] = SHORT_BACKOFF,
) -> bool:
    """Delete the pod with this UID, retrying API errors with backoff.

    True when this call deleted it, False when it was already gone or replaced. A delete is
    idempotent (the UID is a precondition), so retrying is safe. Raises the last
    :class:`KubeError` when every attempt failed or the API found the request malformed (400, 422).
    """
    # Only a request the API found malformed fails the same way again. A 403 may be an authorizer
    # that failed for a moment (a webhook's timeout denies): a pod left running costs far more than
    # the few seconds a real denial costs here.
    return retrying(
        lambda: client.delete(namespace, name, uid, grace_period_seconds=grace_period_seconds),
        backoff,
        sleep=sleep,
        retry_if=lambda exc: not isinstance(exc, (BadRequest, Invalid)),
    )


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
    errors retried for about 30 s, :data:`OUTAGE_BACKOFF`) leaves the pod to the next try's sweep.
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
            backoff=OUTAGE_BACKOFF,
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
) -> CreatedPod:
    """Create (or adopt) the try's pod, retrying transient errors in-process.

    The name is deterministic per try, so a create whose response was lost is found again by the
    next attempt (409, then adopted when it is this try's). When every attempt failed, a pod the
    API may have written anyway is looked up and deleted, so nothing is left behind.
    """
    meta = pod["metadata"]
    try:
        return retrying(
            lambda: client.create_or_adopt(pod, identity, relaunch=relaunch),
            CREATE_BACKOFF,
            sleep=sleep,
            retry_if=lambda exc: (
                not isinstance(exc, PodOfAnotherTry) and create_error_outcome(exc)[0] is Outcome.RETRY
            ),
        )
    except PodOfAnotherTry:
        raise
    except KubeError as exc:
        if create_error_outcome(exc)[0] is Outcome.RETRY:
            remove_if_written(client, meta["namespace"], meta["name"], identity)
        raise


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
