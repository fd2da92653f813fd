"""Request parsing: a URL and method resolved into (verb, resource, namespace, name), once.

As the apiserver's request info resolver does, ``/api/v1/namespaces/NS/pods/NAME/log`` becomes
verb ``get``, resource ``pods``, subresource ``log``; a GET on a collection is ``list`` or, with
``?watch=true``, ``watch``; ``pods/exec`` is ``create`` whatever the method. ``batch/v1`` Jobs
under ``/apis/`` are routed like the core resources.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from airflow_k8s_retry_testing.apiserver.errors import ApiError
from airflow_k8s_retry_testing.selectors import (
    Matcher,
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)
from airflow_k8s_retry_testing.store import API_VERSIONS, Obj

_METHOD_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


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


def flag(value: str | None) -> bool:
    """A boolean query parameter as the apiserver reads it."""
    return value is not None and value.lower() in ("true", "1", "yes")


def int_param(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ApiError(400, f"invalid value for {name}: {raw!r} is not an integer") from None


async def read_body(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return json.loads(raw) if raw else {}
    except ValueError as exc:
        raise ApiError(400, f"the body of the request was in an unknown format: {exc}") from None


def selectors(request: web.Request, resource: str) -> tuple[Matcher, Matcher, bool]:
    """The label and field selector matchers, and whether a field selector was given at all."""
    try:
        labels = parse_label_selector(request.query.get("labelSelector"))
        field_text = request.query.get("fieldSelector")
        fields = parse_field_selector(field_text, resource)
    except SelectorError as exc:
        raise ApiError(400, str(exc)) from None
    return labels, fields, bool(field_text and field_text.strip())


def _verb(method: str, name: str | None, sub: str | None, watch: bool) -> str:
    if method == "GET":
        if sub == "exec":
            return "create"
        if name is None:
            return "watch" if watch else "list"
        return "get"
    if method == "DELETE":
        return "delete" if name is not None else "deletecollection"
    return _METHOD_VERBS.get(method, method.lower())


def parse_request(method: str, path: str, query: Mapping[str, str]) -> RequestInfo | None:
    """Resolve ``/api/v1/...`` into a RequestInfo (None for non-resource paths)."""
    parts = [p for p in path.split("/") if p]
    group = "/".join(parts[1:3]) if parts[:1] == ["apis"] and len(parts) >= 4 else None
    grouped = group in set(API_VERSIONS.values())
    if grouped:
        parts = ["api", "v1", *parts[3:]]  # batch/v1 Jobs, policy/v1 budgets: routed as core resources
    if parts[:2] != ["api", "v1"] or len(parts) < 3:
        return None
    rest = parts[2:]
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace = rest[1]
        rest = rest[2:]
    resource = rest[0]
    if (group if grouped else None) != API_VERSIONS.get(resource):
        resource = f"{resource} (not in this API group)"  # unknown here: 404 as on a real server
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if resource == "namespaces" and name is not None:
        namespace = None
    watch = flag(query.get("watch"))
    return RequestInfo(
        verb=_verb(method, name, sub, watch),
        resource=resource,
        namespace=namespace,
        name=name,
        subresource=sub,
        watch=watch,
    )
