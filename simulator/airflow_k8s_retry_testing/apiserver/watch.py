"""Watches: a resumable stream of changes with bookmarks, 410 Gone, and kubectl's table form.

A watch snapshots the matching objects (for ``resourceVersion`` "" or "0", or
``sendInitialEvents``) or replays the history after the version asked for, and subscribes, with
no ``await`` in between so no change slips through. It then streams changes in batches,
``BOOKMARK`` events every ``bookmark_interval`` and 2 s before ``timeoutSeconds`` when asked
for, and ends at ``timeoutSeconds``,
when the server stops, or when ``FakeCluster.drop_watches`` cuts it (cleanly or by a reset).

Timeouts and bookmarks run on the cluster's timebase: real seconds on the event loop, or simulated
seconds on a manual clock (``FakeCluster(clock="manual")``), where a watch ends only once
``FakeCluster.advance`` has moved time past its ``timeoutSeconds``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from airflow_k8s_retry_testing.apiserver.errors import ApiError, status_body
from airflow_k8s_retry_testing.apiserver.requests import RequestInfo, flag, int_param, selectors
from airflow_k8s_retry_testing.selectors import Matcher
from airflow_k8s_retry_testing.store import (
    API_VERSIONS,
    CLUSTER_SCOPED,
    KINDS,
    Obj,
    Store,
    TooOld,
    Watcher,
    WatchEvent,
)
from airflow_k8s_retry_testing.tables import table, wants_table

if TYPE_CHECKING:
    from airflow_k8s_retry_testing.timers import Timebase

Audit = Callable[[web.Request, RequestInfo, int], None]
Render = Callable[[bytes], bytes]
BATCH = 256  # changes written in one chunk at most


def _line(event: Obj) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode() + b"\n"


def table_renderer(resource: str) -> Render:
    """Turn a watch event line into the same event carrying a one-row Table (for kubectl)."""

    def render(payload: bytes) -> bytes:
        event = json.loads(payload)
        obj = event["object"]
        rv = (obj.get("metadata") or {}).get("resourceVersion", "")
        event["object"] = table(resource, [obj], rv)
        return _line(event)

    return render


#: A watch with bookmarks gets one this many seconds before its ``timeoutSeconds`` (the
#: API server's watch cache does so, so that a client resumes from a recent version).
PRE_TIMEOUT_BOOKMARK = 2.0
#: What an empty object of a kind looks like serialized by the API server (a bookmark carries one).
EMPTY_FIELDS: dict[str, Obj] = {"pods": {"spec": {"containers": None}, "status": {}}}


def bookmark(resource: str, rv: int, *, initial_end: bool = False) -> bytes:
    meta: Obj = {"resourceVersion": str(rv)}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    event = {
        "type": "BOOKMARK",
        "object": {
            "kind": KINDS[resource],
            "apiVersion": API_VERSIONS.get(resource, "v1"),
            "metadata": meta,
            **EMPTY_FIELDS.get(resource, {}),
        },
    }
    return json.dumps(event).encode() + b"\n"


async def write_error_event(response: web.StreamResponse, code: int, message: str, reason: str) -> None:
    event = {"type": "ERROR", "object": status_body(code, message, reason)}
    await response.write(json.dumps(event).encode() + b"\n")


@dataclass
class _Stream:
    """One watch being served: where it writes and what it was asked for."""

    response: web.StreamResponse
    watcher: Watcher
    resource: str
    timeout_seconds: int | None
    bookmarks: bool
    render: Render | None
    transport: asyncio.Transport | None
    next_bookmark: float = 0.0

    async def write(self, payloads: list[bytes]) -> None:
        if self.render is not None:
            payloads = [self.render(chunk) for chunk in payloads]
        if payloads:
            await self.response.write(b"".join(payloads))

    def drain(self, limit: int = BATCH) -> list[bytes]:
        """What is queued for this watch now, up to one batch."""
        queue = self.watcher.queue
        chunks: list[bytes] = []
        while not queue.empty() and len(chunks) < limit:
            chunks.append(queue.get_nowait().payload)
        return chunks


class Watches:
    """Serves watch requests from the store's history and its change feed."""

    def __init__(
        self,
        store: Store,
        *,
        audit: Audit,
        bookmark_interval: float,
        stopping: asyncio.Event,
        timebase: Timebase | None = None,
    ) -> None:
        self.store = store
        self.audit = audit
        self.bookmark_interval = bookmark_interval
        self.stopping = stopping
        #: What timeouts and bookmarks are measured on (None: the running event loop).
        self.timebase = timebase

    def _time(self) -> Timebase:
        return self.timebase if self.timebase is not None else asyncio.get_running_loop()

    async def start_stream(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        self.audit(request, info, 200)
        return response

    async def expired(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        """A watch answered at once with 410 Expired (an injected fault)."""
        response = await self.start_stream(request, info)
        await write_error_event(response, 410, "too old resource version: 1 (2)", "Expired")
        await response.write_eof()
        return response

    def _backlog(
        self, request: web.Request, watcher: Watcher, labels: Matcher, fields: Matcher
    ) -> tuple[list[bytes], TooOld | None]:
        """The events a new watch starts with: a snapshot, or the history after its version."""
        rv_param = request.query.get("resourceVersion", "")
        if rv_param in ("", "0") or flag(request.query.get("sendInitialEvents")):
            snapshot = [
                _line({"type": "ADDED", "object": obj})
                for obj in self.store.items(watcher.resource, watcher.namespace)
                if labels(obj["metadata"].get("labels") or {}) and fields(obj)
            ]
            return snapshot, None
        try:
            since = int(rv_param)
        except ValueError:
            raise ApiError(400, f"invalid resource version: {rv_param}") from None
        watcher.after = since
        try:
            return [e.payload for e in self.store.since(since) if watcher.matches(e)], None
        except TooOld as exc:
            return [], exc

    async def watch(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        labels, fields, has_fields = selectors(request, info.resource)
        timeout = int_param(request, "timeoutSeconds")
        bookmarks = flag(request.query.get("allowWatchBookmarks"))
        initial_end = flag(request.query.get("sendInitialEvents"))
        namespace = None if info.resource in CLUSTER_SCOPED else info.namespace
        watcher = Watcher(info.resource, namespace, labels, fields, field_filter=has_fields)
        # Snapshot and subscribe with no await in between, so no change can slip through.
        backlog, too_old = self._backlog(request, watcher, labels, fields)
        start_rv = self.store.rv
        render = table_renderer(info.resource) if wants_table(request.headers.get("Accept", "")) else None
        self.store.watchers.add(watcher)
        self.store.notify()  # a new watch is a state change too (tests wait for watchers)
        response = await self.start_stream(request, info)
        stream = _Stream(response, watcher, info.resource, timeout, bookmarks, render, request.transport)
        try:
            if too_old is not None:
                await write_error_event(response, 410, str(too_old), "Expired")
                return response
            for payload in backlog:
                await response.write(render(payload) if render is not None else payload)
            if initial_end and bookmarks:
                await response.write(bookmark(info.resource, start_rv, initial_end=True))
            await self.pump(stream)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.store.watchers.discard(watcher)
            self.store.notify()
        return response

    async def pump(self, stream: _Stream) -> None:
        """Stream changes until the timeout, the server's stop or the watch being cut."""
        clock = self._time()
        deadline = clock.time() + stream.timeout_seconds if stream.timeout_seconds else None
        stream.next_bookmark = self._next_bookmark(clock.time(), deadline)
        stop = asyncio.ensure_future(self.stopping.wait())
        dropped = asyncio.ensure_future(stream.watcher.dropped.wait())
        try:
            while deadline is None or clock.time() < deadline:
                if not stream.watcher.queue.empty():
                    await stream.write(stream.drain())
                    continue
                if not await self._wait(stream, deadline, stop, dropped):
                    break
        finally:
            stop.cancel()
            dropped.cancel()

    def _next_bookmark(self, now: float, deadline: float | None) -> float:
        """Every ``bookmark_interval``, and once shortly before the watch's timeout."""
        at = now + self.bookmark_interval
        if deadline is not None and deadline - PRE_TIMEOUT_BOOKMARK > now:
            at = min(at, deadline - PRE_TIMEOUT_BOOKMARK)
        return at

    async def _wait(
        self,
        stream: _Stream,
        deadline: float | None,
        stop: asyncio.Future[Any],
        dropped: asyncio.Future[Any],
    ) -> bool:
        """Wait for the next change (and write it) or a bookmark; False when the watch must end."""
        clock = self._time()
        waits = [t for t in (deadline, stream.next_bookmark if stream.bookmarks else None) if t is not None]
        getter = asyncio.ensure_future(stream.watcher.queue.get())
        due: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer = clock.call_at(min(waits), _settle, due) if waits else None
        try:
            done, _ = await asyncio.wait({getter, stop, dropped, due}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if timer is not None:
                timer.cancel()
            due.cancel()
        if stop in done or dropped in done:
            await self._end(stream, getter, reset=dropped in done and stream.watcher.reset)
            return False
        if getter not in done:
            getter.cancel()
            if stream.bookmarks and clock.time() >= stream.next_bookmark:
                await stream.response.write(bookmark(stream.resource, self.store.rv))
                stream.next_bookmark = self._next_bookmark(clock.time(), deadline)
            return True
        await stream.write([getter.result().payload, *stream.drain(BATCH - 1)])
        return True

    @staticmethod
    async def _end(stream: _Stream, getter: asyncio.Future[WatchEvent], *, reset: bool) -> None:
        if reset and stream.transport is not None:
            getter.cancel()
            stream.transport.abort()
            return
        # A clean end flushes what was already queued for this watch.
        pending = [getter.result().payload] if getter.done() and not getter.cancelled() else []
        getter.cancel()
        queue = stream.watcher.queue
        while not queue.empty():
            pending.append(queue.get_nowait().payload)
        await stream.write(pending)


def _settle(due: asyncio.Future[None]) -> None:
    if not due.done():
        due.set_result(None)
