"""A try's pods from the worker (the operator and the sensor): the synchronous client, in this
package's own error terms, and the rules of their life: create or adopt, stamp the verdict, delete
by UID (with bounded retries), judge a create error.

Airflow-free: it works on API JSON, so the rules that keep "one pod per try" and "nothing left
behind" are in one place and unit-testable. Every pod is stamped with its verdict before it is
deleted or kept (:func:`finish` says why; the stamp's codec is :mod:`~airflow_k8s_retry.kube.naming`'s);
a pod whose delete did not get through is left to the next try's sweep (:mod:`airflow_k8s_retry.kills`).
Every retry of an API call here, and in the kill handlers, goes through :func:`retrying` (or
:func:`aretrying`) with one of the pauses below.

Creating is idempotent per try: a create that meets 409 adopts the existing pod only when its
labels name the same try (and relaunch), so a retried ``execute`` never starts a second pod and
never takes over another try's pod. Deleting is by UID (a precondition), so a pod that was
replaced under the same name is never deleted by mistake. Every client-library error is turned
into a :mod:`~airflow_k8s_retry.kube.errors` class here; nothing above ``kube/`` sees one.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_k8s_retry.classification.model import Outcome, Reason, Verdict
from airflow_k8s_retry.kube.errors import (
    BadRequest,
    CertificateError,
    Conflict,
    Forbidden,
    Invalid,
    KubeError,
    NotFound,
    TransportError,
    error_for_status,
    status_fields,
    translate,
)
from airflow_k8s_retry.kube.naming import RELAUNCH_LABEL, VERDICT_ANNOTATION, TryIdentity, encode_stamp
from airflow_k8s_retry.kube.ordering import event_sort_key
from airflow_k8s_retry.kube.rbac import rbac_message

if TYPE_CHECKING:
    import kubernetes.client

Json = dict[str, Any]
Log = Callable[..., None]
T = TypeVar("T")

#: The cncf provider's XCom convention (its sidecar's name and the file the task writes).
XCOM_SIDECAR_NAME = "airflow-xcom-sidecar"
XCOM_RESULT_PATH = "/airflow/xcom/return.json"
#: What the cncf provider's sidecar read prints when the task wrote no result, so that "no result"
#: and "could not read" differ.
EMPTY_RESULT = "__airflow_xcom_result_empty__"
#: The cncf provider's read of the result: the file, or the empty-result marker.
READ_RESULT = f"if [ -s {XCOM_RESULT_PATH} ]; then cat {XCOM_RESULT_PATH}; else echo {EMPTY_RESULT}; fi"


class PodOfAnotherTry(Conflict):
    """A pod with the wanted name exists but belongs to another try: it is never adopted."""


class XComReadError(KubeError):
    """The XCom result could not be read from the sidecar, or is not valid JSON."""


#: The exec protocol's status channel (``v4.channel.k8s.io``: a ``Status`` once the command ends).
ERROR_CHANNEL = 3


def client_errors() -> tuple[type[BaseException], ...]:
    """What the synchronous client and its transport raise (what :func:`translated` translates)."""
    import urllib3
    from kubernetes.client.exceptions import ApiException, OpenApiException

    errors = [ApiException, OpenApiException, OSError, urllib3.exceptions.HTTPError]
    with suppress(ImportError):  # websocket-client is installed with kubernetes
        import websocket

        errors.append(websocket.WebSocketException)
    return tuple(errors)


@contextmanager
def translated() -> Iterator[None]:
    """Client-library and transport errors leave ``kube/`` as :class:`KubeError`, nothing else."""
    try:
        yield
    except KubeError:
        raise
    except client_errors() as exc:
        raise translate(exc) from exc


def _exec_failure(status: str) -> str | None:
    """The exec's failure from its status channel (a ``Status`` JSON), or ``None`` on success."""
    if not status.strip():
        return None
    try:
        parsed = json.loads(status)
    except ValueError:
        return status.strip()[:300]
    if not isinstance(parsed, dict) or parsed.get("status") == "Success":
        return None
    return str(parsed.get("message") or parsed.get("reason") or "Failure")[:300]


