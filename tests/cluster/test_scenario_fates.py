"""The scenario language on the real control plane: each image fate is what a kubelet reports, and
the package's classifier reads it as it reads the simulator's.

The images and Secrets are those of ``tests/cluster/scenario.yaml``.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_k8s_retry.classification import classify
from tests.cluster.kube import (
    core_api,
    delete_now,
    pod_body,
    reasons,
    terminated,
    wait_for_events,
    wait_for_pod,
    waiting_reason,
)


def run_pod(
    kubeconfig: Path, image: str, until: Any, *, events: Any = None, **spec: Any
) -> tuple[dict[str, Any], list[Any]]:
    """Run a pod until ``until(pod)``; with ``events``, also wait until ``events(its Events)`` holds
    (a node writes an Event after the status it goes with)."""
    name = f"fate-{uuid.uuid4().hex[:8]}"
    with core_api(kubeconfig) as api:
        api.create_namespaced_pod("default", pod_body(name, image, **spec))
        try:
            pod = wait_for_pod(api, name, until, timeout=90)
            return pod, wait_for_events(api, name, events, timeout=60) if events is not None else []
        finally:
            delete_now(api, name)


def test_success_after_its_duration(kubeconfig: Path):
    pod, _ = run_pod(kubeconfig, "registry.example.com/app:ok", lambda p: p["status"]["phase"] == "Succeeded")
    state = terminated(pod)
    assert state and state["exitCode"] == 0 and state["reason"] == "Completed"
    assert classify(pod, now=time.time()).outcome.value == "succeed"


def test_exit_code_n(kubeconfig: Path):
    image = "registry.example.com/app:exit-3"
    pod, _ = run_pod(kubeconfig, image, lambda p: p["status"]["phase"] == "Failed")
    state = terminated(pod)
    assert state and state["exitCode"] == 3 and state["reason"] == "Error"
    assert classify(pod, now=time.time()).reason.value == "container.exit_code"


def test_oom_killed(kubeconfig: Path):
    pod, _ = run_pod(kubeconfig, "registry.example.com/app:oom", lambda p: p["status"]["phase"] == "Failed")
    state = terminated(pod)
    assert state and state["exitCode"] == 137 and state["reason"] == "OOMKilled"
    assert classify(pod, now=time.time()).reason.value == "container.oom"


@pytest.mark.parametrize(
    ("tag", "reason", "text"),
    [
        ("missing", "image.not_found", "not found"),
        ("denied", "image.unauthorized", "401 Unauthorized"),
        ("throttled", "image.rate_limited", "429 Too Many Requests"),
    ],
)
def test_pull_failures_go_err_image_pull_then_back_off(kubeconfig: Path, tag: str, reason: str, text: str):
    image = f"registry.example.com/app:{tag}"
    pod, events = run_pod(
        kubeconfig,
        image,
        lambda p: waiting_reason(p) == "ImagePullBackOff",
        events=reasons("Failed", "BackOff"),
    )
    waiting = pod["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["message"].startswith(f'Back-off pulling image "{image}": ErrImagePull: rpc error: ')
    assert text in waiting["message"]
    failed = [e for e in events if e["reason"] == "Failed"]
    assert failed and failed[0]["message"].startswith(f'Failed to pull image "{image}": rpc error: ')
    assert failed[0]["type"] == "Warning"
    assert [e["message"] for e in events if e["reason"] == "BackOff"] == [f'Back-off pulling image "{image}"']
    verdict = classify(pod, events, now=time.time())
    assert (verdict.outcome.value, verdict.reason.value) == ("wait", reason)


def test_invalid_image_name(kubeconfig: Path):
    image = "registry.example.com/app:bad-name"
    pod, _ = run_pod(kubeconfig, image, lambda p: waiting_reason(p) == "InvalidImageName")
    assert "invalid reference format" in pod["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
    verdict = classify(pod, now=time.time())
    assert verdict.outcome.value == "fail"


def test_a_missing_secret_is_create_container_config_error(kubeconfig: Path):
    env = [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "token"}}}]
    containers = [{"name": "base", "image": "registry.example.com/app:ok", "env": env}]
    pod, _ = run_pod(
        kubeconfig,
        "",
        lambda p: waiting_reason(p) == "CreateContainerConfigError",
        containers=containers,
    )
    assert pod["status"]["containerStatuses"][0]["state"]["waiting"]["message"] == 'secret "absent" not found'
    assert classify(pod, now=time.time()).reason.value == "config.missing_secret"


def test_a_present_secret_lets_the_pod_run(kubeconfig: Path):
    env = [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "present", "key": "token"}}}]
    containers = [{"name": "base", "image": "registry.example.com/app:ok", "env": env}]
    pod, _ = run_pod(kubeconfig, "", lambda p: p["status"]["phase"] == "Succeeded", containers=containers)
    assert terminated(pod) is not None
