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

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_k8s_retry.kube.config import ClusterConfig, async_configuration, within_plugin_limit
from airflow_k8s_retry.kube.errors import (
    Conflict,
    Forbidden,
    KubeError,
    NotFound,
    TransportError,
    Unauthorized,
    error_for_status,
    status_fields,
    translate,
)
from airflow_k8s_retry.kube.ordering import resource_version

if TYPE_CHECKING:
    import aiohttp
    import kubernetes_asyncio.client

log = logging.getLogger(__name__)

Json = dict[str, Any]

#: (connect, read) timeouts in seconds for ordinary requests.
REQUEST_TIMEOUT = (10.0, 30.0)
#: Extra read time a watch gets past its server-side timeout before the client gives up on it.
WATCH_READ_SLACK = 15.0
#: A watch that sends nothing for this long, not even a bookmark (the apiserver's watch cache sends
#: one about every minute), is presumed dead and re-opened from its resourceVersion.
WATCH_IDLE_LIMIT = 300.0
MERGE_PATCH = "application/merge-patch+json"
#: How many short requests one client runs at once (watches have their own, unlimited connections).
REQUEST_POOL_SIZE = 100
#: How long loading credentials may take: a credential plugin that hangs must not hang the caller.
CONNECT_TIMEOUT = 60.0
#: Kueue's API group and the versions it serves Workloads in, newest first (v1beta2 since 0.15), and
#: the label it puts on the Workload of a plain pod, with the pod's UID (since 0.5).
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1beta2", "v1beta1")
KUEUE_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"


@dataclass(frozen=True)
class WatchEvent:
    """One line of a watch stream: ``ADDED``, ``MODIFIED``, ``DELETED`` or ``BOOKMARK``."""

    type: str
    object: Json

    @property
    def resource_version(self) -> str | None:
        return resource_version(self.object)


@dataclass(frozen=True)
class Listing:
    """A LIST answer: the items and the collection's resourceVersion to watch from."""

    items: list[Json]
    resource_version: str


async def _answer(send: Callable[[], Awaitable[Any]], what: str) -> aiohttp.ClientResponse:
    """``send()``'s response once it is known to be 2xx; any other answer raises the matching
    :class:`KubeError` (its response released)."""
    try:
        resp: aiohttp.ClientResponse = await send()
        if not 200 <= resp.status < 300:
            try:
                raw = await resp.read()
            finally:
                resp.release()
            message, reason, body = status_fields(raw, f"HTTP {resp.status}")
            raise error_for_status(resp.status, f"{what}: {message}", reason=reason, body=body)
    except KubeError:
        raise
    except Exception as exc:
        raise _translated(exc, what) from exc
    return resp


def _translated(exc: BaseException, what: str) -> KubeError:
    err = translate(exc)
    if isinstance(err, TransportError) and not str(err).startswith(what):
        return TransportError(f"{what}: {err}")
    return err


