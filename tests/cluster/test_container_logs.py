"""Container logs on the real control plane: the API server reads them from the pod's node, whose
kubelet endpoint (the harness's front of its KWOK process) serves logs and nothing else."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.cluster.kube import core_api, delete_now, pod_body, wait_for_pod
from tools.controlplane import ControlPlane
from tools.controlplane.cluster import KUBELET_PREFIX


@pytest.mark.parametrize(
    ("image", "text"),
    [("registry.example.com/app:logs", b"one\ntwo\nthree\n"), ("registry.example.com/app:ok", b"")],
)
def test_a_followed_log_ends_when_the_container_has_ended(kubeconfig: Path, image: str, text: bytes):
    """What the cncf operator does with every pod it ran: follow its log, which must end (an
    empty one too)."""
    with core_api(kubeconfig) as api:
        name = f"logs-follow-{int(time.time() * 1000) % 100000}"
        api.create_namespaced_pod("default", pod_body(name, image))
        try:
            wait_for_pod(api, name, lambda p: p.get("status", {}).get("phase") == "Running", timeout=30)
            response = api.read_namespaced_pod_log(
                name, "default", follow=True, _preload_content=False, _request_timeout=30
            )
            assert response.data == text
            assert api.read_namespaced_pod(name, "default").status.phase == "Succeeded"
        finally:
            delete_now(api, name)


def test_the_node_s_kubelet_endpoint_refuses_exec(control_plane: ControlPlane, kubeconfig: Path):
    """KWOK's exec would run the client's command on this machine: the endpoint the API server
    reaches answers 403 to exec, attach and port-forward without passing them on."""
    ports = json.loads(control_plane.state_file.read_text())["ports"]
    port = next(v for k, v in ports.items() if k.startswith(KUBELET_PREFIX))
    context = ssl.create_default_context(cafile=str(control_plane.directory / "pki" / "ca.crt"))
    answers = {}
    for path in ("/exec/default/p/c?command=true", "/attach/default/p/c", "/portForward/default/p"):
        request = urllib.request.Request(f"https://127.0.0.1:{port}{path}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, context=context, timeout=10)
        answers[path] = caught.value.code
    assert set(answers.values()) == {403}, answers


def test_an_xcom_read_the_exec_channel_refuses_is_an_error_not_an_empty_result(kubeconfig: Path):
    """The API server upgrades the exec and then reports, on the status channel, that the node's
    kubelet refused it: the read must fail (a retryable error), not read as "no result" and let the
    task succeed without it (review finding R3-5)."""
    from kubernetes.config import new_client_from_config

    from airflow_k8s_retry.kube.pods import PodClient, XComReadError

    containers = [
        {"name": "base", "image": "registry.example.com/app:long"},
        {"name": "airflow-xcom-sidecar", "image": "registry.example.com/app:long"},
    ]
    with core_api(kubeconfig) as api:
        name = f"xcom-exec-{int(time.time() * 1000) % 100000}"
        api.create_namespaced_pod("default", pod_body(name, "unused", containers=containers))
        try:
            wait_for_pod(api, name, lambda p: p.get("status", {}).get("phase") == "Running", timeout=30)
            client = PodClient(new_client_from_config(config_file=str(kubeconfig), persist_config=False))
            with pytest.raises(XComReadError) as refused:
                client.read_xcom("default", name)
            assert "exec in pod default/" in str(refused.value)
            assert "failed" in str(refused.value)
        finally:
            delete_now(api, name)
