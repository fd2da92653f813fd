"""The simulator's additions for the chaos suite: 403 and lost-answer faults, image behaviours and
disruptions set while running, and a clock at the cluster's pace."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import urllib3
from kubernetes.client import ApiException

from airflow_k8s_retry_testing import FakeCluster
from airflow_k8s_retry_testing.simclock import SimClock
from tests.simulated.simulator.pods import api_for, pod_body


def test_a_403_at_create_is_a_quota_rejection_and_elsewhere_the_authorizer(cluster: FakeCluster) -> None:
    api = api_for(cluster.kubeconfig)
    cluster.add_fault(verb="create", resource="pods", status=403, times=1)
    with pytest.raises(ApiException) as caught:
        api.create_namespaced_pod("default", pod_body("q"))
    assert caught.value.status == 403
    assert "exceeded quota" in json.loads(caught.value.body)["message"]
    api.create_namespaced_pod("default", pod_body("q"))
    cluster.add_fault(verb="delete", resource="pods", status=403, times=1)
    with pytest.raises(ApiException) as caught:
        api.delete_namespaced_pod("q", "default")
    assert caught.value.status == 403
    assert "cannot delete resource" in json.loads(caught.value.body)["message"]


def test_a_lost_answer_lands_the_change_and_drops_the_connection(cluster: FakeCluster) -> None:
    api = api_for(cluster.kubeconfig)
    cluster.add_fault(verb="create", resource="pods", status="lost", times=1)
    with pytest.raises(urllib3.exceptions.ProtocolError):
        api.create_namespaced_pod("default", pod_body("landed"))
    assert cluster.pod("landed") is not None
    [record] = [r for r in cluster.audit_records() if r.get("verb") == "create" and r.get("fault")]
    assert record["status"] == 0 and record["fault"] == "lost"


def test_image_behaviours_and_disruptions_can_change_while_running(cluster: FakeCluster) -> None:
    api = api_for(cluster.kubeconfig)
    cluster.set_image("example.com/late:1", {"pull": "not_found"})
    api.create_namespaced_pod("default", pod_body("ghost", "example.com/late:1"))

    def waiting_reason(c: FakeCluster) -> bool:
        pod = c.pod("ghost") or {}
        states = [s.get("state", {}) for s in pod.get("status", {}).get("containerStatuses") or []]
        return any(
            (s.get("waiting") or {}).get("reason") in ("ErrImagePull", "ImagePullBackOff") for s in states
        )

    assert cluster.wait_for(waiting_reason, timeout=10)
    cluster.add_disruption("victim-", after_seconds=1, kind="delete")
    api.create_namespaced_pod("default", pod_body("victim-1", "example.com/long:1"))
    assert cluster.wait_for(lambda c: c.pod("victim-1") is None, timeout=10)
    assert any(r.get("change") == "deleted_externally" for r in cluster.audit_records())


async def test_the_sim_clock_runs_at_the_cluster_pace() -> None:
    clock = SimClock(0.001)
    start = clock.now()
    began = time.monotonic()
    await clock.sleep_until(start + 50)  # 50 simulated seconds
    assert clock.now() >= start + 50
    assert time.monotonic() - began < 2.0
    with pytest.raises(ValueError, match="time_scale"):
        SimClock(0)
    await asyncio.sleep(0)
