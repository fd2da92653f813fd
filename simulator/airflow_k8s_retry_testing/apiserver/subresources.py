"""The pod subresources that reach the node: ``pods/log``, ``pods/exec`` and ``pods/eviction``.

On a real cluster the API server proxies ``log`` and ``exec`` to the kubelet of the pod's node and
relays its answers, errors included; here it asks the :class:`Nodes` it was given (the simulated
kubelet, ``controllers/kubelet.py``), knowing them only by what this module declares. Logs support
``container``, ``previous``, ``tailLines``, ``sinceSeconds``, ``limitBytes``, ``timestamps`` and
``follow`` (streamed until the container ends); exec speaks the websocket channel protocols
(``controllers/shell.py``); an eviction marks the pod as a disruption target and deletes it
(``pods.evict_pod``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from aiohttp import web

from airflow_k8s_retry_testing.apiserver import admission
from airflow_k8s_retry_testing.apiserver import pods as pod_strategy
from airflow_k8s_retry_testing.apiserver.errors import ApiError
from airflow_k8s_retry_testing.apiserver.requests import RequestInfo, flag, int_param, read_body
from airflow_k8s_retry_testing.store import Obj, Store

Audit = Callable[[web.Request, RequestInfo, int], None]
#: A container's log: (wall time written, line) in order.
LogLines = list[tuple[float, str]]
EXEC_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io", "channel.k8s.io")


class ContainerLog(Protocol):
    """One container's log as its node serves it."""

    @property
    def lines(self) -> LogLines:
        """This run's lines so far (only ever appended to)."""

    @property
    def previous(self) -> LogLines | None:
        """The previous run's lines (``None`` when it has not restarted)."""

    @property
    def ended(self) -> bool:
        """The container ended or the pod went: a followed log ends."""

    async def changed(self) -> None:
        """Return once a line was written or the log ended."""


class ExecSession(Protocol):
    """A command about to run in a container, as its node runs it."""

    async def run(self, ws: web.WebSocketResponse, command: list[str], *, stdin: bool) -> None:
        """Speak the exec protocol on ``ws`` until the command ends."""


class Nodes(Protocol):
    """The kubelets, as the API server reaches them. Each raises :class:`ApiError` with the
    kubelet's answer when it cannot serve (a container that has not started, is not running...)."""

    def container_log(self, pod: Obj, container: str, *, previous: bool) -> ContainerLog:
        """The log of ``container`` in ``pod`` (``previous``: the one before its last restart)."""

    def exec_session(self, pod: Obj, container: str) -> ExecSession:
        """An exec into ``container`` of ``pod``, checked before the connection is upgraded."""


def container_named(request: web.Request, pod: Any, info: RequestInfo) -> str:
    """The ``container`` query parameter, or the pod's only container, as the apiserver does."""
    name = request.query.get("container")
    if name:
        return name
    containers = pod["spec"]["containers"]
    if len(containers) != 1:
        raise ApiError(
            400,
            f"a container name must be specified for pod {info.name}, choose one of: "
            f"[{' '.join(c['name'] for c in containers)}]",
        )
    return str(containers[0]["name"])


@dataclass(frozen=True)
class LogOptions:
    """A ``pods/log`` request's query parameters."""

    previous: bool
    follow: bool
    tail: int | None
    since: int | None
    limit: int | None
    timestamps: bool

    @classmethod
    def of(cls, request: web.Request) -> LogOptions:
        previous = flag(request.query.get("previous"))
        return cls(
            previous=previous,
            follow=flag(request.query.get("follow")) and not previous,  # a previous run has ended
            tail=int_param(request, "tailLines"),
            since=int_param(request, "sinceSeconds"),
            limit=int_param(request, "limitBytes"),
            timestamps=flag(request.query.get("timestamps")),
        )

    def render(self, lines: LogLines) -> bytes:
        out = []
        for t, line in lines:
            if self.timestamps:
                stamp = datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"
                out.append(f"{stamp} {line}\n")
            else:
                out.append(line + "\n")
        return "".join(out).encode()

    def select(self, log: ContainerLog) -> LogLines:
        """The lines asked for: this run's or the previous one's, since and tail applied."""
        lines = list(log.previous or []) if self.previous else list(log.lines)
        if self.since is not None:
            lines = [entry for entry in lines if entry[0] >= time.time() - self.since]
        if self.tail is not None and self.tail >= 0:
            lines = lines[-self.tail :] if self.tail else []
        return lines


