"""Fault injection, bearer-token auth, per-token RBAC and the audit trail."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import urllib3
from kubernetes.client import ApiException

from airflow_k8s_retry_testing import FakeCluster
from tests.simulated.simulator.pods import FAST, api_for, pod_body


def test_faults_fail_exactly_the_requested_calls(cluster: FakeCluster) -> None:
    api = api_for(cluster.kubeconfig)
    api.create_namespaced_pod("default", pod_body("f"))
    cluster.add_fault(verb="get", resource="pods", status=500, times=2)
    cluster.add_fault(verb="list", resource="events", status=429, times=1)
    for _ in range(2):
        with pytest.raises(ApiException) as caught:
            api.read_namespaced_pod("f", "default")
        assert caught.value.status == 500
        assert json.loads(caught.value.body)["reason"] == "InternalError"
    assert api.read_namespaced_pod("f", "default").metadata.name == "f"
    with pytest.raises(ApiException) as caught:
        api.list_namespaced_event("default")
    assert caught.value.status == 429 and caught.value.headers["Retry-After"] == "1"
    api.list_namespaced_event("default")
    cluster.add_fault(verb="list", resource="pods", status=410)
    with pytest.raises(ApiException) as caught:
        api.list_namespaced_pod("default")
    assert caught.value.status == 410 and json.loads(caught.value.body)["reason"] == "Expired"
    cluster.add_fault(verb="watch", resource="pods", status=410)
    raw = api.list_namespaced_pod("default", watch=True, timeout_seconds=1, _preload_content=False).read()
    event = json.loads(raw.decode().splitlines()[0])
    assert event["type"] == "ERROR" and event["object"]["code"] == 410
    cluster.add_fault(verb="get", resource="pods", status="reset")
    with pytest.raises((urllib3.exceptions.ProtocolError, urllib3.exceptions.MaxRetryError)):
        api.read_namespaced_pod("f", "default")
    assert api.read_namespaced_pod("f", "default").metadata.name == "f"
    cluster.add_fault(verb="get", resource="pods", status="slow", delay_seconds=0.5)
    configuration = api.api_client.configuration
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        api.read_namespaced_pod("f", "default", _request_timeout=0.2)
    del configuration
    # The server still answers the slow request once its delay is over.
    assert cluster.wait_for(lambda c: any(r.get("fault") == "slow" for r in c.audit_records()), 5)
    faulted = [r for r in cluster.audit_records() if r.get("fault") is not None]
    assert [r["fault"] for r in faulted] == [500, 500, 429, 410, 410, "reset", "slow"]


def test_scenario_faults_apply_from_the_start() -> None:
    with FakeCluster(
        {"faults": [{"verb": "create", "resource": "pods", "status": 500}]}, time_scale=FAST
    ) as sim:
        api = api_for(sim.kubeconfig)
        with pytest.raises(ApiException) as caught:
            api.create_namespaced_pod("default", pod_body("x"))
        assert caught.value.status == 500
        assert api.create_namespaced_pod("default", pod_body("x")).metadata.name == "x"


def test_bearer_token_is_required(cluster: FakeCluster) -> None:
    with urllib.request.urlopen(f"{cluster.url}/version", timeout=5) as answer:
        assert json.loads(answer.read())["major"] == "1", "/version is public, as on a real cluster"
    request = urllib.request.Request(f"{cluster.url}/api/v1/namespaces/default/pods")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=5)
    assert caught.value.code == 401
    assert json.loads(caught.value.read())["reason"] == "Unauthorized"
    request.add_header("Authorization", f"Bearer {cluster.token}")
    with urllib.request.urlopen(request, timeout=5) as answer:
        assert json.loads(answer.read())["kind"] == "PodList"


def test_restricted_token_gets_403_outside_its_rules(cluster: FakeCluster) -> None:
    kubeconfig = cluster.restrict("reader", verbs={"get", "list"}, resources={"pods"})
    api = api_for(kubeconfig)
    admin = api_for(cluster.kubeconfig)
    admin.create_namespaced_pod("default", pod_body("r"))
    assert api.read_namespaced_pod("r", "default").metadata.name == "r"
    assert [p.metadata.name for p in api.list_namespaced_pod("default").items] == ["r"]
    with pytest.raises(ApiException) as caught:
        api.list_namespaced_pod("default", watch=True, timeout_seconds=1, _preload_content=False)
    assert caught.value.status == 403
    body = json.loads(caught.value.body)
    assert body["reason"] == "Forbidden"
    assert body["message"] == (
        'pods is forbidden: User "system:serviceaccount:default:restricted" cannot watch resource "pods" '
        'in API group "" in the namespace "default"'
    )
    with pytest.raises(ApiException) as caught:
        api.delete_namespaced_pod("r", "default")
    assert caught.value.status == 403
    assert json.loads(caught.value.body)["message"].startswith('pods "r" is forbidden: ')
    with pytest.raises(ApiException) as caught:
        api.read_namespaced_pod_log("r", "default")
    assert 'cannot get resource "pods/log"' in json.loads(caught.value.body)["message"]


def test_audit_file_records_requests_and_lifecycle(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    with FakeCluster(audit=audit, time_scale=FAST) as sim:
        api = api_for(sim.kubeconfig)
        api.create_namespaced_pod("default", pod_body("aud", labels={"dag_id": "d1"}))
        assert sim.wait_for(lambda c: (c.pod("aud") or {}).get("status", {}).get("phase") == "Succeeded", 5)
        api.list_namespaced_pod("default", watch=True, timeout_seconds=1, _preload_content=False).read()
        api.delete_namespaced_pod("aud", "default")
        assert sim.wait_for(lambda c: c.pod("aud") is None, 5)
        in_memory = sim.audit_records()
        counts = sim.request_counts()
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    assert lines == in_memory
    create = next(r for r in lines if r["kind"] == "request" and r["verb"] == "create")
    uid = create["uid"]
    assert create == {
        "t": create["t"],
        "kind": "request",
        "verb": "create",
        "resource": "pods",
        "namespace": "default",
        "name": None,
        "uid": uid,
        "status": 201,
        "labels": {"dag_id": "d1"},
        "user_agent": create["user_agent"],
        "watch": False,
        "request_uri": "/api/v1/namespaces/default/pods",
    }
    assert create["user_agent"].startswith("OpenAPI-Generator/")
    watch = next(r for r in lines if r["kind"] == "request" and r["verb"] == "watch")
    assert watch["watch"] is True and watch["status"] == 200
    assert watch["request_uri"].startswith("/api/v1/") and "watch=" in watch["request_uri"]
    delete = next(r for r in lines if r["kind"] == "request" and r["verb"] == "delete")
    assert (delete["name"], delete["uid"], delete["status"]) == ("aud", uid, 200)
    changes = [r for r in lines if r["kind"] == "lifecycle"]
    assert {r["uid"] for r in changes} == {uid}
    assert changes[0]["change"] == "created" and changes[-1]["change"] == "deleted"
    assert all(isinstance(r["t"], float) for r in lines)
    assert [r["t"] for r in lines] == sorted(r["t"] for r in lines)
    assert (
        counts[("create", "pods")] == 1 and counts[("watch", "pods")] == 1 and counts[("delete", "pods")] == 1
    )
