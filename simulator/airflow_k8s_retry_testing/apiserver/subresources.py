"""The pod subresources that reach the node: ``pods/log``, ``pods/exec`` and ``pods/eviction``.

On a real cluster the API server proxies ``log`` and ``exec`` to the kubelet; here they read the
container's run directly. Logs support ``container``, ``previous``, ``tailLines``,
``sinceSeconds``, ``limitBytes``, ``timestamps`` and ``follow`` (streamed until the container
ends); exec speaks the websocket channel protocols (``testing/shell.py``); an eviction marks the
pod as a disruption target and deletes it gracefully.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aiohttp import web

from airflow_k8s_retry_testing.apiserver import admission
from airflow_k8s_retry_testing.apiserver import pods as pod_strategy
from airflow_k8s_retry_testing.apiserver.errors import ApiError
from airflow_k8s_retry_testing.apiserver.requests import RequestInfo, flag, int_param, read_body
from airflow_k8s_retry_testing.shell import run_exec_session
from airflow_k8s_retry_testing.store import Obj

if TYPE_CHECKING:
    from airflow_k8s_retry_testing.controllers.components import Components
    from airflow_k8s_retry_testing.controllers.runs import ContainerRun, PodRun

Audit = Callable[[web.Request, RequestInfo, int], None]
LogLines = list[tuple[float, str]]
EXEC_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io", "channel.k8s.io")


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

    def select(self, container: ContainerRun) -> LogLines:
        """The lines asked for: this run's or the previous one's, since and tail applied."""
        lines = list(container.previous_logs or []) if self.previous else list(container.logs)
        if self.since is not None:
            lines = [entry for entry in lines if entry[0] >= time.time() - self.since]
        if self.tail is not None and self.tail >= 0:
            lines = lines[-self.tail :] if self.tail else []
        return lines


class PodSubresources:
    """``pods/log``, ``pods/exec`` and ``pods/eviction``."""

    def __init__(
        self,
        components: Components,
        *,
        get_object: Callable[[RequestInfo], Obj],
        audit: Audit,
        stopping: asyncio.Event,
    ) -> None:
        self.components = components
        self.get_object = get_object
        self.audit = audit
        self.stopping = stopping

    async def evict(self, request: web.Request, info: RequestInfo) -> Obj:
        """The Eviction API: mark the pod as a disruption target, then delete it gracefully."""
        body = await read_body(request)  # before the pod: see Resources.patch
        pod = self.get_object(info)
        admission.check_eviction(self.components.status.store, pod)
        options = (body.get("deleteOptions") if isinstance(body, dict) else None) or {}
        grace = options.get("gracePeriodSeconds")
        if grace is None:
            grace = pod_strategy.spec_grace(pod)
        self.components.evict(pod, int(grace))
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    # -- pods/log --------------------------------------------------------------------------------

    def _log_source(
        self, request: web.Request, info: RequestInfo, previous: bool
    ) -> tuple[PodRun, ContainerRun]:
        pod = self.get_object(info)
        run = self.components.run_of(pod)
        names = [c["name"] for c in pod["spec"].get("initContainers") or []] + [
            c["name"] for c in pod["spec"]["containers"]
        ]
        container_name = container_named(request, pod, info)
        if container_name not in names or run is None:
            raise ApiError(400, f"container {container_name} is not valid for pod {info.name}")
        container = run.container(container_name)
        assert container is not None
        if previous and container.previous_logs is None:
            raise ApiError(
                400, f'previous terminated container "{container_name}" in pod "{info.name}" not found'
            )
        if not container.started:
            reason = (container.state.get("waiting") or {}).get("reason", "ContainerCreating")
            raise ApiError(
                400, f'container "{container_name}" in pod "{info.name}" is waiting to start: {reason}'
            )
        return run, container

    async def pod_log(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        previous = flag(request.query.get("previous"))
        run, container = self._log_source(request, info, previous)
        options = LogOptions.of(request)
        lines = options.select(container)
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
            await self._follow(response, run, container, options, lines)
        return response

    async def _follow(
        self,
        response: web.StreamResponse,
        run: PodRun,
        container: ContainerRun,
        options: LogOptions,
        lines: LogLines,
    ) -> None:
        """Stream the log until the container ends, the pod goes, the server stops or the limit."""
        limit = options.limit
        sent = len(container.logs)
        written = 0
        chunk = options.render(lines)
        if chunk:
            await response.write(chunk[:limit] if limit else chunk)
            written += len(chunk)
        while not (container.terminated or run.gone) and not self.stopping.is_set():
            if limit and written >= limit:
                break
            await self._changed(container)
            fresh = container.logs[sent:]
            sent = len(container.logs)
            if fresh:
                chunk = options.render(fresh)
                await response.write(chunk)
                written += len(chunk)
        fresh = container.logs[sent:]
        if fresh:
            await response.write(options.render(fresh))
        await response.write_eof()

    async def _changed(self, container: ContainerRun) -> None:
        stop = asyncio.ensure_future(self.stopping.wait())
        waiter = asyncio.ensure_future(container.changed.wait())
        await asyncio.wait({waiter, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        waiter.cancel()

    # -- pods/exec -------------------------------------------------------------------------------

    async def pod_exec(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        pod = self.get_object(info)
        run = self.components.run_of(pod)
        command = request.query.getall("command", [])
        if not command:
            raise ApiError(400, "you must specify at least 1 command")
        container_name = container_named(request, pod, info)
        container = run.container(container_name) if run is not None else None
        if run is None or container is None:
            raise ApiError(400, f"container {container_name} is not valid for pod {info.name}")
        if not container.running or run.frozen:
            raise ApiError(400, f'unable to upgrade connection: container not found ("{container_name}")')
        ws = web.WebSocketResponse(protocols=EXEC_PROTOCOLS, autoping=True)
        await ws.prepare(request)
        self.audit(request, info, 101)
        try:
            await run_exec_session(
                ws, self.components.kubelet, run, container, command, stdin=flag(request.query.get("stdin"))
            )
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            if not ws.closed:
                await ws.close()
        return ws