def _refused_upgrade(exc: BaseException, what: str) -> KubeError | None:
    """The API's answer to a refused exec upgrade, found in ``exc``'s chain; None if there is none."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        status = getattr(current, "status_code", None)
        if type(current).__name__ == "WebSocketBadStatusException" and isinstance(status, int):
            body = getattr(current, "resp_body", None)
            message, reason, _ = status_fields(body, f"HTTP {status}")
            return error_for_status(status, f"{what}: {message}", reason=reason, body=body)
        current = current.__cause__ or current.__context__
    return None


@dataclass(frozen=True)
class CreatedPod:
    """The pod a try runs in. ``adopted`` is True when it already existed (a resumed try)."""

    name: str
    namespace: str
    uid: str
    adopted: bool
    body: Json

    def as_v1pod(self) -> Any:
        """A ``kubernetes.client.V1Pod`` naming this pod (what KPO callbacks receive)."""
        from kubernetes.client import models as k8s

        return k8s.V1Pod(metadata=k8s.V1ObjectMeta(name=self.name, namespace=self.namespace, uid=self.uid))


def v1pod_from(body: Json) -> Any:
    """``body`` (a pod as JSON) as a ``kubernetes.client.V1Pod``; raises ``ValueError`` when the
    client's models refuse it (a field they require is missing)."""
    from kubernetes.client import ApiClient

    class _Answer:  # what ApiClient.deserialize reads: a response's body
        data = json.dumps(body)

    return ApiClient().deserialize(_Answer(), "V1Pod")


