"""Asynchronous pod operations for the triggerer, as plain JSON, with this package's errors.

The trigger and the watch hub run in the triggerer's event loop and speak ``kubernetes_asyncio``.
Every call here asks for the raw response (``_preload_content=False``) and returns the API's JSON as
dicts, the shape the classifier reads, instead of generated model objects; and every failure leaves
this module as a :class:`~airflow_k8s_retry.kube.errors.KubeError` (``ApiException``, ``aiohttp``
and timeout errors never escape ``kube/``).

Example::

    kube = await AsyncKube.connect(ClusterConfig(kube_config_path="/tmp/fake/kubeconfig"))
    try:
        pod = await kube.read_pod("default", "my-pod")
        async for change in kube.watch_pods("default", resource_version=rv, label_selector=SEL):
            ...
    finally:
        await kube.close()
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_k8s_retry.kube.config import ClusterConfig, async_api_client
from airflow_k8s_retry.kube.errors import KubeError, TransportError, error_for_status, translate

if TYPE_CHECKING:
    import aiohttp
    import kubernetes_asyncio.client

Json = dict[str, Any]

#: (connect, read) timeouts in seconds for ordinary requests.
REQUEST_TIMEOUT = (10.0, 30.0)
#: Extra read time a watch gets past its server-side timeout before the client gives up on it.
WATCH_READ_SLACK = 15.0
#: A watch that sends nothing for this long, not even a bookmark (the apiserver's watch cache sends
#: one about every minute), is presumed dead and re-opened from its resourceVersion.
WATCH_IDLE_LIMIT = 300.0
MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class WatchEvent:
    """One line of a watch stream: ``ADDED``, ``MODIFIED``, ``DELETED`` or ``BOOKMARK``."""

    type: str
    object: Json

    @property
    def resource_version(self) -> str | None:
        rv = (self.object.get("metadata") or {}).get("resourceVersion")
        return str(rv) if rv else None


@dataclass(frozen=True)
class Listing:
    """A LIST answer: the items and the collection's resourceVersion to watch from."""

    items: list[Json]
    resource_version: str


def _status_fields(raw: bytes, fallback: str) -> tuple[str, str, Any]:
    """``message``, ``reason`` and the parsed body of a Kubernetes ``Status`` answer."""
    text = raw.decode("utf-8", "replace")
    try:
        body: Any = json.loads(text)
    except ValueError:
        return (text.strip() or fallback), "", text
    if isinstance(body, dict):
        return str(body.get("message") or fallback), str(body.get("reason") or ""), body
    return fallback, "", body


async def _check(resp: aiohttp.ClientResponse, what: str) -> None:
    """Raise the matching :class:`KubeError` for a non-2xx answer (and release the response)."""
    if 200 <= resp.status < 300:
        return
    try:
        raw = await resp.read()
    finally:
        resp.release()
    message, reason, body = _status_fields(raw, f"HTTP {resp.status}")
    raise error_for_status(resp.status, f"{what}: {message}", reason=reason, body=body)


async def _json_of(call: Awaitable[Any], what: str) -> Json:
    try:
        resp = await call
        await _check(resp, what)
        try:
            raw = await resp.read()
        finally:
            resp.release()
        data = json.loads(raw) if raw else {}
    except KubeError:
        raise
    except Exception as exc:
        raise _translated(exc, what) from exc
    if not isinstance(data, dict):
        raise TransportError(f"{what}: expected a JSON object, got {type(data).__name__}")
    return data


def _translated(exc: BaseException, what: str) -> KubeError:
    err = translate(exc)
    if isinstance(err, TransportError) and not str(err).startswith(what):
        return TransportError(f"{what}: {err}")
    return err


