"""The verb handlers: get, list, create, patch, update, delete and deletecollection.

What every resource shares is here (namespaces must exist, names are unique, resourceVersion and
UID preconditions, list paging with ``limit``/``continue``, the three patch types); what a kind
adds comes from its strategy (``pods``, ``jobs``). Nothing here calls the node side: the
scheduler and the kubelet learn of a created, changed or deleted pod from the store, as real ones
from their watches.
"""

from __future__ import annotations

import base64
import json
import random
import string
import uuid
from typing import Any

from aiohttp import web

from airflow_k8s_retry_testing.apiserver import admission
from airflow_k8s_retry_testing.apiserver import jobs as job_strategy
from airflow_k8s_retry_testing.apiserver import pods as pod_strategy
from airflow_k8s_retry_testing.apiserver.errors import ApiError, Cause, invalid, not_found, success
from airflow_k8s_retry_testing.apiserver.requests import RequestInfo, int_param, read_body, selectors
from airflow_k8s_retry_testing.apiserver.validation import validate_metadata
from airflow_k8s_retry_testing.patching import PatchError, json_patch, merge_patch, strategic_merge_patch
from airflow_k8s_retry_testing.store import API_VERSIONS, CLUSTER_SCOPED, KINDS, Obj, Store, TooOld, now_iso

PATCHES = {
    "application/json-patch+json": json_patch,
    "application/merge-patch+json": merge_patch,
    "application/strategic-merge-patch+json": strategic_merge_patch,
}
#: Metadata only the API server writes: an update or patch cannot change it.
_FIXED_METADATA = (
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)
_PRECONDITIONS = (
    ("uid", "UID", "deleted and then recreated"),
    ("resourceVersion", "ResourceVersion", "modified"),
)
_PROPAGATION_POLICIES = (None, "Orphan", "Background", "Foreground")
#: kube-apiserver 1.36's answers (410 Expired, on the request) to a list at a version compacted
#: away, and to one continued with a token from before a compaction, which comes with a token to
#: go on at the latest version (k8s.io/apiserver pkg/storage/etcd3/errors.go).
LIST_EXPIRED = "The resourceVersion for the provided list is too old."
CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can start a "
    "new list without the continue parameter, or use the continue token in this response to retrieve "
    "the remainder of the results. Continuing with the provided token results in an inconsistent list "
    "- objects that were created, modified, or deleted between the time the first chunk was returned "
    "and now may show up in the list."
)


def _sort_key(obj: Obj) -> tuple[str, str]:
    return (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])


