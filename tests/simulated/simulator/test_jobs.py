"""FakeCluster's batch/v1 Jobs through the real ``kubernetes`` client: the API server's defaults and
validation, and a Job controller that replaces failed pods and finishes Jobs with the conditions,
reasons and messages of Kubernetes 1.31+ (texts from pkg/controller/job)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.config import new_client_from_config

from airflow_k8s_retry_testing import FakeCluster

SCENARIO = {
    "images": {
        "fails:1": {"run": {"exit_code": 1, "duration_seconds": 1}},
        "quick:1": {"run": {"duration_seconds": 1}},
        "long:1": {"run": {"duration_seconds": 100_000}},
    }
}


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster(SCENARIO, time_scale=0.02) as running:
        yield running


@pytest.fixture
def batch(cluster: FakeCluster) -> Iterator[client.BatchV1Api]:
    api = new_client_from_config(config_file=str(cluster.kubeconfig), persist_config=False)
    yield client.BatchV1Api(api)
    api.close()


def job(name: str, image: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            **spec,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": image}]}
            },
        },
    }


def conditions(cluster: FakeCluster, name: str) -> list[tuple[str, str, str]]:
    [found] = [j for j in cluster.jobs() if j["metadata"]["name"] == name]
    return [(c["type"], c["reason"], c["message"]) for c in found["status"].get("conditions", [])]


def finished(name: str) -> Any:
    return lambda c: any(t in ("Complete", "Failed") for t, _, _ in conditions(c, name))


def test_create_applies_the_api_servers_defaults(batch: client.BatchV1Api) -> None:
    made = batch.create_namespaced_job("default", job("etl", "long:1"))
    uid = made.metadata.uid
    assert made.api_version == "batch/v1"
    assert (made.spec.backoff_limit, made.spec.completions, made.spec.parallelism) == (6, 1, 1)
    assert made.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": uid}
    assert made.spec.template.metadata.labels == {
        "controller-uid": uid,
        "batch.kubernetes.io/controller-uid": uid,
        "job-name": "etl",
        "batch.kubernetes.io/job-name": "etl",
    }


def test_a_template_without_never_or_on_failure_is_invalid(batch: client.BatchV1Api) -> None:
    body = job("etl", "long:1")
    del body["spec"]["template"]["spec"]["restartPolicy"]
    with pytest.raises(client.ApiException) as raised:
        batch.create_namespaced_job("default", body)
    assert raised.value.status == 422
    assert json.loads(raised.value.body)["message"].endswith(
        ' "etl" is invalid: spec.template.spec.restartPolicy: Required value: '
        'valid values: "OnFailure", "Never"'
    )


def test_failed_pods_are_replaced_until_the_backoff_limit(
    cluster: FakeCluster, batch: client.BatchV1Api
) -> None:
    batch.create_namespaced_job("default", job("etl", "fails:1", backoffLimit=2))
    assert cluster.wait_for(finished("etl"), 30)
    assert conditions(cluster, "etl") == [
        ("FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
        ("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
    ]
    pods = cluster.pods()
    assert len(pods) == 3 and {p["status"]["phase"] for p in pods} == {"Failed"}
    for pod in pods:
        assert pod["metadata"]["name"].startswith("etl-") and len(pod["metadata"]["name"]) == len("etl-") + 5
        [owner] = pod["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("Job", "etl", True)
    status = batch.read_namespaced_job("etl", "default").status
    assert (status.active, status.failed, status.succeeded) == (0, 3, 0)
    events = [(e["reason"], e["type"]) for e in cluster.events() if e["involvedObject"]["kind"] == "Job"]
    assert events.count(("SuccessfulCreate", "Normal")) == 3
    assert ("BackoffLimitExceeded", "Warning") in events


def test_a_job_completes_when_enough_pods_succeed(cluster: FakeCluster, batch: client.BatchV1Api) -> None:
    batch.create_namespaced_job("default", job("etl", "quick:1", completions=2, parallelism=2))
    assert cluster.wait_for(finished("etl"), 30)
    assert conditions(cluster, "etl") == [
        ("SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods"),
        ("Complete", "CompletionsReached", "Reached expected number of succeeded pods"),
    ]
    status = batch.read_namespaced_job("etl", "default").status
    assert (status.succeeded, status.failed) == (2, 0) and status.completion_time is not None
    assert len(cluster.pods()) == 2


def test_pods_that_succeed_in_one_turn_are_both_counted_before_the_job_scales() -> None:
    # A busy loop runs two kubelet status writes before the controller's callbacks for either: the
    # first callback's sync sees both pods ended but had counted one success, and made a third pod.
    with FakeCluster(SCENARIO, clock="manual") as cluster:
        api = new_client_from_config(config_file=str(cluster.kubeconfig), persist_config=False)
        try:
            client.BatchV1Api(api).create_namespaced_job(
                "default", job("etl", "long:1", completions=2, parallelism=2)
            )
        finally:
            api.close()
        cluster.advance(5)
        pods = cluster.pods()
        assert [p["status"]["phase"] for p in pods] == ["Running", "Running"]

        def both_succeed() -> None:
            for pod in pods:
                ended = copy.deepcopy(pod)
                ended["status"]["phase"] = "Succeeded"
                cluster.store.put("pods", ended, "MODIFIED")

        cluster._call(both_succeed)
        cluster.advance(1)
        assert conditions(cluster, "etl")[-1][0] == "Complete"
        events = [e["reason"] for e in cluster.events() if e["involvedObject"]["kind"] == "Job"]
        assert events.count("SuccessfulCreate") == 2, events
        [found] = cluster.jobs()
        assert (found["status"]["succeeded"], found["status"]["failed"]) == (2, 0)


def test_active_deadline_seconds_fails_the_job_and_stops_its_pods(
    cluster: FakeCluster, batch: client.BatchV1Api
) -> None:
    batch.create_namespaced_job("default", job("etl", "long:1", activeDeadlineSeconds=5))
    assert cluster.wait_for(finished("etl"), 30)
    assert conditions(cluster, "etl")[-1] == (
        "Failed",
        "DeadlineExceeded",
        "Job was active longer than specified deadline",
    )
    assert cluster.wait_for(lambda c: not c.pods(), 30), "the active pod is deleted"


def test_jobs_are_served_under_the_batch_group_only(cluster: FakeCluster) -> None:
    api = new_client_from_config(config_file=str(cluster.kubeconfig), persist_config=False)
    try:
        groups = client.ApisApi(api).get_api_versions()
        assert [g.name for g in groups.groups] == ["batch"]
        with pytest.raises(client.ApiException) as raised:
            api.call_api("/api/v1/namespaces/default/jobs", "GET", auth_settings=["BearerToken"])
        assert raised.value.status == 404
    finally:
        api.close()


def test_rbac_names_the_batch_group(cluster: FakeCluster) -> None:
    kubeconfig = cluster.restrict("pods-only", resources=["pods"])
    api = new_client_from_config(config_file=str(kubeconfig), persist_config=False)
    try:
        with pytest.raises(client.ApiException) as raised:
            client.BatchV1Api(api).list_namespaced_job("default")
    finally:
        api.close()
    assert raised.value.status == 403
    message = json.loads(raised.value.body)["message"]
    assert 'cannot list resource "jobs" in API group "batch" in the namespace "default"' in message