class AsyncKube:
    """Pod, Event and log operations on one ``kubernetes_asyncio`` client."""

    def __init__(self, api_client: kubernetes_asyncio.client.ApiClient) -> None:
        from kubernetes_asyncio import client

        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)

    @classmethod
    async def connect(cls, config: ClusterConfig) -> AsyncKube:
        """A client for ``config`` in the running event loop."""
        try:
            api_client = await async_api_client(config)
        except KubeError:
            raise
        except Exception as exc:
            raise _translated(exc, f"loading cluster config {config!r}") from exc
        return cls(api_client)

    async def close(self) -> None:
        await self.api_client.close()

    # -- pods -------------------------------------------------------------------------------

    async def read_pod(self, namespace: str, name: str) -> Json:
        """The pod as JSON; raises :class:`~airflow_k8s_retry.kube.errors.NotFound` when absent."""
        return await _json_of(
            self.core.read_namespaced_pod(
                name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            ),
            f"reading pod {namespace}/{name}",
        )

    async def list_pods(
        self, namespace: str, *, label_selector: str | None = None, field_selector: str | None = None
    ) -> Listing:
        kwargs: dict[str, Any] = {}
        if label_selector:
            kwargs["label_selector"] = label_selector
        if field_selector:
            kwargs["field_selector"] = field_selector
        data = await _json_of(
            self.core.list_namespaced_pod(
                namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs
            ),
            f"listing pods in {namespace}",
        )
        return _listing(data)

    def watch_pods(
        self,
        namespace: str,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncIterator[WatchEvent]:
        """Stream pod changes after ``resource_version`` until the server ends the watch.

        Raises :class:`~airflow_k8s_retry.kube.errors.Gone` when the version is too old (re-list),
        and the matching :class:`KubeError` for any other failure, including a dropped connection.
        """
        return self._watch(
            self.core.list_namespaced_pod,
            namespace,
            f"watching pods in {namespace}",
            resource_version=resource_version,
            label_selector=label_selector,
            field_selector=field_selector,
            timeout_seconds=timeout_seconds,
        )

    async def patch_pod_annotations(
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None],
        *,
        uid: str | None = None,
    ) -> Json:
        """Merge-patch annotations (``None`` removes one). With ``uid``, a replaced pod is not touched:
        the API answers 409 (:class:`~airflow_k8s_retry.kube.errors.Conflict`)."""
        metadata: Json = {"annotations": dict(annotations)}
        if uid:
            metadata["uid"] = uid
        return await _json_of(
            self.core.patch_namespaced_pod(
                name,
                namespace,
                {"metadata": metadata},
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
            ),
            f"annotating pod {namespace}/{name}",
        )

    async def delete_pod(
        self, namespace: str, name: str, uid: str, *, grace_period_seconds: int | None = None
    ) -> bool:
        """Delete the pod only if it still has ``uid``. False when it was already gone or replaced."""
        from airflow_k8s_retry.kube.errors import Conflict, NotFound

        body: Json = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": uid}}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        try:
            await _json_of(
                self.core.delete_namespaced_pod(
                    name, namespace, body=body, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
                ),
                f"deleting pod {namespace}/{name}",
            )
        except (NotFound, Conflict):
            return False
        return True

    async def read_log(
        self, namespace: str, name: str, *, container: str | None = None, tail_lines: int | None = None
    ) -> str:
        kwargs: dict[str, Any] = {}
        if container:
            kwargs["container"] = container
        if tail_lines is not None:
            kwargs["tail_lines"] = tail_lines
        what = f"reading the log of pod {namespace}/{name}"
        try:
            resp = await self.core.read_namespaced_pod_log(
                name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs
            )
            await _check(resp, what)
            try:
                raw: bytes = await resp.read()
            finally:
                resp.release()
        except KubeError:
            raise
        except Exception as exc:
            raise _translated(exc, what) from exc
        return raw.decode("utf-8", "replace")

    # -- events -----------------------------------------------------------------------------

    async def list_events(self, namespace: str, *, field_selector: str | None = None) -> Listing:
        kwargs: dict[str, Any] = {"field_selector": field_selector} if field_selector else {}
        data = await _json_of(
            self.core.list_namespaced_event(
                namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs
            ),
            f"listing events in {namespace}",
        )
        return _listing(data)

    async def pod_events(self, namespace: str, name: str, uid: str | None = None) -> list[Json]:
        """The Events about one pod, oldest first."""
        listing = await self.list_events(
            namespace, field_selector=f"involvedObject.kind=Pod,involvedObject.name={name}"
        )
        items = [
            e
            for e in listing.items
            if (e.get("involvedObject") or {}).get("name") == name
            and (uid is None or (e.get("involvedObject") or {}).get("uid") in (None, "", uid))
        ]
        return sorted(items, key=_event_time)

    def watch_events(
        self,
        namespace: str,
        *,
        resource_version: str,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncIterator[WatchEvent]:
        return self._watch(
            self.core.list_namespaced_event,
            namespace,
            f"watching events in {namespace}",
            resource_version=resource_version,
            label_selector=None,
            field_selector=field_selector,
            timeout_seconds=timeout_seconds,
        )

    # -- jobs (batch/v1), for the sensor following a Job's pods -------------------------------

    async def list_jobs(self, namespace: str) -> Listing:
        data = await _json_of(
            self.batch.list_namespaced_job(
                namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            ),
            f"listing jobs in {namespace}",
        )
        return _listing(data)

    def watch_jobs(
        self, namespace: str, *, resource_version: str, timeout_seconds: int = 300
    ) -> AsyncIterator[WatchEvent]:
        return self._watch(
            self.batch.list_namespaced_job,
            namespace,
            f"watching jobs in {namespace}",
            resource_version=resource_version,
            label_selector=None,
            field_selector=None,
            timeout_seconds=timeout_seconds,
        )

    # -- the watch protocol -----------------------------------------------------------------

    async def _watch(
        self,
        method: Callable[..., Awaitable[Any]],
        namespace: str,
        what: str,
        *,
        resource_version: str,
        label_selector: str | None,
        field_selector: str | None,
        timeout_seconds: int,
    ) -> AsyncIterator[WatchEvent]:
        kwargs: dict[str, Any] = {
            "watch": True,
            "allow_watch_bookmarks": True,
            "timeout_seconds": timeout_seconds,
        }
        if resource_version:
            kwargs["resource_version"] = resource_version
        if label_selector:
            kwargs["label_selector"] = label_selector
        if field_selector:
            kwargs["field_selector"] = field_selector
        try:
            resp = await method(
                namespace,
                _preload_content=False,
                _request_timeout=(
                    REQUEST_TIMEOUT[0],
                    min(timeout_seconds + WATCH_READ_SLACK, WATCH_IDLE_LIMIT),
                ),
                **kwargs,
            )
            await _check(resp, what)
        except KubeError:
            raise
        except Exception as exc:
            raise _translated(exc, what) from exc
        try:
            buffer = b""
            while True:
                try:
                    chunk = await resp.content.readany()
                except Exception as exc:
                    raise _translated(exc, what) from exc
                if not chunk:
                    break
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield _watch_event(line, what)
            if buffer.strip():
                yield _watch_event(buffer, what)
        finally:
            resp.close()


def _listing(data: Json) -> Listing:
    items = [i for i in data.get("items") or [] if isinstance(i, dict)]
    rv = str((data.get("metadata") or {}).get("resourceVersion") or "")
    return Listing(items=items, resource_version=rv)


def _watch_event(line: bytes, what: str) -> WatchEvent:
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise TransportError(f"{what}: unreadable watch line ({exc})") from exc
    if not isinstance(data, dict) or "type" not in data:
        raise TransportError(f"{what}: malformed watch line")
    obj = data.get("object") or {}
    if data["type"] == "ERROR":
        code = int(obj.get("code") or 500)
        raise error_for_status(
            code, f"{what}: {obj.get('message') or 'error'}", reason=str(obj.get("reason") or ""), body=obj
        )
    return WatchEvent(type=str(data["type"]), object=obj)


def _event_time(event: Mapping[str, Any]) -> str:
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )
