"""The HTTP face of the simulator: the core/v1 API subset pod launchers use, over aiohttp.

Requests are parsed once into (verb, resource, namespace, name) the way the apiserver's request
info resolver does, then go through the same gates in the same order as on a real cluster:
authentication (bearer token), authorization (optional per-token RBAC), then the handler. Fault
injection sits after authorization so a test can make any verb on any resource fail. Every answer
is counted and written to the audit trail; every error carries a ``Status`` body.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable

from aiohttp import web

from airflow_k8s_retry_testing.apiserver import discovery
from airflow_k8s_retry_testing.apiserver.errors import (
    ApiError,
    no_such_resource,
    not_allowed,
    not_found,
    status_body,
)
from airflow_k8s_retry_testing.apiserver.gates import FaultSlot, Gates, Rule, RuleSet, bearer_token
from airflow_k8s_retry_testing.apiserver.handlers import Resources
from airflow_k8s_retry_testing.apiserver.requests import RequestInfo, parse_request
from airflow_k8s_retry_testing.apiserver.subresources import Nodes, PodSubresources
from airflow_k8s_retry_testing.apiserver.watch import Watches
from airflow_k8s_retry_testing.store import CLUSTER_SCOPED, KINDS, Store
from airflow_k8s_retry_testing.tables import table, wants_table
from airflow_k8s_retry_testing.timers import Timebase

log = logging.getLogger(__name__)

SUBRESOURCES = {"log", "exec", "status", "eviction"}
Handler = Callable[[web.Request, RequestInfo], Awaitable[web.StreamResponse]]


def _json(status: int = 200) -> Callable[[Callable[..., Awaitable[object]]], Handler]:
    """Wrap a handler returning an object into one answering it as JSON."""

    def wrap(handler: Callable[..., Awaitable[object]]) -> Handler:
        async def answer(request: web.Request, info: RequestInfo) -> web.StreamResponse:
            return web.json_response(await handler(request, info), status=status)

        return answer

    return wrap


class ApiServer:
    """Routes, gates and handlers. Lives on the simulator's event loop.

    :param nodes: the kubelets, which ``pods/log`` and ``pods/exec`` reach.
    :param timebase: what watch timeouts and bookmarks count on (the loop, or the manual clock).
    :param minor_version: the Kubernetes minor version ``/version`` reports.
    """

    def __init__(
        self,
        store: Store,
        nodes: Nodes,
        *,
        token: str,
        bookmark_interval: float,
        faults: list[FaultSlot],
        timebase: Timebase,
        minor_version: int,
    ) -> None:
        self.store = store
        self.minor_version = minor_version
        self.host = "127.0.0.1:0"
        self.latencies: deque[float] = deque(maxlen=200_000)
        self.stopping = asyncio.Event()
        self.gates = Gates(store, token=token, faults=faults)
        self.resources = Resources(store)
        self.watches = Watches(
            store,
            audit=self.gates.audit,
            bookmark_interval=bookmark_interval,
            stopping=self.stopping,
            timebase=timebase,
        )
        self.pods = PodSubresources(
            store, nodes, get_object=self.resources.get_object, audit=self.gates.audit, stopping=self.stopping
        )
        resources = self.resources
        self.verbs: dict[str, Handler] = {
            "get": self.read_one,
            "list": self.read_list,
            "watch": self.watches.watch,
            "create": _json(201)(resources.create),
            "patch": _json()(resources.patch),
            "update": _json()(resources.update),
            "delete": _json()(resources.delete),
            "deletecollection": _json()(resources.delete_collection),
        }

    @property
    def rules(self) -> dict[str, Rule | RuleSet]:
        """Tokens with restricted access (``FakeCluster.restrict``/``grant``), by token."""
        return self.gates.rules

    def app(self) -> web.Application:
        app = web.Application(client_max_size=16 * 2**20)
        app.router.add_route("*", "/{tail:.*}", self.dispatch)
        return app

    # -- dispatch ------------------------------------------------------------------------------

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        info = parse_request(request.method, request.path, request.query)
        try:
            response = await self._gated(request, info)
        except ApiError as exc:
            body = status_body(exc.code, exc.message, exc.reason, exc.details, exc.metadata)
            headers = {"Retry-After": "1"} if exc.code == 429 else None
            response = web.json_response(body, status=exc.code, headers=headers)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            # A body of the right JSON type but the wrong shape: the apiserver would reject it as 400.
            log.debug("bad request %s %s", request.method, request.path, exc_info=True)
            body = status_body(400, f"the request is invalid: {type(exc).__name__}: {exc}", "BadRequest")
            response = web.json_response(body, status=400)
        except asyncio.CancelledError:
            if info is not None:
                self.gates.audit(request, info, 0)  # the client went away before the answer
            raise
        if info is not None:
            self.gates.audit(request, info, response.status)
            if not info.watch and info.subresource not in ("log", "exec"):
                self.latencies.append(time.perf_counter() - started)
        return response

    async def _gated(self, request: web.Request, info: RequestInfo | None) -> web.StreamResponse:
        if info is None and request.path.rstrip("/") in discovery.PUBLIC_PATHS:
            return self.non_resource(request)  # public-info-viewer: no credentials needed
        user = self.gates.authenticate(request)
        if info is None:
            return self.non_resource(request)
        with self.store.lock:
            self.store.requests[(info.verb, info.full_resource)] += 1
        self.gates.authorize(bearer_token(request), user, info)
        slot = self.gates.take_fault(info)
        if slot is None:
            return await self.route(request, info)
        return await self.gates.inject(
            request,
            info,
            slot,
            serve=lambda: self.route(request, info),
            expired_watch=lambda: self.watches.expired(request, info),
        )

    def non_resource(self, request: web.Request) -> web.StreamResponse:
        return discovery.non_resource(request, host=self.host, minor_version=self.minor_version)

    async def route(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        if info.resource not in KINDS:
            raise no_such_resource()
        if (
            info.namespace is not None
            and info.resource not in CLUSTER_SCOPED
            and info.name is not None
            and self.store.get("namespaces", "", info.namespace) is None
        ):
            raise not_found("namespaces", info.namespace)
        if info.subresource is not None:
            return await self.subresource(request, info)
        handler = self.verbs.get(info.verb)
        if handler is None:
            raise not_allowed(info.verb)
        return await handler(request, info)

    async def subresource(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        if info.resource != "pods" or info.subresource not in SUBRESOURCES or info.name is None:
            raise no_such_resource()
        if info.subresource == "log":
            return await self.pods.pod_log(request, info)
        if info.subresource == "exec":
            return await self.pods.pod_exec(request, info)
        if info.subresource == "eviction" and info.verb == "create":
            return web.json_response(await self.pods.evict(request, info), status=201)
        if info.subresource == "status" and info.verb == "get":
            return web.json_response(self.resources.get_object(info))
        raise not_allowed(info.verb)

    # -- reads, with kubectl's table form ----------------------------------------------------------

    async def read_one(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        obj = self.resources.get_object(info)
        if wants_table(request.headers.get("Accept", "")):
            return web.json_response(table(info.resource, [obj], obj["metadata"]["resourceVersion"]))
        return web.json_response(obj)

    async def read_list(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        listed = self.resources.list_objects(request, info)
        if wants_table(request.headers.get("Accept", "")):
            rendered = table(info.resource, listed["items"], listed["metadata"]["resourceVersion"])
            rendered["metadata"].update(listed["metadata"])
            return web.json_response(rendered)
        return web.json_response(listed)
