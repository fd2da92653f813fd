"""Pod shapes of Kubernetes 1.33-1.36 on the real 1.36 API server, and the classifier's verdict on
each pod exactly as the API server serves it.

KWOK's Stages play the kubelet by templates over ``spec.containers``: they write no
``initContainerStatuses``, do not restart containers, never set ``status.observedGeneration`` and
have no resize handling, so a native sidecar in a crash loop, a restart rule's in-place restart or a
kubelet lagging a spec change cannot come out of them. These tests keep the pods away from the
nodes (a scheduling gate: neither the scheduler nor KWOK touches them) and write the kubelet's
status through ``pods/status`` themselves, in the shape the kubelet writes. What the real control
plane judges here is what only it can: that it accepts and serves the fields (``restartPolicyRules``
behind the ``ContainerRestartRules`` gate, native sidecars), that it lets a container of a
``restartPolicy: Never`` pod come back from ``terminated`` only when its restart rule covers the exit
code, that it bumps ``metadata.generation`` on a spec change and keeps the last
``status.observedGeneration``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k
from kubernetes.client.exceptions import ApiException

from airflow_k8s_retry.classification import Outcome, Reason, classify
from tests.cluster.kube import core_api, delete_now

T = "2026-03-14T09:27:10Z"
RESTART_ON_42 = [{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]


@pytest.fixture
def api(kubeconfig: Path) -> Iterator[k.CoreV1Api]:
    with core_api(kubeconfig) as api:
        yield api


def gated_pod(api: k.CoreV1Api, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"test": "cluster-tier"}},
        "spec": {
            "restartPolicy": "Never",
            "schedulingGates": [{"name": "tests.example.com/kubelet-played"}],
            **spec,
        },
    }
    api.create_namespaced_pod("default", body)
    return read(api, name)


def read(api: k.CoreV1Api, name: str) -> dict[str, Any]:
    """The pod as JSON, as the API server serves it (not through the client's models)."""
    response = api.read_namespaced_pod(name, "default", _preload_content=False)
    pod: dict[str, Any] = json.loads(response.data)
    return pod


def write_status(api: k.CoreV1Api, name: str, status: dict[str, Any]) -> dict[str, Any]:
    """Write the pod's status as the kubelet does (``pods/status``), and read the pod back."""
    pod = read(api, name)
    pod["status"] = {"conditions": pod["status"].get("conditions", []), **status}
    api.replace_namespaced_pod_status(name, "default", pod)
    return read(api, name)


def container(
    name: str, state: dict[str, Any], restarts: int = 0, last: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "name": name,
        "image": "registry.example.com/app:1",
        "imageID": "",
        "ready": "running" in state,
        "started": "running" in state,
        "restartCount": restarts,
        "state": state,
        "lastState": last or {},
    }


def terminated(code: int, reason: str = "Error") -> dict[str, Any]:
    return {"terminated": {"exitCode": code, "reason": reason, "startedAt": T, "finishedAt": T}}


RUNNING = {"running": {"startedAt": T}}


@pytest.fixture
def name(api: k.CoreV1Api) -> Iterator[str]:
    pod = f"shape-{uuid.uuid4().hex[:6]}"
    yield pod
    delete_now(api, pod)


def test_a_restart_rule_restarts_in_place_and_an_uncovered_exit_stays_final(
    api: k.CoreV1Api, name: str
) -> None:
    spec = {
        "containers": [
            {
                "name": "base",
                "image": "registry.example.com/app:1",
                "restartPolicy": "Never",
                "restartPolicyRules": RESTART_ON_42,
            }
        ]
    }
    served = gated_pod(api, name, spec)
    assert served["spec"]["containers"][0]["restartPolicyRules"] == RESTART_ON_42, "the gate is on in 1.36"
    exited = write_status(
        api, name, {"phase": "Running", "containerStatuses": [container("base", terminated(42))]}
    )
    verdict = classify(exited, now=time.time())
    assert (verdict.outcome, verdict.reason) == (Outcome.WAIT, Reason.RUNNING), verdict.message
    # The API server lets the container leave `terminated` because its rule covers exit 42 ...
    again = write_status(
        api, name, {"phase": "Running", "containerStatuses": [container("base", RUNNING, 1, terminated(42))]}
    )
    assert again["status"]["containerStatuses"][0]["restartCount"] == 1
    assert classify(again, now=time.time()).reason is Reason.RUNNING
    failed = write_status(
        api,
        name,
        {"phase": "Failed", "containerStatuses": [container("base", terminated(1), 1, terminated(42))]},
    )
    verdict = classify(failed, now=time.time())
    assert (verdict.outcome, verdict.reason) == (Outcome.RETRY, Reason.CONTAINER_EXIT_CODE), verdict.message
    # ... and keeps exit 1, which no rule covers, final: the verdict above rests on a state that stays.
    with pytest.raises(ApiException) as refused:
        write_status(api, name, {"phase": "Running", "containerStatuses": [container("base", RUNNING, 2)]})
    assert refused.value.status == 422
    assert "may not be transitioned to non-terminated state" in str(refused.value.body)


def test_without_a_rule_the_api_server_refuses_a_restart_in_a_never_pod(api: k.CoreV1Api, name: str) -> None:
    gated_pod(api, name, {"containers": [{"name": "base", "image": "registry.example.com/app:1"}]})
    write_status(api, name, {"phase": "Running", "containerStatuses": [container("base", terminated(42))]})
    with pytest.raises(ApiException) as refused:
        write_status(api, name, {"phase": "Running", "containerStatuses": [container("base", RUNNING, 1)]})
    assert refused.value.status == 422


def test_a_native_sidecar_in_a_crash_loop_beside_a_running_base_container(
    api: k.CoreV1Api, name: str
) -> None:
    spec = {
        "initContainers": [
            {"name": "log-shipper", "image": "registry.example.com/fluent-bit:3", "restartPolicy": "Always"}
        ],
        "containers": [{"name": "base", "image": "registry.example.com/app:1"}],
    }
    served = gated_pod(api, name, spec)
    assert served["spec"]["initContainers"][0]["restartPolicy"] == "Always"
    loop = {
        "waiting": {
            "reason": "CrashLoopBackOff",
            "message": "back-off 2m40s restarting failed container=log-shipper",
        }
    }
    pod = write_status(
        api,
        name,
        {
            "phase": "Running",
            "initContainerStatuses": [container("log-shipper", loop, 4, terminated(1))],
            "containerStatuses": [container("base", RUNNING)],
        },
    )
    first = classify(pod, now=1000.0)
    later = classify(pod, history=first.history, now=1000.0 + 3600)
    assert (later.outcome, later.reason) == (Outcome.WAIT, Reason.RUNNING), later.message
    # Before the base container ever started, the same crash loop holds the pod back and is judged.
    blocked = write_status(
        api,
        name,
        {
            "phase": "Pending",
            "initContainerStatuses": [container("log-shipper", loop, 4, terminated(1))],
            "containerStatuses": [container("base", {"waiting": {"reason": "PodInitializing"}})],
        },
    )
    first = classify(blocked, now=1000.0)
    later = classify(blocked, history=first.history, now=1000.0 + 180)
    assert (later.outcome, later.reason) == (Outcome.RETRY, Reason.CONTAINER_EXIT_CODE), later.message


def test_a_spec_change_the_kubelet_has_not_observed_makes_the_verdict_wait(
    api: k.CoreV1Api, name: str
) -> None:
    served = gated_pod(api, name, {"containers": [{"name": "base", "image": "registry.example.com/app:1"}]})
    assert served["metadata"]["generation"] == 1
    caught_up = write_status(
        api,
        name,
        {"phase": "Running", "observedGeneration": 1, "containerStatuses": [container("base", RUNNING)]},
    )
    assert classify(caught_up, now=time.time()).reason is Reason.RUNNING
    api.patch_namespaced_pod(name, "default", {"spec": {"activeDeadlineSeconds": 3600}})
    behind = read(api, name)
    # The API server bumps the generation and keeps the kubelet's last observedGeneration.
    assert (behind["metadata"]["generation"], behind["status"]["observedGeneration"]) == (2, 1)
    verdict = classify(behind, now=time.time())
    assert (verdict.outcome, verdict.reason) == (Outcome.WAIT, Reason.STATUS_BEHIND_SPEC), verdict.message
    current = write_status(
        api,
        name,
        {"phase": "Running", "observedGeneration": 2, "containerStatuses": [container("base", RUNNING)]},
    )
    assert classify(current, now=time.time()).reason is Reason.RUNNING
