"""The HTTP face of the simulator: the core/v1 API subset pod launchers use, over aiohttp.

Requests are parsed once into (verb, resource, namespace, name) the way the apiserver's request
info resolver does, then go through the same gates in the same order as on a real cluster:
authentication (bearer token), authorization (optional per-token RBAC), then the handler. Fault
injection sits after authorization so a test can make any verb on any resource fail. Every answer
is counted and written to the audit trail; every error carries a ``Status`` body.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import logging
import random
import re
import string
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from airflow_k8s_retry.testing.kubelet import Kubelet
from airflow_k8s_retry.testing.patching import PatchError, json_patch, merge_patch, strategic_merge_patch
from airflow_k8s_retry.testing.scenario import Fault
from airflow_k8s_retry.testing.selectors import SelectorError, parse_field_selector, parse_label_selector
from airflow_k8s_retry.testing.shell import run_exec_session
from airflow_k8s_retry.testing.store import (
    API_VERSIONS,
    CLUSTER_SCOPED,
    KINDS,
    Obj,
    Store,
    TooOld,
    Watcher,
    WatchEvent,
    now_iso,
)
from airflow_k8s_retry.testing.tables import table, wants_table

log = logging.getLogger(__name__)

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
}
PUBLIC_PATHS = frozenset({"/version", "/healthz", "/livez", "/readyz"})
SUBRESOURCES = {"log", "exec", "status", "eviction"}
VERSION_INFO = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-fake",
    "gitCommit": "0" * 40,
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.23.4",
    "compiler": "gc",
    "platform": "linux/amd64",
}


class ApiError(Exception):
    """Answer the request with a Status body."""

    def __init__(
        self, code: int, message: str, *, reason: str | None = None, details: Obj | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = details


def status_body(code: int, message: str, reason: str, details: Obj | None = None) -> Obj:
    body: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


def not_found(resource: str, name: str) -> ApiError:
    return ApiError(404, f'{resource} "{name}" not found', details={"name": name, "kind": resource})


@dataclass
class Rule:
    """What a restricted token may do; ``None`` means any."""

    user: str
    verbs: frozenset[str] | None
    resources: frozenset[str] | None
    namespaces: frozenset[str] | None = None

    def allows(self, verb: str, resource: str, namespace: str | None) -> bool:
        if self.verbs is not None and verb not in self.verbs:
            return False
        if self.resources is not None and resource not in self.resources:
            return False
        return self.namespaces is None or namespace in self.namespaces


@dataclass
class RuleSet:
    """Several rules for one token, as RBAC's PolicyRules: a request passes if any rule allows it."""

    user: str
    rules: tuple[Rule, ...]

    def allows(self, verb: str, resource: str, namespace: str | None) -> bool:
        return any(rule.allows(verb, resource, namespace) for rule in self.rules)


@dataclass
class FaultSlot:
    fault: Fault
    remaining: int | None

    def matches(self, verb: str, resource: str) -> bool:
        if self.remaining is not None and self.remaining <= 0:
            return False
        return self.fault.verb in ("*", verb) and self.fault.resource in ("*", resource)


@dataclass
class RequestInfo:
    verb: str
    resource: str
    namespace: str | None
    name: str | None
    subresource: str | None = None
    watch: bool = False
    uid: str | None = None
    labels: dict[str, str] | None = None
    audited: bool = False
    extra: Obj = field(default_factory=dict)

    @property
    def full_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def _bool(value: str | None) -> bool:
    return value is not None and value.lower() in ("true", "1", "yes")