class Resources:
    """The handlers of every verb on a resource (collection or object)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # -- read ----------------------------------------------------------------------------------

    @staticmethod
    def key_namespace(info: RequestInfo) -> str:
        return "" if info.resource in CLUSTER_SCOPED else (info.namespace or "default")

    def get_object(self, info: RequestInfo) -> Obj:
        assert info.name is not None
        obj = self.store.get(info.resource, self.key_namespace(info), info.name)
        if obj is None:
            raise not_found(info.resource, info.name)
        info.uid = obj["metadata"].get("uid")
        return admission.with_status(self.store, info.resource, obj)

    def list_objects(self, request: web.Request, info: RequestInfo) -> Obj:
        labels, fields, _ = selectors(request, info.resource)
        self._check_exact_version(request)
        namespace = None if info.resource in CLUSTER_SCOPED else info.namespace
        items = [
            admission.with_status(self.store, info.resource, obj)
            for obj in self.store.candidates(info.resource, namespace, request.query.get("fieldSelector"))
            if labels(obj["metadata"].get("labels") or {}) and fields(obj)
        ]
        items.sort(key=_sort_key)
        meta: Obj = {"resourceVersion": str(self.store.rv)}
        items = _page(request, items, meta, self.store)
        return {
            "kind": f"{KINDS[info.resource]}List",
            "apiVersion": API_VERSIONS.get(info.resource, "v1"),
            "metadata": meta,
            "items": items,
        }

    def _check_exact_version(self, request: web.Request) -> None:
        rv_param = request.query.get("resourceVersion")
        if rv_param and rv_param != "0" and request.query.get("resourceVersionMatch") == "Exact":
            try:
                self.store.check_rv(int(rv_param))
            except ValueError:
                raise ApiError(400, f"invalid resource version: {rv_param}") from None
            except TooOld:
                raise ApiError(410, LIST_EXPIRED, reason="Expired") from None

    # -- create ----------------------------------------------------------------------------------

    def ensure_namespace(self, info: RequestInfo) -> str:
        if info.resource in CLUSTER_SCOPED:
            return ""
        namespace = info.namespace or "default"
        if self.store.get("namespaces", "", namespace) is None:
            raise not_found("namespaces", namespace)
        return namespace

    async def create(self, request: web.Request, info: RequestInfo) -> Obj:
        obj = await read_body(request)
        if not isinstance(obj, dict):
            raise ApiError(400, "the body of the request must be a JSON object")
        kind = KINDS[info.resource]
        if obj.get("kind") not in (None, kind):
            raise ApiError(
                400,
                f"the API version in the data (v1) does not match the expected kind: "
                f"got {obj.get('kind')}, expected {kind}",
            )
        undecodable = pod_strategy.decode_errors(obj) if info.resource == "pods" else None
        if undecodable:
            raise ApiError(400, undecodable)
        namespace = self.ensure_namespace(info)
        meta = obj.setdefault("metadata", {})
        self._check_create_metadata(info, meta, namespace)
        causes = validate_metadata(meta, kind) + _kind_causes(info.resource, obj)
        if causes:
            raise invalid(kind, meta.get("name") or "", causes)
        if self.store.get(info.resource, namespace, meta["name"]) is not None:
            raise ApiError(
                409,
                f'{info.resource} "{meta["name"]}" already exists',
                reason="AlreadyExists",
                details={"name": meta["name"], "kind": info.resource},
            )
        self._fill_in(info, obj, namespace)
        if info.resource == "pods":
            admission.admit_pod(self.store, obj, namespace)
            pod_strategy.store_new(self.store, obj)
        else:
            self.store.put(info.resource, obj, "ADDED")
        info.uid = meta["uid"]
        if info.resource in ("secrets", "configmaps"):
            self.store.open_keys.discard((kind, namespace, meta["name"]))
        return obj

    @staticmethod
    def _check_create_metadata(info: RequestInfo, meta: Any, namespace: str) -> None:
        if not isinstance(meta, dict):
            raise ApiError(400, "metadata must be an object")
        if meta.get("namespace") not in (None, "", namespace) and info.resource not in CLUSTER_SCOPED:
            raise ApiError(
                400, "the namespace of the provided object does not match the namespace sent on the request"
            )
        if not meta.get("name") and meta.get("generateName"):
            suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
            meta["name"] = f"{meta['generateName']}{suffix}"

    @staticmethod
    def _fill_in(info: RequestInfo, obj: Obj, namespace: str) -> None:
        """What the API server writes into a new object: kind, identity, time, the kind's defaults."""
        meta = obj["metadata"]
        obj["kind"] = KINDS[info.resource]
        obj["apiVersion"] = API_VERSIONS.get(info.resource, "v1")
        if info.resource not in CLUSTER_SCOPED:
            meta["namespace"] = namespace
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_iso()
        meta.pop("resourceVersion", None)
        meta.pop("deletionTimestamp", None)
        if info.resource == "pods":
            pod_strategy.default_pod(obj)
            info.labels = dict(meta.get("labels") or {})
        if info.resource == "jobs":
            job_strategy.default_job(obj)
        if info.resource == "namespaces":
            obj["status"] = {"phase": "Active"}
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})

    # -- update / patch --------------------------------------------------------------------------

    # Each write reads its body before the object: nothing may run between reading the object and
    # writing it (a body that arrives late would otherwise bring back a pod removed meanwhile, as
    # kube-apiserver's read-modify-write never does; it answers 404).

    async def patch(self, request: web.Request, info: RequestInfo) -> Obj:
        document = await read_body(request)
        current = self.get_object(info)
        content_type = request.content_type
        apply = PATCHES.get(content_type)
        if apply is None:
            raise ApiError(
                415,
                f"the body of the request was in an unknown format - accepted media types "
                f"include: application/json-patch+json, application/merge-patch+json, "
                f"application/strategic-merge-patch+json (got {content_type})",
            )
        try:
            patched = apply(current, document)
        except PatchError as exc:
            raise ApiError(422 if content_type != "application/json-patch+json" else 500, str(exc)) from None
        if not isinstance(patched, dict):
            raise ApiError(422, "the patch turned the object into something that is not an object")
        wanted_rv = ((document.get("metadata") or {}) if isinstance(document, dict) else {}).get(
            "resourceVersion"
        )
        return self.store_update(info, current, patched, wanted_rv)

    async def update(self, request: web.Request, info: RequestInfo) -> Obj:
        new = await read_body(request)
        current = self.get_object(info)
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
        for fixed in _FIXED_METADATA:
            if fixed in current["metadata"]:
                meta[fixed] = current["metadata"][fixed]
            else:
                meta.pop(fixed, None)
        causes = validate_metadata(meta, kind)
        if info.resource == "pods":
            new["spec"] = new.get("spec") or {}
            causes += pod_strategy.pod_spec_immutable(current["spec"], new["spec"])
            causes += pod_strategy.added_gates(current["spec"], new["spec"])
            new["status"] = current.get("status", {})  # status is written through pods/status only
        if info.resource == "jobs":
            new["status"] = current.get("status", {})  # the Job controller's
        if causes:
            raise invalid(kind, name, causes)
        new["kind"] = kind
        new["apiVersion"] = API_VERSIONS.get(info.resource, "v1")
        self.store.put(info.resource, new, "MODIFIED")
        info.uid = meta.get("uid")
        return new

    # -- delete ----------------------------------------------------------------------------------

    async def delete(self, request: web.Request, info: RequestInfo) -> Obj:
        options = await read_body(request)
        current = self.get_object(info)
        if not isinstance(options, dict):
            raise ApiError(400, "DeleteOptions must be a JSON object")
        _check_preconditions(info, current, options.get("preconditions") or {})
        _check_propagation(options.get("propagationPolicy") or request.query.get("propagationPolicy"))
        grace = options.get("gracePeriodSeconds")
        if grace is None:
            grace = int_param(request, "gracePeriodSeconds")
        if info.resource == "pods":
            return pod_strategy.delete_pod(self.store, current, grace)
        name = current["metadata"]["name"]
        removed = self.store.remove(info.resource, self.key_namespace(info), name)
        assert removed is not None
        return success(name, info.resource, removed["metadata"]["uid"])

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


