"""The simulator honours scheduling gates as kube-apiserver and kube-scheduler do: a gated pod is
not scheduled, its gates may be removed but not added, and it is scheduled once the last is lifted.
``tests/cluster/fidelity/test_scheduling_gates.py`` holds the same answers to the real control plane.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from airflow_k8s_retry_testing import FakeCluster
from tests.simulated.simulator.pods import BASE_SCENARIO, FAST, LONG, phase, pod_body, pod_is


@pytest.fixture
def sim() -> Iterator[FakeCluster]:
    with FakeCluster(BASE_SCENARIO, time_scale=FAST) as cluster:
        yield cluster


@pytest.fixture
def api(sim: FakeCluster) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(sim.kubeconfig)))


def gated_body(name: str, *gates: str) -> dict[str, Any]:
    body = pod_body(name, LONG)
    body["spec"]["schedulingGates"] = [{"name": g} for g in gates]
    return body


def lift(api: Any, name: str, gates: list[dict[str, str]] | None) -> None:
    """Set the pod's gates with a JSON merge patch, as Kueue's controller does when it admits a pod."""
    body = {"spec": {"schedulingGates": gates}}
    api.patch_namespaced_pod(name, "default", body, _content_type="application/merge-patch+json")


def scheduled(sim: FakeCluster, name: str) -> bool:
    return any(
        r["change"] == "scheduled"
        for r in sim.audit_records()
        if r["kind"] == "lifecycle" and r["name"] == name
    )


def test_a_gated_pod_waits_unscheduled_until_its_last_gate_is_lifted(sim: FakeCluster, api: Any) -> None:
    api.create_namespaced_pod("default", gated_body("queued", "example.com/a", "example.com/b"))
    api.create_namespaced_pod("default", pod_body("free", LONG))  # the scheduler's next pod
    assert sim.wait_for(lambda c: scheduled(c, "free"), 5)
    pod = sim.pod("queued")
    assert pod is not None and not scheduled(sim, "queued") and "nodeName" not in pod["spec"]
    (cond,) = pod["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == (
        "PodScheduled",
        "False",
        "SchedulingGated",
        "Scheduling is blocked due to non-empty scheduling gates",
    )
    # One gate of two lifted: still gated.
    lift(api, "queued", [{"name": "example.com/b"}])
    api.create_namespaced_pod("default", pod_body("free-2", LONG))
    assert sim.wait_for(lambda c: scheduled(c, "free-2"), 5)
    assert not scheduled(sim, "queued")
    # The last one lifted: scheduled and started.
    lift(api, "queued", None)
    assert sim.wait_for(pod_is("queued", lambda p: phase(p) == "Running"), 5)


def test_a_gate_cannot_be_added_after_the_pod_was_created(api: Any) -> None:
    api.create_namespaced_pod("default", gated_body("queued", "example.com/a"))
    with pytest.raises(ApiException) as raised:
        api.patch_namespaced_pod(
            "queued",
            "default",
            {"spec": {"schedulingGates": [{"name": "example.com/a"}, {"name": "example.com/b"}]}},
        )
    assert raised.value.status == 422
    assert (
        "spec.schedulingGates[1].name: Forbidden: only deletion is allowed, but found new scheduling gate "
        "'example.com/b'" in raised.value.body
    )


def test_a_gated_pod_cannot_name_its_node(api: Any) -> None:
    body = gated_body("queued", "example.com/a")
    body["spec"]["nodeName"] = "node-1"
    with pytest.raises(ApiException) as raised:
        api.create_namespaced_pod("default", body)
    assert raised.value.status == 422
    assert (
        "spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared"
        in raised.value.body
    )


def test_a_scenario_admits_a_gated_pod_as_an_admission_queue_does() -> None:
    scenario = {
        **BASE_SCENARIO,
        "disruptions": [{"pod_name_prefix": "queued-", "after_seconds": 30, "kind": "admit"}],
    }
    with FakeCluster(scenario, time_scale=FAST) as sim:
        api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(sim.kubeconfig)))
        api.create_namespaced_pod("default", gated_body("queued-1", "kueue.x-k8s.io/admission"))
        assert sim.wait_for(pod_is("queued-1", lambda p: phase(p) == "Running"), 5)
        changes = [
            r["change"] for r in sim.audit_records() if r["kind"] == "lifecycle" and r["name"] == "queued-1"
        ]
        assert changes[:3] == ["created", "admitted", "scheduled"], changes
        # Now, by hand.
        api.create_namespaced_pod("default", gated_body("held", "kueue.x-k8s.io/admission"))
        sim.disrupt("held", "admit")
        assert sim.wait_for(pod_is("held", lambda p: phase(p) == "Running"), 5)
