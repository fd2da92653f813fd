"""Scheduling gates on both backends: what kube-apiserver writes on a gated pod, that the scheduler
leaves it alone (a pod created after it is scheduled, it is not), that its gates may be removed but
not added (the API's own refusal), that a gated pod may not name its node, and that it is scheduled
and started once a JSON merge patch (as Kueue's controller sends) lifts the last gate."""

from __future__ import annotations

from typing import Any

from tests.cluster.fidelity.probes import (
    Backends,
    Side,
    as_json,
    assert_same,
    condition,
    delete_now,
    error_of,
    follow,
    pod_body,
)

LONG = "registry.example.com/app:long"
MERGE = "application/merge-patch+json"


def _phase(wanted: str) -> Any:
    return lambda _kind, pod: pod.get("status", {}).get("phase") == wanted


def _gates(side: Side, name: str, gates: list[dict[str, str]] | None) -> None:
    side.api.patch_namespaced_pod(name, "default", {"spec": {"schedulingGates": gates}}, _content_type=MERGE)


def _probe(side: Side) -> dict[str, Any]:
    gated, free = side.unique("fidelity-gated-"), side.unique("fidelity-free-")
    body = pod_body(gated, LONG, schedulingGates=[{"name": "example.com/a"}, {"name": "example.com/b"}])
    rv = side.api.list_namespaced_pod("default").metadata.resource_version
    side.api.create_namespaced_pod("default", body)
    side.api.create_namespaced_pod("default", pod_body(free, LONG))
    try:
        # The scheduler has placed the pod created after the gated one: it has seen and skipped it.
        follow(side.api, free, _phase("Running"), resource_version=rv, timeout=60)
        seen = as_json(side.api, side.api.read_namespaced_pod(gated, "default"))
        cond = condition(seen, "PodScheduled") or {}
        result: dict[str, Any] = {
            "gated": {
                "phase": seen["status"].get("phase"),
                "nodeName": seen["spec"].get("nodeName"),
                "PodScheduled": {k: cond.get(k) for k in ("status", "reason", "message")},
                "gates": seen["spec"].get("schedulingGates"),
            },
            "add a gate": error_of(
                lambda: _gates(side, gated, [{"name": "example.com/a"}, {"name": "example.com/c"}]),
                NAME=gated,
            ),
        }
        named = pod_body(side.unique("fidelity-named-"), LONG, schedulingGates=[{"name": "x.io/a"}])
        named["spec"]["nodeName"] = "nowhere"
        result["name a node"] = error_of(
            lambda: side.api.create_namespaced_pod("default", named), NAME=named["metadata"]["name"]
        )
        _gates(side, gated, [{"name": "example.com/b"}])
        _gates(side, gated, None)
        last = follow(side.api, gated, _phase("Running"), resource_version=rv, timeout=60)[-1][1]
        result["lifted"] = {
            "phase": last["status"].get("phase"),
            "PodScheduled": (condition(last, "PodScheduled") or {}).get("status"),
            "gates": last["spec"].get("schedulingGates"),
        }
        return result
    finally:
        for name in (gated, free):
            delete_now(side.api, name)


def test_a_gated_pod_waits_its_gates_only_shrink_and_lifting_the_last_schedules_it(backends: Backends):
    seen = backends.run(_probe)
    assert_same(seen)
    real = seen["real"]
    assert real["gated"]["PodScheduled"] == {
        "status": "False",
        "reason": "SchedulingGated",
        "message": "Scheduling is blocked due to non-empty scheduling gates",
    }
    assert real["gated"]["nodeName"] is None
    assert real["add a gate"]["http"] == 422
    assert real["name a node"]["http"] == 422
    assert real["lifted"] == {"phase": "Running", "PodScheduled": "True", "gates": None}


def _admitted(side: Side) -> dict[str, Any]:
    """The scenario's ``admit`` (``admitted-`` pods, 2 s after creation) lifts the gate, as Kueue
    would: FakeCluster's scripted admission and the harness's merge patch on the real API server."""
    name = side.unique("admitted-")
    rv = side.api.list_namespaced_pod("default").metadata.resource_version
    side.api.create_namespaced_pod(
        "default", pod_body(name, LONG, schedulingGates=[{"name": "kueue.x-k8s.io/admission"}])
    )
    try:
        seen = follow(side.api, name, _phase("Running"), resource_version=rv, timeout=60)
        first, last = seen[0][1], seen[-1][1]
        return {
            "created gated": (condition(first, "PodScheduled") or {}).get("reason"),
            "running": last["status"].get("phase"),
            "gates": last["spec"].get("schedulingGates"),
        }
    finally:
        delete_now(side.api, name)


def test_a_scenarios_admission_lifts_the_gate_on_both(backends: Backends):
    seen = backends.run(_admitted)
    assert_same(seen)
    assert seen["real"] == {"created gated": "SchedulingGated", "running": "Running", "gates": None}