class PodSubresources:
    """``pods/log``, ``pods/exec`` and ``pods/eviction``."""

    def __init__(
        self,
        store: Store,
        nodes: Nodes,
        *,
        get_object: Callable[[RequestInfo], Obj],
        audit: Audit,
        stopping: asyncio.Event,
    ) -> None:
        self.store = store
        self.nodes = nodes
        self.get_object = get_object
        self.audit = audit
        self.stopping = stopping

    async def evict(self, request: web.Request, info: RequestInfo) -> Obj:
        """The Eviction API: mark the pod as a disruption target, then delete it gracefully."""
        body = await read_body(request)  # before the pod: see Resources.patch
        pod = self.get_object(info)
        admission.check_eviction(self.store, pod)
        options = (body.get("deleteOptions") if isinstance(body, dict) else None) or {}
        pod_strategy.evict_pod(self.store, pod, options.get("gracePeriodSeconds"))
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    # -- pods/log --------------------------------------------------------------------------------

    def _log_source(self, request: web.Request, info: RequestInfo, previous: bool) -> ContainerLog:
        pod = self.get_object(info)
        names = [c["name"] for c in pod["spec"].get("initContainers") or []] + [
            c["name"] for c in pod["spec"]["containers"]
        ]
        container_name = container_named(request, pod, info)
        if container_name not in names:
            raise ApiError(400, f"container {container_name} is not valid for pod {info.name}")
        return self.nodes.container_log(pod, container_name, previous=previous)

    async def pod_log(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        previous = flag(request.query.get("previous"))
        log = self._log_source(request, info, previous)
        options = LogOptions.of(request)
        lines = options.select(log)
        if not options.follow:
            data = options.render(lines)
            if options.limit:
                data = data[: options.limit]
            return web.Response(body=data, content_type="text/plain")
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        self.audit(request, info, 200)
        with contextlib.suppress(ConnectionResetError, asyncio.CancelledError):
            await self._follow(response, log, options, lines)
        return response

    async def _follow(
        self, response: web.StreamResponse, log: ContainerLog, options: LogOptions, lines: LogLines
    ) -> None:
        """Stream the log until the container ends, the pod goes, the server stops or the limit."""
        limit = options.limit
        sent = len(log.lines)
        written = 0
        chunk = options.render(lines)
        if chunk:
            await response.write(chunk[:limit] if limit else chunk)
            written += len(chunk)
        while not log.ended and not self.stopping.is_set():
            if limit and written >= limit:
                break
            await self._changed(log)
            fresh = log.lines[sent:]
            sent = len(log.lines)
            if fresh:
                chunk = options.render(fresh)
                await response.write(chunk)
                written += len(chunk)
        fresh = log.lines[sent:]
        if fresh:
            await response.write(options.render(fresh))
        await response.write_eof()

    async def _changed(self, log: ContainerLog) -> None:
        stop = asyncio.ensure_future(self.stopping.wait())
        waiter = asyncio.ensure_future(log.changed())
        await asyncio.wait({waiter, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        waiter.cancel()

    # -- pods/exec -------------------------------------------------------------------------------

    async def pod_exec(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        pod = self.get_object(info)
        command = request.query.getall("command", [])
        if not command:
            raise ApiError(400, "you must specify at least 1 command")
        session = self.nodes.exec_session(pod, container_named(request, pod, info))
        ws = web.WebSocketResponse(protocols=EXEC_PROTOCOLS, autoping=True)
        await ws.prepare(request)
        self.audit(request, info, 101)
        try:
            await session.run(ws, command, stdin=flag(request.query.get("stdin")))
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            if not ws.closed:
                await ws.close()
        return ws
