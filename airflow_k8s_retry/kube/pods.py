"""Synchronous pod operations for the operator and the sensor, in this package's own error terms.

Creating is idempotent per try: a create that meets 409 adopts the existing pod only when its
labels name the same try (and relaunch), so a retried ``execute`` never starts a second pod and
never takes over another try's pod. Deleting is by UID (a precondition), so a pod that was
replaced under the same name is never deleted by mistake. Every client-library error is turned
into a :mod:`~airflow_k8s_retry.kube.errors` class here; nothing above ``kube/`` sees one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_k8s_retry.kube.errors import (
    Conflict,
    Forbidden,
    Invalid,
    KubeError,
    NotFound,
    _status_message,
    error_for_status,
    translate,
)
from airflow_k8s_retry.kube.naming import RELAUNCH_LABEL, VERDICT_ANNOTATION, TryIdentity
from airflow_k8s_retry.kube.ordering import event_sort_key
from airflow_k8s_retry.kube.rbac import rbac_message

if TYPE_CHECKING:
    import kubernetes.client

Json = dict[str, Any]

#: The cncf provider's XCom convention (its sidecar's name and the file the task writes).
XCOM_SIDECAR_NAME = "airflow-xcom-sidecar"
XCOM_RESULT_PATH = "/airflow/xcom/return.json"
#: The cncf provider's read of the result: the file, or the empty-result marker.
READ_RESULT = (
    f"if [ -s {XCOM_RESULT_PATH} ]; then cat {XCOM_RESULT_PATH}; else echo __airflow_xcom_result_empty__; fi"
)


class PodOfAnotherTry(Conflict):
    """A pod with the wanted name exists but belongs to another try: it is never adopted."""


class XComReadError(KubeError):
    """The XCom result could not be read from the sidecar, or is not valid JSON."""


#: The exec protocol's status channel (``v4.channel.k8s.io``: a ``Status`` once the command ends).
ERROR_CHANNEL = 3
#: What the cncf provider's sidecar read prints when the task wrote no result, so that "no result"
#: and "could not read" differ.
EMPTY_RESULT = "__airflow_xcom_result_empty__"


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


def _client_errors() -> tuple[type[BaseException], ...]:
    import urllib3
    from kubernetes.client.exceptions import ApiException, OpenApiException

    errors: list[type[BaseException]] = [ApiException, OpenApiException, OSError]
    errors.append(urllib3.exceptions.HTTPError)
    try:
        import websocket

        errors.append(websocket.WebSocketException)
    except ImportError:  # pragma: no cover - installed with kubernetes
        pass
    return tuple(errors)


@contextmanager
def _translated() -> Iterator[None]:
    """Client-library and transport errors leave ``kube/`` as :class:`KubeError`, nothing else."""
    try:
        yield
    except KubeError:
        raise
    except _client_errors() as exc:
        raise translate(exc) from exc


def _refused_upgrade(exc: BaseException, what: str) -> KubeError | None:
    """The API's answer to a refused exec upgrade, found in ``exc``'s chain; None if there is none."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        status = getattr(current, "status_code", None)
        if type(current).__name__ == "WebSocketBadStatusException" and isinstance(status, int):
            body = getattr(current, "resp_body", None)
            message, reason = _status_message(body, f"HTTP {status}")
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
        try:
            with _translated():
                created = self._json(
                    self.core.create_namespaced_pod(
                        namespace=namespace, body=dict(pod), _request_timeout=self.request_timeout
                    )
                )
            return CreatedPod(name, namespace, created["metadata"]["uid"], adopted=False, body=created)
        except Conflict:
            existing = self.read(namespace, name)
            if existing is None:
                # It went away between the create and the read: try once more, without adopting.
                with _translated():
                    created = self._json(
                        self.core.create_namespaced_pod(
                            namespace=namespace, body=dict(pod), _request_timeout=self.request_timeout
                        )
                    )
                return CreatedPod(name, namespace, created["metadata"]["uid"], adopted=False, body=created)
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
            with _translated():
                return self._json(
                    self.core.read_namespaced_pod(
                        name=name, namespace=namespace, _request_timeout=self.request_timeout
                    )
                )
        except NotFound:
            return None

    def list_pods(self, namespace: str, label_selector: str) -> list[Json]:
        with _translated():
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
        with _translated():
            result = calls[resource]()
        return [self._json(item) for item in result.items]

    def stamp_verdict(self, namespace: str, name: str, uid: str, stamp: str) -> bool:
        """Write the verdict annotation (see ``stamps.encode_stamp``) on the pod with this UID, in
        one request: the UID in the patch is a precondition (a replaced pod answers 409). False when
        that pod is gone or replaced."""
        body = {"metadata": {"uid": uid, "annotations": {VERDICT_ANNOTATION: stamp}}}
        try:
            with _translated():
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
            with _translated():
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
        with _translated():
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
            with _translated():
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

        upgrade_errors: tuple[type[BaseException], ...] = (AttributeError, *_client_errors())
        with _translated():
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
            self.stop_xcom_sidecar(namespace, name)
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

    def stop_xcom_sidecar(self, namespace: str, name: str) -> None:
        # A failure means the sidecar is gone already; the pod is deleted next anyway.
        with suppress(KubeError):
            self.exec_command(namespace, name, XCOM_SIDECAR_NAME, ["kill", "-s", "SIGINT", "1"])
