"""Scenario disruptions on the real control plane go through the real paths, and the package's
classifier reads what they leave on the pod as infrastructure taking it away (RELAUNCH)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import watch

from airflow_k8s_retry.classification import classify
from tests.cluster.kube import (
    PodRecorder,
    as_json,
    core_api,
    delete_now,
    eventually,
    pod_body,
    wait_for_node_ready,
    wait_for_pod,
)
from tools.controlplane import ControlPlane
from tools.controlplane.disruptions import PREEMPTOR_PREFIX


def watch_until_deleted(kubeconfig: Path, body: dict[str, Any], timeout: float = 90) -> list[dict[str, Any]]:
    """Create the pod and return every state it went through until it was deleted."""
    name = body["metadata"]["name"]
    seen: list[dict[str, Any]] = []
    with core_api(kubeconfig) as api:
        listing = api.list_namespaced_pod("default", field_selector=f"metadata.name={name}")
        rv = listing.metadata.resource_version
        api.create_namespaced_pod("default", body)
        try:
            w = watch.Watch()
            for event in w.stream(
                api.list_namespaced_pod,
                "default",
                field_selector=f"metadata.name={name}",
                resource_version=rv,
                timeout_seconds=int(timeout),
            ):
                seen.append(as_json(api, event["object"]))
                if event["type"] == "DELETED":
                    w.stop()
                    return seen
        finally:
            delete_now(api, name)
    raise AssertionError(f"pod {name} was not deleted in {timeout} s; last seen {seen[-1:]}")


def preemptors(recorder: PodRecorder) -> set[str]:
    """The UIDs of the preemptor pods the recorder has seen (the disruptor's ``preempt``)."""
    return {uid for uid, p in recorder.pods.items() if p["metadata"]["name"].startswith(PREEMPTOR_PREFIX)}


def disruption_target(states: list[dict[str, Any]]) -> dict[str, Any] | None:
    for pod in states:
        for condition in pod.get("status", {}).get("conditions") or []:
            if condition["type"] == "DisruptionTarget" and condition["status"] == "True":
                return pod
    return None


@pytest.mark.parametrize(("kind", "reason"), [("evict", "EvictionByEvictionAPI")])
def test_evict_goes_through_the_eviction_api(kubeconfig: Path, kind: str, reason: str):
    name = f"disrupt-{kind}-{uuid.uuid4().hex[:6]}"
    states = watch_until_deleted(kubeconfig, pod_body(name, "registry.example.com/app:long"))
    pod = disruption_target(states)
    assert pod is not None, f"no DisruptionTarget condition in {states[-1]}"
    condition = next(c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert condition["reason"] == reason
    deleting = [p for p in states if p["metadata"].get("deletionTimestamp")]
    assert deleting and deleting[0]["metadata"]["deletionGracePeriodSeconds"] == 30, "deleted gracefully"
    verdict = classify(pod, now=time.time())
    assert verdict.outcome.value == "relaunch", verdict


def test_delete_is_a_graceful_delete_through_the_api(kubeconfig: Path):
    name = f"disrupt-delete-{uuid.uuid4().hex[:6]}"
    states = watch_until_deleted(kubeconfig, pod_body(name, "registry.example.com/app:long"))
    terminating = [p for p in states if p["metadata"].get("deletionTimestamp")]
    assert terminating and terminating[0]["metadata"]["deletionGracePeriodSeconds"] == 30
    assert disruption_target(states) is None


def test_preempt_is_the_real_scheduler_preempting_for_a_higher_priority_pod(kubeconfig: Path):
    """...and the pod that preempted it (which asks for all of the node's CPU) is deleted once the
    victim has gone, so that it does not hold the node."""
    name = f"disrupt-preempt-{uuid.uuid4().hex[:6]}"
    body = pod_body(name, "")
    body["spec"]["containers"] = [
        {"name": "base", "image": "registry.example.com/app:long", "resources": {"requests": {"cpu": "1"}}}
    ]
    with PodRecorder(kubeconfig) as recorder:
        earlier = preemptors(recorder)
        states = watch_until_deleted(kubeconfig, body)
        pod = disruption_target(states)
        assert pod is not None, f"no DisruptionTarget condition in {states[-1]}"
        condition = next(c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget")
        assert condition["reason"] == "PreemptionByScheduler"
        assert classify(pod, now=time.time()).outcome.value == "relaunch"
        # The recorder's own watch may be a moment behind the one that saw the victim go.
        eventually(lambda: bool(preemptors(recorder) - earlier), timeout=10, interval=0.2)
        mine = preemptors(recorder) - earlier
        assert len(mine) == 1, f"one preemptor for the one victim: {mine}"
        gone = eventually(lambda: mine <= recorder.deleted, timeout=30, interval=0.5)
        left = [recorder.pods[uid] for uid in mine - recorder.deleted]
        assert gone, f"the preemptor is still there 30 s after its victim went: {left}"


def test_node_lost_is_the_node_lifecycle_controller_evicting_from_a_silent_node(
    kubeconfig: Path, control_plane: ControlPlane
):
    """The node's KWOK process stops (its Lease is no longer renewed); the real controllers mark
    the node not ready, taint it and evict the pod when its toleration runs out."""
    node = "kwok-node-3"
    name = f"disrupt-lost-{uuid.uuid4().hex[:6]}"
    body = pod_body(name, "registry.example.com/app:long")
    body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    body["spec"]["tolerations"] = [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}
        for key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
    ]
    with core_api(kubeconfig) as api:
        api.create_namespaced_pod("default", body)
        # Cordoned (a real admin action, not part of the path under test), so that no other pod
        # lands on the node while it goes silent.
        api.patch_node(node, {"spec": {"unschedulable": True}})
        try:
            pod = wait_for_pod(api, name, lambda p: disruption_target([p]) is not None, timeout=180)
            condition = next(c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget")
            assert condition["reason"] == "DeletionByTaintManager"
            conditions = {c.type: c for c in api.read_node(node).status.conditions}
            assert conditions["Ready"].status == "Unknown"
            assert conditions["Ready"].reason == "NodeStatusUnknown"
            assert classify(pod, now=time.time()).outcome.value == "relaunch"
        finally:
            delete_now(api, name)
            control_plane.restart(f"kwok@{node}")
            api.patch_node(node, {"spec": {"unschedulable": False}})
            ready = wait_for_node_ready(api, node)
    assert ready, f"node {node} is Ready again once its KWOK process is back"