def _kind_causes(resource: str, obj: Obj) -> list[Cause]:
    if resource == "pods":
        return pod_strategy.validate_pod_spec(obj.get("spec"))
    if resource == "jobs":
        return job_strategy.validate_job(obj)
    return []


def _token(namespace: str, name: str, rv: int) -> str:
    """A ``continue`` token: where the next page starts, and the version the list began at (-1:
    the latest, as kube-apiserver's token after an expired one)."""
    return base64.urlsafe_b64encode(json.dumps({"ns": namespace, "name": name, "rv": rv}).encode()).decode()


def _page(request: web.Request, items: list[Obj], meta: Obj, store: Store) -> list[Obj]:
    """Apply ``continue`` and ``limit``, writing the next ``continue`` token into ``meta``; a token
    from a version compacted away is 410 Expired, with a token to go on at the latest version."""
    cont = request.query.get("continue")
    began = store.rv
    if cont:
        try:
            start = json.loads(base64.urlsafe_b64decode(cont.encode()).decode())
            after, began = (start["ns"], start["name"]), int(start["rv"])
        except (ValueError, KeyError, TypeError):
            raise ApiError(400, "continue key is not valid: illegal base64 data") from None
        if began == -1:
            began = store.rv  # go on at the latest version; the next token carries it
        try:
            store.check_rv(began)
        except TooOld:
            metadata = {"continue": _token(*after, -1)}
            raise ApiError(410, CONTINUE_EXPIRED, reason="Expired", metadata=metadata) from None
        items = [o for o in items if _sort_key(o) > after]
    limit = int_param(request, "limit")
    if limit and limit > 0 and len(items) > limit:
        last = items[limit - 1]["metadata"]
        meta["continue"] = _token(last.get("namespace", ""), last["name"], began)
        if not request.query.get("labelSelector") and not request.query.get("fieldSelector"):
            # Only without selectors: the count would include objects they do not select.
            meta["remainingItemCount"] = len(items) - limit
        items = items[:limit]
    return items


def _check_preconditions(info: RequestInfo, current: Obj, pre: Obj) -> None:
    name = current["metadata"]["name"]
    kind = KINDS.get(info.resource, info.resource)
    for key, label, ending in _PRECONDITIONS:
        if pre.get(key) and pre[key] != current["metadata"][key]:
            raise ApiError(
                409,
                f'Operation cannot be fulfilled on {kind} "{name}": the {label} in the precondition '
                f"({pre[key]}) does not match the {label} in record ({current['metadata'][key]}). "
                f"The object might have been {ending}",
                reason="Conflict",
                details={"name": name, "kind": kind},
            )


def _check_propagation(policy: Any) -> None:
    if policy not in _PROPAGATION_POLICIES:
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