def _int_param(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ApiError(400, f"invalid value for {name}: {raw!r} is not an integer") from None


def _parse_path(method: str, path: str, query: Mapping[str, str]) -> RequestInfo | None:
    """Resolve ``/api/v1/...`` into a RequestInfo (None for non-resource paths)."""
    parts = [p for p in path.split("/") if p]
    grouped = parts[:3] == ["apis", "batch", "v1"] and len(parts) >= 4
    if grouped:
        parts = ["api", "v1", *parts[3:]]  # batch/v1 Jobs (testing/jobs.py), routed as core resources
    if parts[:2] != ["api", "v1"] or len(parts) < 3:
        return None
    rest = parts[2:]
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace = rest[1]
        rest = rest[2:]
    resource = rest[0]
    if grouped != (resource in API_VERSIONS):
        resource = f"{resource} (not in this API group)"  # unknown here: 404 as on a real server
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if resource == "namespaces" and name is not None:
        namespace = None
    watch = _bool(query.get("watch"))
    if method == "GET":
        if sub == "exec":
            verb = "create"
        elif name is None:
            verb = "watch" if watch else "list"
        else:
            verb = "get"
    elif method == "POST":
        verb = "create"
    elif method == "PUT":
        verb = "update"
    elif method == "PATCH":
        verb = "patch"
    elif method == "DELETE":
        verb = "delete" if name is not None else "deletecollection"
    else:
        verb = method.lower()
    return RequestInfo(
        verb=verb, resource=resource, namespace=namespace, name=name, subresource=sub, watch=watch
    )


class ApiServer:
    """Routes, gates and handlers. Lives on the simulator's event loop."""

    def __init__(
        self,
        store: Store,
        kubelet: Kubelet,
        *,
        token: str,
        bookmark_interval: float,
        faults: list[FaultSlot],
    ) -> None:
        self.store = store
        self.kubelet = kubelet
        self.token = token
        self.rules: dict[str, Rule | RuleSet] = {}
        self.faults = faults
        self.bookmark_interval = bookmark_interval
        self.host = "127.0.0.1:0"
        self.latencies: deque[float] = deque(maxlen=200_000)
        self.stopping = asyncio.Event()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=16 * 2**20)
        app.router.add_route("*", "/{tail:.*}", self.dispatch)
        return app

    # -- gates ---------------------------------------------------------------------------------

    def authenticate(self, request: web.Request) -> str:
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer "):
            raise ApiError(401, "Unauthorized")
        token = header[len("Bearer ") :].strip()
        if token == self.token:
            return "system:admin"
        rule = self.rules.get(token)
        if rule is None:
            raise ApiError(401, "Unauthorized")
        return rule.user

    def authorize(self, token: str, user: str, info: RequestInfo) -> None:
        rule = self.rules.get(token)
        if rule is None or rule.allows(info.verb, info.full_resource, info.namespace):
            return
        resource = info.full_resource
        where = f' in the namespace "{info.namespace}"' if info.namespace else " at the cluster scope"
        subject = f'{info.resource} "{info.name}"' if info.name else info.resource
        group = API_VERSIONS.get(info.resource, "v1").rpartition("/")[0]
        raise ApiError(
            403,
            f'{subject} is forbidden: User "{user}" cannot {info.verb} resource "{resource}" '
            f'in API group "{group}"{where}',
            details={"name": info.name, "kind": info.resource} if info.name else {"kind": info.resource},
        )

    def take_fault(self, info: RequestInfo) -> FaultSlot | None:
        for slot in self.faults:
            if slot.matches(info.verb, info.full_resource):
                if slot.remaining is not None:
                    slot.remaining -= 1
                return slot
        return None

    def audit(self, request: web.Request, info: RequestInfo, status: int) -> None:
        if info.audited:
            return
        info.audited = True
        record: Obj = {
            "t": time.time(),
            "kind": "request",
            "verb": info.verb,
            "resource": info.full_resource,
            "namespace": info.namespace,
            "name": info.name,
            "uid": info.uid,
            "status": status,
            "user_agent": request.headers.get("User-Agent", ""),
            "watch": info.verb == "watch",
        }
        if info.labels is not None:
            record["labels"] = info.labels
        record.update(info.extra)
        self.store.audit.write(record)
        self.store.notify()  # audit records are observable state: wait_for re-checks on them too

    # -- dispatch ------------------------------------------------------------------------------

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        info = _parse_path(request.method, request.path, request.query)
        try:
            if info is None and request.path.rstrip("/") in PUBLIC_PATHS:
                return self.non_resource(request)  # public-info-viewer: no credentials needed
            token = request.headers.get("Authorization", "")[len("Bearer ") :].strip()
            user = self.authenticate(request)
            if info is None:
                return self.non_resource(request)
            with self.store.lock:
                self.store.requests[(info.verb, info.full_resource)] += 1
            self.authorize(token, user, info)
            slot = self.take_fault(info)
            if slot is not None:
                response = await self.inject(request, info, slot)
            else:
                response = await self.route(request, info)
        except ApiError as exc:
            body = status_body(exc.code, exc.message, exc.reason, exc.details)
            headers = {"Retry-After": "1"} if exc.code == 429 else None
            response = web.json_response(body, status=exc.code, headers=headers)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            # A body of the right JSON type but the wrong shape: the apiserver would reject it as 400.
            log.debug("bad request %s %s", request.method, request.path, exc_info=True)
            body = status_body(400, f"the request is invalid: {type(exc).__name__}: {exc}", "BadRequest")
            response = web.json_response(body, status=400)
        except asyncio.CancelledError:
            if info is not None:
                self.audit(request, info, 0)  # the client went away before the answer
            raise
        if info is not None:
            self.audit(request, info, response.status)
            if not info.watch and info.subresource not in ("log", "exec"):
                self.latencies.append(time.perf_counter() - started)
        return response

    async def inject(self, request: web.Request, info: RequestInfo, slot: FaultSlot) -> web.StreamResponse:
        status = slot.fault.status
        info.extra["fault"] = status
        if status == "slow":
            # The request has arrived whole; the server is slow to act on it (and acts even if the
            # client has gone meanwhile, as an API server that already has the body does).
            await request.read()
            await asyncio.sleep(slot.fault.delay_seconds)
            return await self.route(request, info)
        if status == "lost" and info.verb != "watch":
            # The change lands (the store is written), but its answer never reaches the client.
            with contextlib.suppress(ApiError):
                await self.route(request, info)
            self.audit(request, info, 0)
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError
        if status in ("reset", "lost"):  # a lost watch is a reset watch
            self.audit(request, info, 0)
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError  # nothing more to send on an aborted connection
        assert isinstance(status, int)
        if status == 410 and info.verb == "watch":
            response = await self.start_stream(request, info)
            await self.write_error_event(response, 410, "too old resource version: 1 (2)", "Expired")
            await response.write_eof()
            return response
        if status == 403:
            if info.verb == "create" and info.full_resource == "pods":
                message = (
                    f'pods "{info.name or "pod"}" is forbidden: exceeded quota: compute, requested: '
                    "limits.cpu=1, used: limits.cpu=8, limited: limits.cpu=8"
                )
            else:
                message = (
                    f'{info.resource} is forbidden: User "system:serviceaccount:default:airflow" cannot '
                    f'{info.verb} resource "{info.full_resource}" in API group "" (injected fault)'
                )
            raise ApiError(403, message, details={"kind": info.resource})
        messages = {
            500: "Internal error occurred: injected fault",
            429: "Too many requests, please try again later.",
            410: "The provided continue parameter is too old to display a consistent list result. "
            "You can start a new list without the continue parameter.",
        }
        raise ApiError(status, messages[status])

    def non_resource(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        if path == "/version":
            minor = str(self.kubelet.scenario.minor_version)
            return web.json_response({**VERSION_INFO, "minor": minor, "gitVersion": f"v1.{minor}.0-fake"})
        if path == "/api":
            return web.json_response(
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": self.host}],
                }
            )
        if path == "/api/v1":
            return web.json_response(api_resource_list())
        if path == "/apis":
            from airflow_k8s_retry.testing.jobs import api_group

            return web.json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": [api_group()]})
        if path == "/apis/batch/v1":
            from airflow_k8s_retry.testing.jobs import api_resources

            return web.json_response(api_resources())
        if path in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok")
        raise ApiError(404, "the server could not find the requested resource", details={})

    async def route(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        if info.resource not in KINDS:
            raise ApiError(404, "the server could not find the requested resource", details={})
        if (
            info.namespace is not None
            and info.resource not in CLUSTER_SCOPED
            and info.name is not None
            and self.store.get("namespaces", "", info.namespace) is None
        ):
            raise not_found("namespaces", info.namespace)
        if info.subresource is not None:
            if info.resource != "pods" or info.subresource not in SUBRESOURCES or info.name is None:
                raise ApiError(404, "the server could not find the requested resource", details={})
            if info.subresource == "log":
                return await self.pod_log(request, info)
            if info.subresource == "exec":
                return await self.pod_exec(request, info)
            if info.subresource == "eviction" and info.verb == "create":
                return web.json_response(await self.evict(request, info), status=201)
            if info.subresource == "status" and info.verb == "get":
                return web.json_response(self.get_object(info))
            raise ApiError(
                405, f"the server does not allow this method on the requested resource ({info.verb})"
            )
        if info.verb == "get":
            obj = self.get_object(info)
            if wants_table(request.headers.get("Accept", "")):
                return web.json_response(table(info.resource, [obj], obj["metadata"]["resourceVersion"]))
            return web.json_response(obj)
        if info.verb == "list":
            listed = self.list_objects(request, info)
            if wants_table(request.headers.get("Accept", "")):
                rendered = table(info.resource, listed["items"], listed["metadata"]["resourceVersion"])
                rendered["metadata"].update(listed["metadata"])
                return web.json_response(rendered)
            return web.json_response(listed)
        if info.verb == "watch":
            return await self.watch(request, info)
        if info.verb == "create":
            obj = await self.create(request, info)
            return web.json_response(obj, status=201)
        if info.verb == "patch":
            return web.json_response(await self.patch(request, info))
        if info.verb == "update":
            return web.json_response(await self.update(request, info))
        if info.verb == "delete":
            return web.json_response(await self.delete(request, info))
        if info.verb == "deletecollection":
            return web.json_response(await self.delete_collection(request, info))
        raise ApiError(405, f"the server does not allow this method on the requested resource ({info.verb})")

    # -- read ----------------------------------------------------------------------------------

    def key_namespace(self, info: RequestInfo) -> str:
        return "" if info.resource in CLUSTER_SCOPED else (info.namespace or "default")

    def get_object(self, info: RequestInfo) -> Obj:
        assert info.name is not None
        obj = self.store.get(info.resource, self.key_namespace(info), info.name)
        if obj is None:
            raise not_found(info.resource, info.name)
        info.uid = obj["metadata"].get("uid")
        return obj

    def matchers(
        self, request: web.Request, resource: str
    ) -> tuple[Callable[[Mapping[str, Any]], bool], Callable[[Mapping[str, Any]], bool], bool]:
        try:
            labels = parse_label_selector(request.query.get("labelSelector"))
            field_text = request.query.get("fieldSelector")
            fields = parse_field_selector(field_text, resource)
        except SelectorError as exc:
            raise ApiError(400, str(exc)) from None
        return labels, fields, bool(field_text and field_text.strip())

    def list_objects(self, request: web.Request, info: RequestInfo) -> Obj:
        labels, fields, _ = self.matchers(request, info.resource)
        rv_param = request.query.get("resourceVersion")
        if rv_param and rv_param != "0" and request.query.get("resourceVersionMatch") == "Exact":
            try:
                self.store.check_rv(int(rv_param))
            except ValueError:
                raise ApiError(400, f"invalid resource version: {rv_param}") from None
            except TooOld as exc:
                raise ApiError(410, str(exc), reason="Expired") from None
        namespace = None if info.resource in CLUSTER_SCOPED else info.namespace
        items = [
            obj
            for obj in self.store.candidates(info.resource, namespace, request.query.get("fieldSelector"))
            if labels(obj["metadata"].get("labels") or {}) and fields(obj)
        ]
        items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        meta: Obj = {"resourceVersion": str(self.store.rv)}
        cont = request.query.get("continue")
        if cont:
            try:
                start = json.loads(base64.urlsafe_b64decode(cont.encode()).decode())
                after = (start["ns"], start["name"])
            except (ValueError, KeyError, TypeError):
                raise ApiError(400, "continue key is not valid: illegal base64 data") from None
            items = [o for o in items if (o["metadata"].get("namespace", ""), o["metadata"]["name"]) > after]
        limit = _int_param(request, "limit")
        if limit and limit > 0 and len(items) > limit:
            last = items[limit - 1]["metadata"]
            token = json.dumps({"ns": last.get("namespace", ""), "name": last["name"]})
            meta["continue"] = base64.urlsafe_b64encode(token.encode()).decode()
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        return {
            "kind": f"{KINDS[info.resource]}List",
            "apiVersion": API_VERSIONS.get(info.resource, "v1"),
            "metadata": meta,
            "items": items,
        }

    # -- watch ---------------------------------------------------------------------------------

    async def start_stream(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        self.audit(request, info, 200)
        return response

    @staticmethod
    async def write_error_event(response: web.StreamResponse, code: int, message: str, reason: str) -> None:
        event = {"type": "ERROR", "object": status_body(code, message, reason)}
        await response.write(json.dumps(event).encode() + b"\n")

    async def watch(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        labels, fields, has_fields = self.matchers(request, info.resource)
        rv_param = request.query.get("resourceVersion", "")
        timeout = _int_param(request, "timeoutSeconds")
        bookmarks = _bool(request.query.get("allowWatchBookmarks"))
        initial_end = _bool(request.query.get("sendInitialEvents"))
        namespace = None if info.resource in CLUSTER_SCOPED else info.namespace
        watcher = Watcher(info.resource, namespace, labels, fields, field_filter=has_fields)
        backlog: list[bytes] = []
        too_old: TooOld | None = None
        # Snapshot and subscribe with no await in between, so no change can slip through.
        if rv_param in ("", "0") or initial_end:
            for obj in self.store.items(info.resource, namespace):
                if labels(obj["metadata"].get("labels") or {}) and fields(obj):
                    backlog.append(
                        json.dumps({"type": "ADDED", "object": obj}, separators=(",", ":")).encode() + b"\n"
                    )
        else:
            try:
                since = int(rv_param)
            except ValueError:
                raise ApiError(400, f"invalid resource version: {rv_param}") from None
            try:
                backlog = [e.payload for e in self.store.since(since) if watcher.matches(e)]
            except TooOld as exc:
                too_old = exc
        start_rv = self.store.rv
        render = (
            self.table_renderer(info.resource) if wants_table(request.headers.get("Accept", "")) else None
        )
        if render is not None:
            backlog = [render(payload) for payload in backlog]
        self.store.watchers.add(watcher)
        self.store.notify()  # a new watch is a state change too (tests wait for watchers)
        response = await self.start_stream(request, info)
        try:
            if too_old is not None:
                await self.write_error_event(response, 410, str(too_old), "Expired")
                return response
            for payload in backlog:
                await response.write(payload)
            if initial_end and bookmarks:
                await response.write(self.bookmark(info.resource, start_rv, initial_end=True))
            await self.pump(
                response,
                watcher,
                info.resource,
                timeout_seconds=timeout,
                bookmarks=bookmarks,
                render=render,
                transport=request.transport,
            )
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.store.watchers.discard(watcher)
            self.store.notify()
        return response

    @staticmethod
    def table_renderer(resource: str) -> Callable[[bytes], bytes]:
        """Turn a watch event line into the same event carrying a one-row Table (for kubectl)."""

        def render(payload: bytes) -> bytes:
            event = json.loads(payload)
            obj = event["object"]
            rv = (obj.get("metadata") or {}).get("resourceVersion", "")
            event["object"] = table(resource, [obj], rv)
            return json.dumps(event, separators=(",", ":")).encode() + b"\n"

        return render

    def bookmark(self, resource: str, rv: int, *, initial_end: bool = False) -> bytes:
        meta: Obj = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        event = {
            "type": "BOOKMARK",
            "object": {
                "kind": KINDS[resource],
                "apiVersion": API_VERSIONS.get(resource, "v1"),
                "metadata": meta,
            },
        }
        return json.dumps(event).encode() + b"\n"

    async def pump(
        self,
        response: web.StreamResponse,
        watcher: Watcher,
        resource: str,
        *,
        timeout_seconds: int | None,
        bookmarks: bool,
        render: Callable[[bytes], bytes] | None = None,
        transport: asyncio.Transport | None = None,
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_seconds if timeout_seconds else None
        next_bookmark = loop.time() + self.bookmark_interval
        stop = asyncio.ensure_future(self.stopping.wait())
        dropped = asyncio.ensure_future(watcher.dropped.wait())
        try:
            while True:
                now = loop.time()
                waits = [t for t in (deadline, next_bookmark if bookmarks else None) if t is not None]
                wait = max(0.0, min(waits) - now) if waits else None
                if deadline is not None and now >= deadline:
                    break
                if watcher.queue.empty():
                    getter = asyncio.ensure_future(watcher.queue.get())
                    done, _ = await asyncio.wait(
                        {getter, stop, dropped}, timeout=wait, return_when=asyncio.FIRST_COMPLETED
                    )
                    if stop in done or dropped in done:
                        if dropped in done and watcher.reset and transport is not None:
                            getter.cancel()
                            transport.abort()
                            break
                        # A clean end flushes what was already queued for this watch.
                        pending = (
                            [getter.result().payload] if getter.done() and not getter.cancelled() else []
                        )
                        getter.cancel()
                        while not watcher.queue.empty():
                            pending.append(watcher.queue.get_nowait().payload)
                        if render is not None:
                            pending = [render(chunk) for chunk in pending]
                        if pending:
                            await response.write(b"".join(pending))
                        break
                    if getter not in done:
                        getter.cancel()
                        if bookmarks and loop.time() >= next_bookmark:
                            await response.write(self.bookmark(resource, self.store.rv))
                            next_bookmark = loop.time() + self.bookmark_interval
                        continue
                    event: WatchEvent = getter.result()
                else:
                    event = watcher.queue.get_nowait()
                chunks = [event.payload]
                while not watcher.queue.empty() and len(chunks) < 256:
                    chunks.append(watcher.queue.get_nowait().payload)
                if render is not None:
                    chunks = [render(chunk) for chunk in chunks]
                await response.write(b"".join(chunks))
        finally:
            stop.cancel()
            dropped.cancel()

    # -- create / update / patch ----------------------------------------------------------------

    async def body(self, request: web.Request) -> Any:
        raw = await request.read()
        try:
            return json.loads(raw) if raw else {}
        except ValueError as exc:
            raise ApiError(400, f"the body of the request was in an unknown format: {exc}") from None

    def ensure_namespace(self, info: RequestInfo) -> str:
        if info.resource in CLUSTER_SCOPED:
            return ""
        namespace = info.namespace or "default"
        if self.store.get("namespaces", "", namespace) is None:
            raise not_found("namespaces", namespace)
        return namespace

    async def create(self, request: web.Request, info: RequestInfo) -> Obj:
        obj = await self.body(request)
        if not isinstance(obj, dict):
            raise ApiError(400, "the body of the request must be a JSON object")
        kind = KINDS[info.resource]
        if obj.get("kind") not in (None, kind):
            raise ApiError(
                400,
                f"the API version in the data (v1) does not match the expected kind: "
                f"got {obj.get('kind')}, expected {kind}",
            )
        namespace = self.ensure_namespace(info)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "metadata must be an object")
        if meta.get("namespace") not in (None, "", namespace) and info.resource not in CLUSTER_SCOPED:
            raise ApiError(
                400, "the namespace of the provided object does not match the namespace sent on the request"
            )
        if not meta.get("name") and meta.get("generateName"):
            suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
            meta["name"] = f"{meta['generateName']}{suffix}"
        causes = validate_metadata(meta, kind)
        if info.resource == "pods":
            causes += validate_pod_spec(obj.get("spec"))
        if info.resource == "jobs":
            from airflow_k8s_retry.testing.jobs import validate_job

            causes += validate_job(obj)
        if causes:
            raise invalid(kind, meta.get("name") or "", causes)
        if self.store.get(info.resource, namespace, meta["name"]) is not None:
            raise ApiError(
                409,
                f'{info.resource} "{meta["name"]}" already exists',
                reason="AlreadyExists",
                details={"name": meta["name"], "kind": info.resource},
            )
        obj["kind"] = kind
        obj["apiVersion"] = API_VERSIONS.get(info.resource, "v1")
        if info.resource not in CLUSTER_SCOPED:
            meta["namespace"] = namespace
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_iso()
        meta.pop("resourceVersion", None)
        meta.pop("deletionTimestamp", None)
        if info.resource == "pods":
            default_pod(obj)
            info.labels = dict(meta.get("labels") or {})
        if info.resource == "jobs":
            from airflow_k8s_retry.testing.jobs import default_job

            default_job(obj)
        if info.resource == "namespaces":
            obj["status"] = {"phase": "Active"}
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        self.store.put(info.resource, obj, "ADDED")
        info.uid = meta["uid"]
        if info.resource == "pods":
            self.kubelet.admit(obj)
        elif info.resource in ("secrets", "configmaps"):
            self.store.open_keys.discard((kind, namespace, meta["name"]))
        return obj

    async def patch(self, request: web.Request, info: RequestInfo) -> Obj:
        current = self.get_object(info)
        document = await self.body(request)
        content_type = request.content_type
        try:
            if content_type == "application/json-patch+json":
                patched = json_patch(current, document)
            elif content_type == "application/merge-patch+json":
                patched = merge_patch(current, document)
            elif content_type == "application/strategic-merge-patch+json":
                patched = strategic_merge_patch(current, document)
            else:
                raise ApiError(
                    415,
                    f"the body of the request was in an unknown format - accepted media types "
                    f"include: application/json-patch+json, application/merge-patch+json, "
                    f"application/strategic-merge-patch+json (got {content_type})",
                )
        except PatchError as exc:
            raise ApiError(422 if content_type != "application/json-patch+json" else 500, str(exc)) from None
        if not isinstance(patched, dict):
            raise ApiError(422, "the patch turned the object into something that is not an object")
        wanted_rv = ((document.get("metadata") or {}) if isinstance(document, dict) else {}).get(
            "resourceVersion"
        )
        return self.store_update(info, current, patched, wanted_rv)

    async def update(self, request: web.Request, info: RequestInfo) -> Obj:
        current = self.get_object(info)
        new = await self.body(request)
        if not isinstance(new, dict):
            raise ApiError(400, "the body of the request must be a JSON object")
        wanted_rv = (new.get("metadata") or {}).get("resourceVersion")
        return self.store_update(info, current, new, wanted_rv)

    def store_update(self, info: RequestInfo, current: Obj, new: Obj, wanted_rv: str | None) -> Obj:
        kind = KINDS[info.resource]
        name = current["metadata"]["name"]
        if wanted_rv and wanted_rv != current["metadata"].get("resourceVersion"):
            raise ApiError(
                409,
                f'Operation cannot be fulfilled on {info.resource} "{name}": the object has been '
                f"modified; please apply your changes to the latest version and try again",
                details={"name": name, "kind": info.resource},
            )
        meta = new.setdefault("metadata", {})
        for fixed in (
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ):
            if fixed in current["metadata"]:
                meta[fixed] = current["metadata"][fixed]
            else:
                meta.pop(fixed, None)
        causes = validate_metadata(meta, kind)
        if info.resource == "pods":
            new["spec"] = new.get("spec") or {}
            causes += pod_spec_immutable(current["spec"], new["spec"])
            new["status"] = current.get("status", {})  # status is written through pods/status only
        if info.resource == "jobs":
            new["status"] = current.get("status", {})  # the Job controller's
        if causes:
            raise invalid(kind, name, causes)
        new["kind"] = kind
        new["apiVersion"] = API_VERSIONS.get(info.resource, "v1")
        finalizers_before = current["metadata"].get("finalizers")
        self.store.put(info.resource, new, "MODIFIED")
        info.uid = meta.get("uid")
        if info.resource == "pods" and finalizers_before != meta.get("finalizers"):
            self.kubelet.finalizers_changed(new)
        return new

    # -- delete ----------------------------------------------------------------------------------

    async def delete(self, request: web.Request, info: RequestInfo) -> Obj:
        current = self.get_object(info)
        options = await self.body(request)
        if not isinstance(options, dict):
            raise ApiError(400, "DeleteOptions must be a JSON object")
        name = current["metadata"]["name"]
        pre = options.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != current["metadata"]["uid"]:
            raise ApiError(
                409,
                f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: "
                f"{current['metadata']['uid']}",
                details={"name": name, "kind": info.resource},
            )
        if pre.get("resourceVersion") and pre["resourceVersion"] != current["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                f"ResourceVersion in object meta: {current['metadata']['resourceVersion']}",
                details={"name": name, "kind": info.resource},
            )
        policy = options.get("propagationPolicy") or request.query.get("propagationPolicy")
        if policy not in (None, "Orphan", "Background", "Foreground"):
            raise invalid(
                "DeleteOptions",
                "",
                [
                    (
                        "FieldValueNotSupported",
                        "propagationPolicy",
                        f'Unsupported value: "{policy}": supported values: '
                        f'"Foreground", "Background", "Orphan", "nil"',
                    )
                ],
            )
        grace_raw = options.get("gracePeriodSeconds")
        if grace_raw is None:
            grace_raw = _int_param(request, "gracePeriodSeconds")
        if info.resource != "pods":
            removed = self.store.remove(info.resource, self.key_namespace(info), name)
            assert removed is not None
            return {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {"name": name, "kind": info.resource, "uid": removed["metadata"]["uid"]},
            }
        grace = (
            int(grace_raw)
            if grace_raw is not None
            else int(current["spec"].get("terminationGracePeriodSeconds", 30))
        )
        grace = max(grace, 0)
        phase = (current.get("status") or {}).get("phase")
        if not current["spec"].get("nodeName") or phase in ("Succeeded", "Failed"):
            grace = 0
        if grace == 0 and current["metadata"].get("finalizers"):
            grace = 1  # with finalizers the object must stay until they are removed
        if not current["metadata"].get("deletionTimestamp") or grace == 0:
            current = copy.deepcopy(current)
            current["metadata"]["deletionTimestamp"] = now_iso(time.time() + grace)
            current["metadata"]["deletionGracePeriodSeconds"] = grace
            if grace == 0 and not current["metadata"].get("finalizers"):
                self.kubelet.delete(current, 0)
                return current
            self.store.put("pods", current, "MODIFIED")
        self.kubelet.delete(current, grace)
        return self.store.get("pods", current["metadata"]["namespace"], name) or current

    async def evict(self, request: web.Request, info: RequestInfo) -> Obj:
        """The Eviction API: mark the pod as a disruption target, then delete it gracefully."""
        pod = self.get_object(info)
        body = await self.body(request)
        options = (body.get("deleteOptions") if isinstance(body, dict) else None) or {}
        grace = options.get("gracePeriodSeconds")
        if grace is None:
            grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
        run = self.kubelet.runs.get(pod["metadata"]["uid"])
        if run is not None:
            self.kubelet.evict_via_api(run, int(grace))
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    async def delete_collection(self, request: web.Request, info: RequestInfo) -> Obj:
        listed = self.list_objects(request, info)
        for obj in listed["items"]:
            sub = RequestInfo(
                verb="delete",
                resource=info.resource,
                namespace=obj["metadata"].get("namespace"),
                name=obj["metadata"]["name"],
            )
            try:
                await self.delete(request, sub)
            except ApiError as exc:
                if exc.code != 404:
                    raise
        return listed

    # -- pods/log --------------------------------------------------------------------------------

    @staticmethod
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

    async def pod_log(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        pod = self.get_object(info)
        run = self.kubelet.runs.get(pod["metadata"]["uid"])
        names = [c["name"] for c in pod["spec"].get("initContainers") or []] + [
            c["name"] for c in pod["spec"]["containers"]
        ]
        container_name = self.container_named(request, pod, info)
        if container_name not in names or run is None:
            raise ApiError(400, f"container {container_name} is not valid for pod {info.name}")
        container = run.container(container_name)
        assert container is not None
        previous = _bool(request.query.get("previous"))
        if previous and container.previous_logs is None:
            raise ApiError(
                400, f'previous terminated container "{container_name}" in pod "{info.name}" not found'
            )
        if not container.started:
            reason = (container.state.get("waiting") or {}).get("reason", "ContainerCreating")
            raise ApiError(
                400, f'container "{container_name}" in pod "{info.name}" is waiting to start: {reason}'
            )
        tail = _int_param(request, "tailLines")
        since = _int_param(request, "sinceSeconds")
        limit = _int_param(request, "limitBytes")
        stamps = _bool(request.query.get("timestamps"))
        follow = _bool(request.query.get("follow"))

        def render(lines: list[tuple[float, str]]) -> bytes:
            out = []
            for t, line in lines:
                if stamps:
                    stamp = datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"
                    out.append(f"{stamp} {line}\n")
                else:
                    out.append(line + "\n")
            return "".join(out).encode()

        lines = list(container.previous_logs or []) if previous else list(container.logs)
        if previous:
            follow = False  # a previous run has ended
        if since is not None:
            lines = [entry for entry in lines if entry[0] >= time.time() - since]
        if tail is not None and tail >= 0:
            lines = lines[-tail:] if tail else []
        if not follow:
            data = render(lines)
            if limit:
                data = data[:limit]
            return web.Response(body=data, content_type="text/plain")
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        self.audit(request, info, 200)
        sent = len(container.logs)
        written = 0
        try:
            chunk = render(lines)
            if chunk:
                await response.write(chunk[:limit] if limit else chunk)
                written += len(chunk)
            while not (container.terminated or run.gone) and not self.stopping.is_set():
                if limit and written >= limit:
                    break
                changed = container.changed
                stop = asyncio.ensure_future(self.stopping.wait())
                waiter = asyncio.ensure_future(changed.wait())
                await asyncio.wait({waiter, stop}, return_when=asyncio.FIRST_COMPLETED)
                stop.cancel()
                waiter.cancel()
                fresh = container.logs[sent:]
                sent = len(container.logs)
                if fresh:
                    chunk = render(fresh)
                    await response.write(chunk)
                    written += len(chunk)
            fresh = container.logs[sent:]
            if fresh:
                await response.write(render(fresh))
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return response

    # -- pods/exec -------------------------------------------------------------------------------

    async def pod_exec(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        pod = self.get_object(info)
        run = self.kubelet.runs.get(pod["metadata"]["uid"])
        command = request.query.getall("command", [])
        if not command:
            raise ApiError(400, "you must specify at least 1 command")
        container_name = self.container_named(request, pod, info)
        container = run.container(container_name) if run is not None else None
        if run is None or container is None:
            raise ApiError(400, f"container {container_name} is not valid for pod {info.name}")
        if not container.running or run.frozen:
            raise ApiError(400, f'unable to upgrade connection: container not found ("{container_name}")')
        ws = web.WebSocketResponse(
            protocols=("v5.channel.k8s.io", "v4.channel.k8s.io", "channel.k8s.io"), autoping=True
        )
        await ws.prepare(request)
        self.audit(request, info, 101)
        try:
            await run_exec_session(
                ws, self.kubelet, run, container, command, stdin=_bool(request.query.get("stdin"))
            )
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            if not ws.closed:
                await ws.close()
        return ws


def api_resource_list() -> Obj:
    def res(name: str, kind: str, namespaced: bool, verbs: list[str], short: list[str] | None = None) -> Obj:
        out: Obj = {
            "name": name,
            "singularName": "" if "/" in name else kind.lower(),
            "namespaced": namespaced,
            "kind": kind,
            "verbs": verbs,
        }
        if short:
            out["shortNames"] = short
        return out

    full = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
    return {
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            res("pods", "Pod", True, full, ["po"]),
            res("pods/log", "Pod", True, ["get"]),
            res("pods/exec", "PodExecOptions", True, ["create", "get"]),
            res("pods/status", "Pod", True, ["get"]),
            res("pods/eviction", "Eviction", True, ["create"]),
            res("events", "Event", True, full, ["ev"]),
            res(
                "namespaces",
                "Namespace",
                False,
                ["create", "delete", "get", "list", "patch", "update", "watch"],
                ["ns"],
            ),
            res("secrets", "Secret", True, full),
            res("configmaps", "ConfigMap", True, full, ["cm"]),
            res("nodes", "Node", False, ["get", "list", "watch"], ["no"]),
        ],
    }


Cause = tuple[str, str, str]  # (reason, field, message)


def invalid(kind: str, name: str, causes: list[Cause]) -> ApiError:
    text = "; ".join(f"{f}: {m}" for _, f, m in causes)
    summary = text if len(causes) == 1 else f"[{', '.join(f'{f}: {m}' for _, f, m in causes)}]"
    return ApiError(
        422,
        f'{kind} "{name}" is invalid: {summary}',
        details={
            "name": name,
            "kind": kind.lower() + "s" if kind[0].isupper() else kind,
            "causes": [{"reason": r, "message": m, "field": f} for r, f, m in causes],
        },
    )


def validate_metadata(meta: Obj, kind: str) -> list[Cause]:
    causes: list[Cause] = []
    name = meta.get("name")
    if not name:
        causes.append(
            ("FieldValueRequired", "metadata.name", "Required value: name or generateName is required")
        )
    elif kind != "Namespace" and (len(name) > 253 or not _DNS_SUBDOMAIN.match(name)):
        causes.append(
            (
                "FieldValueInvalid",
                "metadata.name",
                f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case '
                f"alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character "
                f"(e.g. 'example.com', regex used for validation is "
                f"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            )
        )
    elif kind == "Namespace" and (len(name) > 63 or not _DNS_LABEL.match(name)):
        causes.append(
            (
                "FieldValueInvalid",
                "metadata.name",
                f'Invalid value: "{name}": a lowercase RFC 1123 label must consist of lower case '
                f"alphanumeric characters or '-', and must start and end with an alphanumeric character",
            )
        )
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        causes.append(("FieldValueInvalid", "metadata.labels", "Invalid value: labels must be a map"))
        return causes
    for key, value in labels.items():
        if not _LABEL_KEY.match(str(key)) or len(str(key).split("/")[-1]) > 63:
            causes.append(
                (
                    "FieldValueInvalid",
                    "metadata.labels",
                    f"Invalid value: \"{key}\": name part must consist of alphanumeric characters, '-', "
                    f"'_' or '.', and must start and end with an alphanumeric character",
                )
            )
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            causes.append(
                (
                    "FieldValueInvalid",
                    "metadata.labels",
                    f'Invalid value: "{value}": a valid label must be '
                    f"an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start "
                    f"and end with an alphanumeric character",
                )
            )
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict) or any(not isinstance(v, str) for v in annotations.values()):
        causes.append(
            ("FieldValueInvalid", "metadata.annotations", "Invalid value: annotation values must be strings")
        )
    return causes


def validate_pod_spec(spec: Any) -> list[Cause]:
    causes: list[Cause] = []
    if not isinstance(spec, dict):
        return [("FieldValueRequired", "spec", "Required value")]
    containers = spec.get("containers")
    if not containers:
        causes.append(("FieldValueRequired", "spec.containers", "Required value"))
        return causes
    seen: set[str] = set()
    for group in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(group) or []):
            where = f"spec.{group}[{i}]"
            if not isinstance(c, dict):
                causes.append(("FieldValueInvalid", where, "Invalid value: must be an object"))
                continue
            name = c.get("name")
            if not name:
                causes.append(("FieldValueRequired", f"{where}.name", "Required value"))
            elif not _DNS_LABEL.match(name) or len(name) > 63:
                causes.append(
                    (
                        "FieldValueInvalid",
                        f"{where}.name",
                        f'Invalid value: "{name}": a lowercase RFC 1123 label must consist of lower case '
                        f"alphanumeric characters or '-', and must start and end with an alphanumeric "
                        f"character",
                    )
                )
            elif name in seen:
                causes.append(("FieldValueDuplicate", f"{where}.name", f'Duplicate value: "{name}"'))
            else:
                seen.add(name)
            if not c.get("image"):
                causes.append(("FieldValueRequired", f"{where}.image", "Required value"))
    policy = spec.get("restartPolicy")
    if policy not in (None, "Always", "OnFailure", "Never"):
        causes.append(
            (
                "FieldValueNotSupported",
                "spec.restartPolicy",
                f'Unsupported value: "{policy}": supported values: "Always", "OnFailure", "Never"',
            )
        )
    return causes


def pod_spec_immutable(old: Obj, new: Obj) -> list[Cause]:
    def strip(spec: Obj) -> Obj:
        spec = copy.deepcopy(spec)
        for group in ("containers", "initContainers"):
            for c in spec.get(group) or []:
                c.pop("image", None)
        spec.pop("activeDeadlineSeconds", None)
        spec.pop("tolerations", None)
        return spec

    if strip(old) != strip(new):
        return [
            (
                "FieldValueForbidden",
                "spec",
                "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
                "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                "(allow it to be set to 1 if it was previously negative)",
            )
        ]
    return []


def default_pod(pod: Obj) -> None:
    """Fill in the defaults the apiserver's defaulting and admission add to a new pod."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tolerations = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") == key for t in tolerations):
            tolerations.append(
                {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            )
    guaranteed = True
    any_resources = False
    for group in ("initContainers", "containers"):
        for c in spec.get(group) or []:
            image = c.get("image", "")
            tagless = ":" not in image.rsplit("/", 1)[-1] and "@" not in image
            c.setdefault(
                "imagePullPolicy", "Always" if tagless or image.endswith(":latest") else "IfNotPresent"
            )
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            resources = c.setdefault("resources", {})
            if resources.get("limits") and not resources.get("requests"):
                resources["requests"] = dict(resources["limits"])
            if resources.get("requests") or resources.get("limits"):
                any_resources = True
            limits = resources.get("limits") or {}
            requests = resources.get("requests") or {}
            if not limits.get("cpu") or not limits.get("memory") or requests != limits:
                guaranteed = False
    qos = "Guaranteed" if guaranteed and any_resources else ("Burstable" if any_resources else "BestEffort")
    pod["status"] = {"phase": "Pending", "qosClass": qos}
