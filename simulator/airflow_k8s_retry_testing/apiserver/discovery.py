"""Discovery and the other non-resource paths: ``/version``, ``/api``, ``/apis``, health checks.

``kubectl`` and the clients read these before anything else; the resource lists say which verbs
each resource serves here (``nodes`` are read-only, ``pods/exec`` and ``pods/eviction`` are the
subresources simulated).
"""

from __future__ import annotations

from aiohttp import web

from airflow_k8s_retry_testing.apiserver.errors import no_such_resource
from airflow_k8s_retry_testing.store import Obj

BATCH = "batch/v1"
PUBLIC_PATHS = frozenset({"/version", "/healthz", "/livez", "/readyz"})
HEALTH_PATHS = ("/healthz", "/livez", "/readyz")
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
_ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def non_resource(request: web.Request, *, host: str, minor_version: int) -> web.StreamResponse:
    """Answer a path that names no resource (404 for an unknown one)."""
    path = request.path.rstrip("/") or "/"
    if path == "/version":
        minor = str(minor_version)
        return web.json_response({**VERSION_INFO, "minor": minor, "gitVersion": f"v1.{minor}.0-fake"})
    if path in HEALTH_PATHS:
        return web.Response(text="ok")
    documents = {
        "/api": lambda: api_versions(host),
        "/api/v1": api_resource_list,
        "/apis": lambda: {"kind": "APIGroupList", "apiVersion": "v1", "groups": [api_group()]},
        "/apis/batch/v1": api_resources,
    }
    document = documents.get(path)
    if document is None:
        raise no_such_resource()
    return web.json_response(document())


def api_versions(host: str) -> Obj:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
    }


def _resource(
    name: str, kind: str, namespaced: bool, verbs: list[str], short: list[str] | None = None
) -> Obj:
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


def api_resource_list() -> Obj:
    """``/api/v1``: the core resources simulated."""
    namespace_verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
    return {
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            _resource("pods", "Pod", True, _ALL_VERBS, ["po"]),
            _resource("pods/log", "Pod", True, ["get"]),
            _resource("pods/exec", "PodExecOptions", True, ["create", "get"]),
            _resource("pods/status", "Pod", True, ["get"]),
            _resource("pods/eviction", "Eviction", True, ["create"]),
            _resource("events", "Event", True, _ALL_VERBS, ["ev"]),
            _resource("namespaces", "Namespace", False, namespace_verbs, ["ns"]),
            _resource("secrets", "Secret", True, _ALL_VERBS),
            _resource("configmaps", "ConfigMap", True, _ALL_VERBS, ["cm"]),
            _resource("nodes", "Node", False, ["get", "list", "watch"], ["no"]),
        ],
    }


def api_group() -> Obj:
    """The ``batch`` entry of ``/apis``."""
    version = {"groupVersion": BATCH, "version": "v1"}
    return {"name": "batch", "versions": [version], "preferredVersion": version}


def api_resources() -> Obj:
    """``/apis/batch/v1``: the one resource simulated."""
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": BATCH,
        "resources": [
            {"name": "jobs", "singularName": "job", "namespaced": True, "kind": "Job", "verbs": _ALL_VERBS}
        ],
    }