class AsyncKube:
    """Pod, Event and log operations on ``kubernetes_asyncio``, with two connection pools.

    Watches are long-lived (30 to 60 minutes each) and a triggerer may hold a thousand of them, so
    they get their own connections, without a limit; short requests (GET, LIST, PATCH, DELETE,
    logs) get a pool of their own and never queue behind a watch. Both share one
    ``Configuration``, so one credential refresh serves both.

    A ``401`` reloads the credentials once (an exec-plugin token that expired or was rotated, a
    re-mounted service-account token) and repeats the request when they changed.
    """

    def __init__(
        self,
        api_client: kubernetes_asyncio.client.ApiClient,
        watch_client: kubernetes_asyncio.client.ApiClient | None = None,
        config: ClusterConfig | None = None,
    ) -> None:
        from kubernetes_asyncio import client

        self.api_client = api_client
        self.watch_client = watch_client if watch_client is not None else api_client
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.watch_core = client.CoreV1Api(self.watch_client)
        self.watch_batch = client.BatchV1Api(self.watch_client)
        self.config = config
        self._auth_lock = asyncio.Lock()
        self._auth_generation = 0

    @classmethod
    async def connect(cls, config: ClusterConfig) -> AsyncKube:
        """A client for ``config`` in the running event loop.

        Loading credentials is bounded by :data:`CONNECT_TIMEOUT`: kubernetes_asyncio waits for a
        credential plugin without a limit, and a plugin that hangs must fail this call, not hang it.
        """
        from kubernetes_asyncio import client

        configuration = await _load_configuration(config)
        # aiohttp's connector: limit=0 means no limit (watches), the pool size caps the rest.
        configuration.connection_pool_maxsize = 0
        watch_client = client.ApiClient(configuration=configuration)
        configuration.connection_pool_maxsize = REQUEST_POOL_SIZE
        api_client = client.ApiClient(configuration=configuration)
        return cls(api_client, watch_client, config)

    async def close(self) -> None:
        await self.api_client.close()
        if self.watch_client is not self.api_client:
            await self.watch_client.close()

    async def reauthenticate(self, since: int | None = None) -> bool:
        """Load the credentials again after a ``401``; True when the caller should try again.

        ``since`` is how many reloads the failed request was sent after: when the
        credentials were reloaded after that (a concurrent request's 401 got there first), the
        caller just tries again with them, without a reload of its own. Without it, only a reload
        that finishes while this call waits for another counts.
        """
        if self.config is None:
            return False
        seen = self._auth_generation if since is None else since
        async with self._auth_lock:
            if self._auth_generation != seen:
                return True
            try:
                fresh = await _load_configuration(self.config)
            except KubeError as exc:
                log.warning("reloading the credentials of %r failed: %s", self.config, exc)
                return False
            configuration = self.api_client.configuration
            changed = dict(fresh.api_key) != dict(configuration.api_key)
            configuration.api_key = dict(fresh.api_key)
            configuration.api_key_prefix = dict(fresh.api_key_prefix)
            configuration.refresh_api_key_hook = fresh.refresh_api_key_hook
            self._auth_generation += 1
        if changed:
            log.info("credentials of %r reloaded after a 401", self.config)
        return changed

    async def _send(self, send: Callable[[], Awaitable[Any]], what: str) -> aiohttp.ClientResponse:
        """``send()``'s 2xx response; after a ``401``, sent once more if the credentials changed."""
        sent_under = self._auth_generation
        try:
            return await _answer(send, what)
        except Unauthorized:
            if not await self.reauthenticate(since=sent_under):
                raise
        return await _answer(send, what)

    async def _body(self, send: Callable[[], Awaitable[Any]], what: str) -> bytes:
        resp = await self._send(send, what)
        try:
            raw: bytes = await resp.read()
        except Exception as exc:
            raise _translated(exc, what) from exc
        finally:
            resp.release()
        return raw

    async def _json(self, send: Callable[[], Awaitable[Any]], what: str) -> Json:
        raw = await self._body(send, what)
        try:
            data = json.loads(raw) if raw else {}
        except Exception as exc:
            raise _translated(exc, what) from exc
        if not isinstance(data, dict):
            raise TransportError(f"{what}: expected a JSON object, got {type(data).__name__}")
        return data

    async def _list(
        self, method: Callable[..., Awaitable[Any]], args: tuple[str, ...], what: str, **selectors: str | None
    ) -> Listing:
        kwargs = {k: v for k, v in selectors.items() if v}
        data = await self._json(
            lambda: method(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs), what
        )
        return _listing(data)

    # -- pods -------------------------------------------------------------------------------

    async def read_pod(self, namespace: str, name: str) -> Json:
        """The pod as JSON; raises :class:`~airflow_k8s_retry.kube.errors.NotFound` when absent."""
        return await self._json(
            lambda: self.core.read_namespaced_pod(
                name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            ),
            f"reading pod {namespace}/{name}",
        )

    async def list_pods(
        self,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Listing:
        """Pods of ``namespace``, or of every namespace when it is None (a cluster-wide LIST)."""
        method, args, where = _scoped(
            namespace, self.core.list_pod_for_all_namespaces, self.core.list_namespaced_pod
        )
        return await self._list(
            method,
            args,
            f"listing pods in {where}",
            label_selector=label_selector,
            field_selector=field_selector,
        )

    def watch_pods(
        self,
        namespace: str | None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncIterator[WatchEvent]:
        """Stream pod changes after ``resource_version`` until the server ends the watch.

        ``namespace=None`` watches every namespace. Raises
        :class:`~airflow_k8s_retry.kube.errors.Gone` when the version is too old (re-list), and the
        matching :class:`KubeError` for any other failure, including a dropped connection.
        """
        method, args, where = _scoped(
            namespace, self.watch_core.list_pod_for_all_namespaces, self.watch_core.list_namespaced_pod
        )
        return self._watch(
            method,
            args,
            f"watching pods in {where}",
            timeout_seconds,
            resource_version=resource_version,
            label_selector=label_selector,
            field_selector=field_selector,
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
        return await self._json(
            lambda: self.core.patch_namespaced_pod(
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
        body: Json = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": uid}}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        try:
            await self._json(
                lambda: self.core.delete_namespaced_pod(
                    name, namespace, body=body, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
                ),
                f"deleting pod {namespace}/{name}",
            )
        except (NotFound, Conflict):
            return False
        return True

    async def read_log(
        self,
        namespace: str,
        name: str,
        *,
        container: str | None = None,
        tail_lines: int | None = None,
        timestamps: bool = False,
        since_seconds: int | None = None,
        previous: bool = False,
    ) -> str:
        """A container's log so far (``timestamps``: each line starts with the kubelet's time;
        ``previous``: of the container's run before the current one)."""
        asked = {
            "container": container or None,
            "tail_lines": tail_lines,
            "previous": previous or None,
            "timestamps": timestamps or None,
            "since_seconds": since_seconds,
        }
        kwargs: dict[str, Any] = {k: v for k, v in asked.items() if v is not None}
        raw = await self._body(
            lambda: self.core.read_namespaced_pod_log(
                name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs
            ),
            f"reading the log of pod {namespace}/{name}",
        )
        return raw.decode("utf-8", "replace")

    # -- events -----------------------------------------------------------------------------

    async def list_events(self, namespace: str | None, *, field_selector: str | None = None) -> Listing:
        """Events of ``namespace``, or of every namespace when it is None."""
        method, args, where = _scoped(
            namespace, self.core.list_event_for_all_namespaces, self.core.list_namespaced_event
        )
        return await self._list(method, args, f"listing events in {where}", field_selector=field_selector)

    def watch_events(
        self,
        namespace: str | None,
        *,
        resource_version: str,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncIterator[WatchEvent]:
        method, args, where = _scoped(
            namespace, self.watch_core.list_event_for_all_namespaces, self.watch_core.list_namespaced_event
        )
        return self._watch(
            method,
            args,
            f"watching events in {where}",
            timeout_seconds,
            resource_version=resource_version,
            field_selector=field_selector,
        )

    # -- Kueue's Workloads, for what the task log says about a queued pod ----------------------

    async def workload_of(self, namespace: str, pod_uid: str) -> tuple[Json | None, bool]:
        """The Kueue Workload of a plain pod (labelled with the pod's UID; None: none yet, or the read
        failed), and whether asking again may answer: not after a 403, nor where no Kueue serves
        Workloads (404), which is how a caller that merely wants to tell more stays quiet."""
        from kubernetes_asyncio import client

        api = client.CustomObjectsApi(self.api_client)
        for version in KUEUE_VERSIONS:
            try:
                listing = await self._list(
                    api.list_namespaced_custom_object,
                    (KUEUE_GROUP, version, namespace, "workloads"),
                    f"listing Kueue workloads in {namespace}",
                    label_selector=f"{KUEUE_JOB_UID_LABEL}={pod_uid}",
                )
            except NotFound:
                continue  # a Kueue older than 0.15 serves v1beta1 only
            except Forbidden:
                return None, False
            except KubeError:
                return None, True
            return (dict(listing.items[0]) if listing.items else None), True
        return None, False  # no version is served: no Kueue

    # -- jobs (batch/v1), for the sensor following a Job's pods -------------------------------

    async def list_jobs(self, namespace: str) -> Listing:
        return await self._list(self.batch.list_namespaced_job, (namespace,), f"listing jobs in {namespace}")

    def watch_jobs(
        self, namespace: str, *, resource_version: str, timeout_seconds: int = 300
    ) -> AsyncIterator[WatchEvent]:
        return self._watch(
            self.watch_batch.list_namespaced_job,
            (namespace,),
            f"watching jobs in {namespace}",
            timeout_seconds,
            resource_version=resource_version,
        )

    # -- the watch protocol -----------------------------------------------------------------

    async def _watch(
        self,
        method: Callable[..., Awaitable[Any]],
        args: tuple[str, ...],
        what: str,
        timeout_seconds: int,
        **selectors: str | None,
    ) -> AsyncIterator[WatchEvent]:
        """``selectors``: ``resource_version``, ``label_selector``, ``field_selector`` (unset when empty)."""
        kwargs: dict[str, Any] = {
            "watch": True,
            "allow_watch_bookmarks": True,
            "timeout_seconds": timeout_seconds,
        }
        kwargs.update((k, v) for k, v in selectors.items() if v)
        timeout = (REQUEST_TIMEOUT[0], min(timeout_seconds + WATCH_READ_SLACK, WATCH_IDLE_LIMIT))
        resp = await self._send(
            lambda: method(*args, _preload_content=False, _request_timeout=timeout, **kwargs), what
        )
        try:
            async with contextlib.aclosing(_lines(resp, what)) as lines:
                async for line in lines:
                    yield _watch_event(line, what)
        finally:
            resp.close()


def _scoped(
    namespace: str | None,
    everywhere: Callable[..., Awaitable[Any]],
    namespaced: Callable[..., Awaitable[Any]],
) -> tuple[Callable[..., Awaitable[Any]], tuple[str, ...], str]:
    """The call for ``namespace`` (``everywhere`` when it is None), its arguments, and where it reads."""
    if namespace is None:
        return everywhere, (), "all namespaces"
    return namespaced, (namespace,), namespace


async def _lines(resp: aiohttp.ClientResponse, what: str) -> AsyncGenerator[bytes, None]:
    """The non-blank lines of a streamed answer, as they arrive."""
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
                yield line
    if buffer.strip():
        yield buffer


async def _load_configuration(config: ClusterConfig) -> kubernetes_asyncio.client.Configuration:
    try:
        return await within_plugin_limit(async_configuration(config), CONNECT_TIMEOUT)
    except TimeoutError:
        raise TransportError(
            f"loading cluster config {config!r}: no credentials after {CONNECT_TIMEOUT:.0f} s "
            "(does a kubeconfig credential plugin hang? it was stopped)"
        ) from None
    except KubeError:
        raise
    except Exception as exc:
        raise _translated(exc, f"loading cluster config {config!r}") from exc


def _listing(data: Json) -> Listing:
    items = [i for i in data.get("items") or [] if isinstance(i, dict)]
    return Listing(items=items, resource_version=resource_version(data) or "")


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
