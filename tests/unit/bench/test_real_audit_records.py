"""The API server's audit log read as the benchmark's records (``tools.controlplane.realcluster``),
no cluster needed.

The events are shaped as kube-apiserver 1.36 writes them with the benchmark's audit policy (field
names and values as in a real log): what counts as a trigger's request, and what a pod became.
"""

from __future__ import annotations

from typing import Any

from tools.controlplane.realcluster import ADMIN, records_from_audit

T0 = "2026-12-01T12:00:00.000000Z"


def event(
    verb: str,
    resource: str,
    *,
    audit_id: str,
    stage: str = "ResponseComplete",
    user: str = ADMIN,
    name: str | None = "p",
    subresource: str | None = None,
    response: dict[str, Any] | None = None,
    at: str = T0,
    agent: str = "OpenAPI-Generator/31.0.0/python",
) -> dict[str, Any]:
    ref: dict[str, Any] = {"resource": resource, "namespace": "ours", "apiVersion": "v1"}
    if name is not None:
        ref["name"] = name
    if subresource is not None:
        ref["subresource"] = subresource
    out: dict[str, Any] = {
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "RequestResponse" if response else "Metadata",
        "auditID": audit_id,
        "stage": stage,
        "verb": verb,
        "user": {"username": user, "groups": ["system:authenticated"]},
        "userAgent": agent,
        "objectRef": ref,
        "responseStatus": {"metadata": {}, "code": 201 if verb == "create" else 200},
        "requestReceivedTimestamp": at,
        "stageTimestamp": at,
    }
    if response is not None:
        out["responseObject"] = response
    return out


def pod(status: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"namespace": "ours", "name": "p", "uid": "u-1"}, "status": status}


def test_a_watch_is_one_request_and_components_are_not_counted() -> None:
    records = records_from_audit(
        iter(
            [
                event("watch", "pods", audit_id="w", stage="ResponseStarted", name=None),
                event("watch", "pods", audit_id="w", name=None, at="2026-12-01T12:05:00.000000Z"),
                event("get", "leases", audit_id="l", user="kwok-controller"),
                event("get", "pods", audit_id="g"),
            ]
        )
    )
    requests = [(r["verb"], r["resource"], r["t"]) for r in records if r["kind"] == "request"]
    assert [(v, res) for v, res, _ in requests] == [("watch", "pods"), ("get", "pods")]
    assert requests[0][2] == requests[1][2]  # the watch counts when it was received


def test_what_a_pod_became_is_read_from_the_pod_the_server_returned() -> None:
    waiting = {"phase": "Pending", "containerStatuses": [{"state": {"waiting": {"reason": "ErrImagePull"}}}]}
    records = records_from_audit(
        iter(
            [
                event("create", "pods", audit_id="c", name=None, response=pod({"phase": "Pending"})),
                event(
                    "patch",
                    "pods",
                    audit_id="s",
                    subresource="status",
                    user="kwok-controller",
                    response=pod(waiting),
                    at="2026-12-01T12:00:01.250000Z",
                ),
                event(
                    "create", "pods", audit_id="e", subresource="eviction", at="2026-12-01T12:00:02.000000Z"
                ),
            ]
        )
    )
    changes = [(r["change"], r["uid"]) for r in records if r["kind"] == "lifecycle"]
    assert ("created", "u-1") in changes
    assert ("waiting:ErrImagePull", "u-1") in changes
    assert ("disruption:EvictionByEvictionAPI", "u-1") in changes
    pulled = next(r for r in records if r.get("change") == "waiting:ErrImagePull")
    created = next(r for r in records if r.get("change") == "created")
    assert round(pulled["t"] - created["t"], 3) == 1.25
    # The pod creation is a request (the phases leave the setup client's out by User-Agent); the
    # disruptor's eviction and KWOK's status write are not.
    assert [(r["verb"], r["resource"]) for r in records if r["kind"] == "request"] == [("create", "pods")]
