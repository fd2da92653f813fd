"""The control plane itself: real components, real TLS, real RBAC, real validation, KWOK nodes."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from kubernetes import client as k
from kubernetes.client.exceptions import ApiException

from tests.cluster.kube import (
    core_api,
    delete_now,
    eventually,
    pod_body,
    reasons,
    wait_for_events,
    wait_for_pod,
)
from tools.controlplane import ControlPlane


def test_the_api_server_is_the_pinned_release_with_three_ready_kwok_nodes(kubeconfig: Path):
    with core_api(kubeconfig) as api:
        version = k.VersionApi(api.api_client).get_code()
        assert version.git_version == "v1.36.3"
        nodes = api.list_node(label_selector="type=kwok").items
        assert len(nodes) == 3
        for node in nodes:
            ready = {c.type: c.status for c in node.status.conditions}
            assert ready["Ready"] == "True", node.metadata.name


def test_the_real_scheduler_binds_a_pod_to_a_kwok_node(kubeconfig: Path):
    name = f"sched-{uuid.uuid4().hex[:6]}"
    with core_api(kubeconfig) as api:
        api.create_namespaced_pod("default", pod_body(name, "registry.example.com/app:long"))
        try:
            pod = wait_for_pod(api, name, lambda p: p["status"].get("phase") == "Running")
            assert pod["spec"]["nodeName"].startswith("kwok-node-")
            events = wait_for_events(api, name, reasons("Scheduled"))  # written after the binding
            scheduled = [e for e in events if e["reason"] == "Scheduled"]
            assert scheduled and scheduled[0]["reportingComponent"] == "default-scheduler"
        finally:
            delete_now(api, name)


def test_duplicate_volume_names_are_refused_with_422(kubeconfig: Path):
    volumes = [{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}]
    with core_api(kubeconfig) as api, pytest.raises(ApiException) as caught:
        api.create_namespaced_pod("default", pod_body("dup-volumes", "busybox", volumes=volumes))
    assert caught.value.status == 422
    assert 'spec.volumes[1].name: Duplicate value: "v"' in json.loads(caught.value.body)["message"]


def test_a_service_account_token_is_held_to_rbac(kubeconfig: Path, control_plane: ControlPlane):
    """The token the API server signs authenticates the ServiceAccount; RBAC alone grants it pods."""
    sa = f"reader-{uuid.uuid4().hex[:6]}"
    with core_api(kubeconfig) as api:
        rbac = k.RbacAuthorizationV1Api(api.api_client)
        api.create_namespaced_service_account("default", {"metadata": {"name": sa}})
        token = api.create_namespaced_service_account_token(
            sa, "default", {"spec": {"expirationSeconds": 600}}
        ).status.token
        ca = Path(kubeconfig).parent / "pki" / "ca.crt"
        context = ssl.create_default_context(cafile=str(ca))

        def list_pods() -> int:
            request = urllib.request.Request(
                f"{control_plane.server}/api/v1/namespaces/default/pods",
                headers={"Authorization": f"Bearer {token}"},
            )
            try:
                with urllib.request.urlopen(request, context=context, timeout=10) as resp:
                    return int(resp.status)
            except urllib.error.HTTPError as exc:
                return int(exc.code)

        assert list_pods() == 403
        rbac.create_namespaced_role(
            "default",
            {
                "metadata": {"name": sa},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
            },
        )
        rbac.create_namespaced_role_binding(
            "default",
            {
                "metadata": {"name": sa},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sa},
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": "default"}],
            },
        )
        # The RBAC authorizer sees the binding through its informer a moment later.
        assert eventually(lambda: list_pods() == 200, timeout=10)
