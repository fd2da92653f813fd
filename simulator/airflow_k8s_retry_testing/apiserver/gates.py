"""The gates every resource request passes, in a real API server's order.

Authentication (the bearer token: the admin token, or one ``FakeCluster.restrict``/``grant``
registered), authorization (the token's RBAC-like rules; 403 with the authorizer's wording),
then fault injection, which sits after authorization so a test can make any verb on any resource
fail. Every answer is counted and written to the audit trail once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import NoReturn

from aiohttp import web

from airflow_k8s_retry_testing.apiserver.errors import ApiError
from airflow_k8s_retry_testing.apiserver.requests import RequestInfo
from airflow_k8s_retry_testing.scenario import Fault
from airflow_k8s_retry_testing.store import API_VERSIONS, Obj, Store

_FAULT_MESSAGES = {
    500: "Internal error occurred: injected fault",
    429: "Too many requests, please try again later.",
    410: "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter.",
}


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


def bearer_token(request: web.Request) -> str:
    return request.headers.get("Authorization", "")[len("Bearer ") :].strip()


class Gates:
    """Authentication, authorization, faults and the audit trail."""

    def __init__(self, store: Store, *, token: str, faults: list[FaultSlot]) -> None:
        self.store = store
        self.token = token
        self.rules: dict[str, Rule | RuleSet] = {}
        self.faults = faults

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
        details = {"name": info.name, "kind": info.resource} if info.name else {"kind": info.resource}
        if resource == "pods/exec" and info.verb == "create":
            # kube-apiserver (1.36) authorizes an exec's websocket upgrade as "create" too, and
            # that refusal's message stops before naming the user, the verb or the resource.
            raise ApiError(403, f"{subject} is forbidden: ", details=details)
        raise ApiError(
            403,
            f'{subject} is forbidden: User "{user}" cannot {info.verb} resource "{resource}" '
            f'in API group "{group}"{where}',
            details=details,
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
            # kube-apiserver's audit events carry it as requestURI: path and query (selectors).
            "request_uri": request.path_qs,
        }
        if info.labels is not None:
            record["labels"] = info.labels
        record.update(info.extra)
        self.store.audit.write(record)
        self.store.notify()  # audit records are observable state: wait_for re-checks on them too

    async def inject(
        self,
        request: web.Request,
        info: RequestInfo,
        slot: FaultSlot,
        serve: Callable[[], Awaitable[web.StreamResponse]],
        expired_watch: Callable[[], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        """Answer with the fault instead of (or, for ``slow`` and ``lost``, besides) serving."""
        status = slot.fault.status
        info.extra["fault"] = status
        if status == "slow":
            # The request has arrived whole; the server is slow to act on it (and acts even if the
            # client has gone meanwhile, as an API server that already has the body does).
            await request.read()
            await asyncio.sleep(slot.fault.delay_seconds)
            return await serve()
        if status == "lost" and info.verb != "watch":
            # The change lands (the store is written), but its answer never reaches the client.
            with contextlib.suppress(ApiError):
                await serve()
            self._abort(request, info)
        if status in ("reset", "lost"):  # a lost watch is a reset watch
            self._abort(request, info)
        assert isinstance(status, int)
        if status == 410 and info.verb == "watch":
            return await expired_watch()
        if status == 403:
            raise ApiError(403, _forbidden_message(info), details={"kind": info.resource})
        raise ApiError(status, _FAULT_MESSAGES[status])

    def _abort(self, request: web.Request, info: RequestInfo) -> NoReturn:
        self.audit(request, info, 0)
        if request.transport is not None:
            request.transport.abort()
        raise asyncio.CancelledError  # nothing more to send on an aborted connection


def _forbidden_message(info: RequestInfo) -> str:
    if info.verb == "create" and info.full_resource == "pods":
        return (
            f'pods "{info.name or "pod"}" is forbidden: exceeded quota: compute, requested: '
            "limits.cpu=1, used: limits.cpu=8, limited: limits.cpu=8"
        )
    return (
        f'{info.resource} is forbidden: User "system:serviceaccount:default:airflow" cannot '
        f'{info.verb} resource "{info.full_resource}" in API group "" (injected fault)'
    )
