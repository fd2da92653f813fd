"""What a pod's status and Events say for each fate the scenario scripts (FakeCluster's kubelet
and KWOK's Stages play the same scenario file): phase, status reason, conditions and their
reasons, container state reasons, messages and exit codes, and the Events' reason, type, message
and involvedObject."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.cluster.fidelity.probes import Backends, Side, assert_same, delete_now, follow, masked, pod_body
from tests.cluster.kube import reasons, wait_for_events


def _phase(*phases: str) -> Callable[[str, dict[str, Any]], bool]:
    return lambda _kind, pod: pod.get("status", {}).get("phase") in phases


def _waiting(reason: str) -> Callable[[str, dict[str, Any]], bool]:
    def until(_kind: str, pod: dict[str, Any]) -> bool:
        statuses = pod.get("status", {}).get("containerStatuses") or []
        return bool(statuses) and (statuses[0].get("state", {}).get("waiting") or {}).get("reason") == reason

    return until


#: fate -> (image, extra container fields, the state to wait for)
FATES: dict[str, tuple[str, dict[str, Any], Callable[[str, dict[str, Any]], bool]]] = {
    "success": ("registry.example.com/app:ok", {}, _phase("Succeeded", "Failed")),
    "exit code 3": ("registry.example.com/app:exit-3", {}, _phase("Succeeded", "Failed")),
    "OOMKilled": ("registry.example.com/app:oom", {}, _phase("Succeeded", "Failed")),
    "image not found": ("registry.example.com/app:missing", {}, _waiting("ImagePullBackOff")),
    "registry unauthorized": ("registry.example.com/app:denied", {}, _waiting("ImagePullBackOff")),
    "registry rate limit": ("registry.example.com/app:throttled", {}, _waiting("ImagePullBackOff")),
    "invalid image name": ("registry.example.com/app:bad-name", {}, _waiting("InvalidImageName")),
    "missing secret": (
        "registry.example.com/app:ok",
        {"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "token"}}}]},
        _waiting("CreateContainerConfigError"),
    ),
    "running": ("registry.example.com/app:long", {}, _phase("Running")),
}

#: fate -> the reasons of the Events the node has written once that state is reached (it writes
#: each after the status it goes with, so the probe waits for them)
EVENTS: dict[str, tuple[str, ...]] = {
    "success": ("Started",),
    "exit code 3": ("Started",),
    "OOMKilled": ("Started",),
    "image not found": ("Failed", "BackOff"),
    "registry unauthorized": ("Failed", "BackOff"),
    "registry rate limit": ("Failed", "BackOff"),
    "invalid image name": ("InspectFailed",),
    "missing secret": ("Failed",),
    "running": ("Started",),
}


def _read(pod: dict[str, Any], events: list[dict[str, Any]], name: str) -> dict[str, Any]:
    status = pod.get("status", {})
    container = (status.get("containerStatuses") or [{}])[0]
    state = container.get("state") or {}
    kind = next(iter(state), None)
    detail = state.get(kind) or {}
    return masked(
        {
            "phase": status.get("phase"),
            "reason": status.get("reason"),
            "conditions": {c["type"]: [c["status"], c.get("reason")] for c in status.get("conditions") or []},
            "state": kind,
            "state_reason": detail.get("reason"),
            "state_message": detail.get("message"),
            "exit_code": detail.get("exitCode"),
            "ready": container.get("ready"),
            "events": sorted(
                {
                    (
                        e["reason"],
                        e["type"],
                        e.get("message"),
                        e["involvedObject"]["kind"],
                        e["involvedObject"]["name"],
                        e["involvedObject"].get("fieldPath"),
                    )
                    for e in events
                    if e["reason"] != "Scheduled"  # the scheduler's: node names differ
                }
            ),
        },
        NAME=name,
    )


def _fate(side: Side, fate: str) -> dict[str, Any]:
    image, container, until = FATES[fate]
    name = side.unique("fidelity-fate-")
    body = pod_body(name, image)
    body["spec"]["containers"][0].update(container)
    api = side.api
    rv = api.list_namespaced_pod("default", field_selector=f"metadata.name={name}").metadata.resource_version
    api.create_namespaced_pod("default", body)
    try:
        seen = follow(api, name, until, resource_version=rv, timeout=45)
        assert seen and until(*seen[-1]), f"{side.name}: {fate} not reached; last seen {seen[-1:]}"
        events = wait_for_events(api, name, reasons(*EVENTS[fate]), timeout=45)
        return _read(seen[-1][1], events, name)
    finally:
        delete_now(api, name)


@pytest.fixture(scope="module")
def fates(backends: Backends) -> dict[str, dict[str, Any]]:
    """Every fate on both backends at once (the slowest, the pull back-offs, take about 2 s)."""

    def probe(side: Side) -> dict[str, Any]:
        with ThreadPoolExecutor(len(FATES)) as pool:
            futures = {fate: pool.submit(_fate, side, fate) for fate in FATES}
            return {fate: f.result() for fate, f in futures.items()}

    both = backends.run(probe)
    return {fate: {"fake": both["fake"][fate], "real": both["real"][fate]} for fate in FATES}


#: What KWOK's Stages write instead of the kubelet's text (docs/simulator.md, "Differences ...").
KWOK_WRITES = {'Error: secret "absent" not found': "Error: CreateContainerConfigError"}


def _status(read: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in read.items() if k != "events"}


@pytest.mark.parametrize("fate", list(FATES))
def test_the_pod_status_reads_the_same(fates: dict[str, dict[str, Any]], fate: str):
    assert_same({side: _status(read) for side, read in fates[fate].items()})


@pytest.mark.parametrize("fate", list(FATES))
def test_the_node_s_events_read_the_same(fates: dict[str, dict[str, Any]], fate: str):
    """Every Event the real node writes (KWOK's Stages write one per step), FakeCluster writes too,
    with the same reason, type, message and involved object; FakeCluster's kubelet writes more
    (Pulling, Pulled, Created), and two documented differences of KWOK's are masked: its Events
    have no ``fieldPath`` and its ``Started`` message does not name the container (a kubelet's,
    and FakeCluster's, does: ``Started container base``)."""

    def comparable(event: list[Any]) -> tuple[Any, ...]:
        reason, kind, message, obj_kind, obj_name, _field_path = event
        if reason == "Started":
            message = "Started container"
        message = KWOK_WRITES.get(message, message)
        return (reason, kind, message, obj_kind, obj_name)

    real = {comparable(e) for e in fates[fate]["real"]["events"]}
    fake = {comparable(e) for e in fates[fate]["fake"]["events"]}
    assert_same({"fake": sorted(real & fake), "real": sorted(real)})
    assert all(e[5] == "spec.containers{base}" for e in fates[fate]["fake"]["events"])