class PodClient:
    """Pod operations over one ``kubernetes.client.ApiClient``.

    Example::

        client = PodClient(sync_api_client(config))
        created = client.create_or_adopt(pod_json, identity, relaunch=0)
        client.delete(created.namespace, created.name, created.uid)
    """

    #: (connect, read) seconds for short requests; a stalled connection never blocks a worker.
    request_timeout: tuple[float, float] = (10.0, 60.0)
    #: The same for log reads and exec, which may stream for longer.
    stream_timeout: tuple[float, float] = (10.0, 300.0)

    def __init__(self, api_client: kubernetes.client.ApiClient) -> None:
        from kubernetes import client

        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)

    def close(self) -> None:
        self.api_client.close()

    def _json(self, obj: Any) -> Json:
        data = self.api_client.sanitize_for_serialization(obj)
        return data if isinstance(data, dict) else {}

    def create_or_adopt(
        self, pod: Mapping[str, Any], identity: TryIdentity, *, relaunch: int = 0
    ) -> CreatedPod:
        """Create ``pod``; on 409 adopt the existing pod only if its labels name this try and relaunch."""
        meta = pod["metadata"]
        namespace, name = meta["namespace"], meta["name"]

        def create() -> CreatedPod:
            with translated():
                created = self._json(
                    self.core.create_namespaced_pod(
                        namespace=namespace, body=dict(pod), _request_timeout=self.request_timeout
                    )
                )
            return CreatedPod(name, namespace, created["metadata"]["uid"], adopted=False, body=created)

        try:
            return create()
        except Conflict:
            existing = self.read(namespace, name)
            if existing is None:
                return create()  # it went away between the create and the read: once more, not adopting
            labels = existing["metadata"].get("labels") or {}
            if not identity.owns(labels) or labels.get(RELAUNCH_LABEL, "0") != str(relaunch):
                raise PodOfAnotherTry(
                    f"pod {namespace}/{name} already exists but its labels name another try "
                    f"(try_number={labels.get('try_number')!r}, relaunch={labels.get(RELAUNCH_LABEL)!r}); "
                    "it is left alone. Delete it, or check for two DAGs sharing one dag_id/task_id.",
                    status=409,
                ) from None
            if not identity.owns_pod(existing):
                raise PodOfAnotherTry(
                    f"pod {namespace}/{name} already exists but belongs to another task instance "
                    "(another incarnation of this DAG run, or another Airflow deployment); "
                    "it is left alone. Delete it if it is stale.",
                    status=409,
                ) from None
            return CreatedPod(name, namespace, existing["metadata"]["uid"], adopted=True, body=existing)

    def read(self, namespace: str, name: str) -> Json | None:
        """The pod as API JSON, or None when it does not exist."""
        try:
            with translated():
                return self._json(
                    self.core.read_namespaced_pod(
                        name=name, namespace=namespace, _request_timeout=self.request_timeout
                    )
                )
        except NotFound:
            return None

    def list_pods(self, namespace: str, label_selector: str) -> list[Json]:
        with translated():
            result = self.core.list_namespaced_pod(
                namespace=namespace, label_selector=label_selector, _request_timeout=self.request_timeout
            )
        return [self._json(p) for p in result.items]

    def list_sizing(self, resource: str, namespace: str | None = None) -> list[Json]:
        """The ``limitranges`` or ``resourcequotas`` of ``namespace``, or the cluster's ``nodes``:
        what bounds a pod's memory (one LIST, no watch)."""
        calls = {
            "limitranges": lambda: self.core.list_namespaced_limit_range(
                namespace, _request_timeout=self.request_timeout
            ),
            "resourcequotas": lambda: self.core.list_namespaced_resource_quota(
                namespace, _request_timeout=self.request_timeout
            ),
            "nodes": lambda: self.core.list_node(_request_timeout=self.request_timeout),
        }
        with translated():
            result = calls[resource]()
        return [self._json(item) for item in result.items]

    def stamp_verdict(self, namespace: str, name: str, uid: str, stamp: str) -> bool:
        """Write the verdict annotation (see ``stamps.encode_stamp``) on the pod with this UID, in
        one request: the UID in the patch is a precondition (a replaced pod answers 409). False when
        that pod is gone or replaced."""
        body = {"metadata": {"uid": uid, "annotations": {VERDICT_ANNOTATION: stamp}}}
        try:
            with translated():
                self.core.patch_namespaced_pod(
                    name=name,
                    namespace=namespace,
                    body=body,
                    _content_type="application/merge-patch+json",
                    _request_timeout=self.request_timeout,
                )
        except (NotFound, Conflict):
            return False
        except Invalid as exc:
            if "uid" in str(exc).lower():  # "metadata.uid: ... field is immutable": another pod now
                return False
            raise
        return True

    def delete(self, namespace: str, name: str, uid: str, *, grace_period_seconds: int | None = None) -> bool:
        """Delete the pod only if it still has this UID. False when it is already gone or replaced."""
        from kubernetes import client

        options = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(uid=uid),
            grace_period_seconds=grace_period_seconds,
            propagation_policy="Background",
        )
        try:
            with translated():
                self.core.delete_namespaced_pod(
                    name=name, namespace=namespace, body=options, _request_timeout=self.request_timeout
                )
        except (NotFound, Conflict):
            return False
        return True

    def events(self, namespace: str, name: str, uid: str | None = None) -> list[Json]:
        """Events about this pod, oldest first."""
        selector = f"involvedObject.name={name}"
        if uid:
            selector += f",involvedObject.uid={uid}"
        with translated():
            result = self.core.list_namespaced_event(
                namespace=namespace, field_selector=selector, _request_timeout=self.request_timeout
            )
        events = [self._json(e) for e in result.items]
        return sorted(events, key=event_sort_key)

    def log(
        self,
        namespace: str,
        name: str,
        container: str,
        *,
        tail_lines: int | None = None,
        timestamps: bool = False,
        since_seconds: int | None = None,
    ) -> str:
        """A container's log (its last ``tail_lines`` lines, or those of the last ``since_seconds``,
        each line after the kubelet's timestamp with ``timestamps``); empty when there is none yet."""
        window: dict[str, Any] = {"since_seconds": since_seconds} if since_seconds is not None else {}
        try:
            with translated():
                text = self.core.read_namespaced_pod_log(
                    name=name,
                    namespace=namespace,
                    container=container,
                    tail_lines=tail_lines,
                    timestamps=timestamps,
                    _preload_content=False,
                    _request_timeout=self.stream_timeout,
                    **window,
                )
                raw = text.data
        except (NotFound, Conflict):
            return ""
        except KubeError as exc:
            if exc.status == 400:  # container not started yet: no log to read
                return ""
            raise
        return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)

    def exec_command(self, namespace: str, name: str, container: str, command: list[str]) -> str:
        """Run ``command`` in a container over the exec websocket; return its stdout."""
        from kubernetes.stream import stream

        upgrade_errors: tuple[type[BaseException], ...] = (AttributeError, *client_errors())
        with translated():
            try:
                resp = stream(
                    self.core.connect_get_namespaced_pod_exec,
                    name,
                    namespace,
                    container=container,
                    command=command,
                    stdin=False,
                    stdout=True,
                    stderr=True,
                    tty=False,
                    _preload_content=False,
                )
            except upgrade_errors as exc:
                # A refused websocket upgrade reaches us as the client's own AttributeError (it
                # decodes a body that is None) or an ApiException with status 0; the answer is
                # in the WebSocketBadStatusException underneath.
                refused = _refused_upgrade(exc, f"exec in pod {namespace}/{name} ({container})")
                if refused is None:
                    raise
                if isinstance(refused, Forbidden):
                    # One line naming both verbs an exec needs, even when the API's message is
                    # cut off before the verb (as kube-apiserver's is without "create").
                    refused = Forbidden(
                        rbac_message(refused, "create", "pods/exec", namespace),
                        status=403,
                        reason=refused.reason,
                        body=refused.body,
                    )
                raise refused from None
            out: list[str] = []
            try:
                resp.run_forever(timeout=60)
                out.append(resp.read_stdout() or "")
                status = resp.read_channel(ERROR_CHANNEL) or ""
            finally:
                resp.close()
        failure = _exec_failure(status)
        if failure is not None:
            raise XComReadError(f"exec in pod {namespace}/{name} ({container}) failed: {failure}")
        return "".join(out)

    def read_xcom(self, namespace: str, name: str) -> Any:
        """The cncf convention: read ``return.json`` from the sidecar, then let the sidecar exit."""
        try:
            raw = self.exec_command(namespace, name, XCOM_SIDECAR_NAME, ["sh", "-c", READ_RESULT])
        finally:
            # Let the sidecar exit; a failure means it is gone already (the pod is deleted next anyway).
            with suppress(KubeError):
                self.exec_command(namespace, name, XCOM_SIDECAR_NAME, ["kill", "-s", "SIGINT", "1"])
        if raw.strip() == EMPTY_RESULT:  # the task wrote no result (an empty or missing file)
            return None
        if not raw.strip():
            raise XComReadError(
                f"pod {namespace}/{name}: reading {XCOM_RESULT_PATH} from the XCom sidecar returned "
                "nothing, not even the empty-result marker; the result could not be read"
            )
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise XComReadError(
                f"pod {namespace}/{name} wrote {XCOM_RESULT_PATH} but it is not valid JSON: {exc}; "
                "write the result with json.dump"
            ) from None


class _WithoutResponseBodies(logging.Filter):
    """Drop the clients' "response body" records (every body, at DEBUG: pod specs with env values,
    Secrets' data), so a DEBUG log level cannot leak secrets."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("response body")


_BODY_FILTER = _WithoutResponseBodies()


def keep_response_bodies_out_of_logs() -> None:
    """Filter the clients' response-body DEBUG records out, for every client the package uses
    (its own, and the cncf provider's ``KubernetesHook``'s); idempotent."""
    for name in ("kubernetes.client.rest", "kubernetes_asyncio.client.rest"):
        logger = logging.getLogger(name)
        if _BODY_FILTER not in logger.filters:
            logger.addFilter(_BODY_FILTER)


# -- the rules of a try's pod's life ------------------------------------------------------------

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


def retrying(
    call: Callable[[], T],
    pauses: Sequence[float],
    *,
    sleep: Callable[[float], None] = time.sleep,
    retry_if: Callable[[KubeError], bool] = lambda _exc: True,
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
