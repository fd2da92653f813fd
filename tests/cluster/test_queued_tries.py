"""A try held by a scheduling gate on the real control plane: kube-apiserver keeps the gate, the
real scheduler leaves the pod alone, and the operator waits as queued, not as unschedulable.

Two DAGs run under real Airflow (``airflow dags test``, one after the other in one interpreter):

* ``cluster_queued_then_admitted``: the pod carries Kueue's gate and a ``schedule_timeout`` of 5 s;
  the test keeps the gate well past that (until the first gate note, 30 s in), with a Kueue
  Workload for the pod whose ``QuotaReserved`` condition says why it is not admitted (the Workload
  API is a CustomResourceDefinition of Kueue's group installed here, served by the real API
  server), then lifts the gate with a JSON merge patch, as Kueue's controller does. The task
  succeeds on its first try, with one pod, and its log names the gate and quotes the Workload.
* ``cluster_queued_past_the_deadline``: a gate nobody lifts and a ``queue_timeout`` of 15 s: the
  try ends as ``schedule.queue_timeout`` (a retry; the task has none left), and its pod is deleted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k
from kubernetes import config as kconfig
from kubernetes.client.exceptions import ApiException

from airflow_k8s_retry.kube.naming import HISTORY_ANNOTATION
from tests.cluster.kube import PodRecorder
from tests.support.scenarios import Scenario
from tools.airflow_runner import AirflowHome, DagRunResult, MigratedDatabase

KUEUE_GATE = "kueue.x-k8s.io/admission"
PENDING = (
    "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default-flavor, "
    "1 more needed"
)
ADMITTED = Scenario(
    "cluster_queued_then_admitted",
    f"""
    RetryingPodOperator(
        task_id="work",
        image="registry.example.com/app:ok",
        labels={{"kueue.x-k8s.io/queue-name": "team-a"}},
        pod_template_dict={{
            "spec": {{"schedulingGates": [{{"name": "{KUEUE_GATE}"}}], "containers": [{{"name": "base"}}]}}
        }},
        failure_policy=FailurePolicy(schedule_timeout=5),
        retries=0,
        execution_timeout=timedelta(minutes=10),
    )
    """,
    {},
)
PAST_THE_DEADLINE = Scenario(
    "cluster_queued_past_the_deadline",
    """
    RetryingPodOperator(
        task_id="work",
        image="registry.example.com/app:ok",
        pod_template_dict={
            "spec": {"schedulingGates": [{"name": "example.com/never"}], "containers": [{"name": "base"}]}
        },
        failure_policy=FailurePolicy(schedule_timeout=5, queue_timeout=15),
        retries=0,
        execution_timeout=timedelta(minutes=10),
    )
    """,
    {},
)
#: Kueue's Workload API, as far as this test needs it: the group, the two versions Kueue serves
#: (v1beta2 since 0.15, v1beta1 before), a status subresource, any fields.
WORKLOAD_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "workloads.kueue.x-k8s.io"},
    "spec": {
        "group": "kueue.x-k8s.io",
        "names": {
            "kind": "Workload",
            "listKind": "WorkloadList",
            "plural": "workloads",
            "singular": "workload",
        },
        "scope": "Namespaced",
        "versions": [
            {
                "name": version,
                "served": True,
                "storage": version == "v1beta2",
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
            for version in ("v1beta2", "v1beta1")
        ],
    },
}


@pytest.fixture(scope="module")
def workload_api(kubeconfig: Path) -> Iterator[k.CustomObjectsApi]:
    api_client = kconfig.new_client_from_config(str(kubeconfig))
    extensions = k.ApiextensionsV1Api(api_client)
    try:
        extensions.create_custom_resource_definition(WORKLOAD_CRD)
    except ApiException as exc:
        if exc.status != 409:
            raise
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until the API server serves the new resource
        crd = extensions.read_custom_resource_definition("workloads.kueue.x-k8s.io")
        if any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or []):
            break
        time.sleep(0.2)
    try:
        yield k.CustomObjectsApi(api_client)
    finally:
        extensions.delete_custom_resource_definition("workloads.kueue.x-k8s.io")
        api_client.close()


def _first(recorder: PodRecorder, dag_id: str, check: Any, timeout: float) -> dict[str, Any]:
    """The dag's pod once ``check(pod)`` holds, as the recorder's watch saw it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pod in recorder.of_dag(dag_id):
            if check(pod):
                return pod
        time.sleep(0.2)
    raise AssertionError(f"no pod of {dag_id} got there in {timeout} s: {recorder.of_dag(dag_id)}")


def _gated_since(pod: dict[str, Any]) -> float | None:
    """When the trigger first saw the pod gated (the history it stamps on the pod), if it did."""
    raw = (pod["metadata"].get("annotations") or {}).get(HISTORY_ANNOTATION)
    if not raw:
        return None
    seen = (json.loads(raw).get("first_seen") or {}).get("schedule.gated")
    return float(seen) if seen is not None else None


def _admit(kubeconfig: Path, workloads: k.CustomObjectsApi, recorder: PodRecorder) -> str:
    """Play Kueue for the first DAG's pod: a Workload that is not admitted yet, kept until the first
    gate note is due, then the gate lifted. Returns the Workload's name."""
    pod = _first(recorder, ADMITTED.dag_id, lambda p: True, timeout=300)
    meta = pod["metadata"]
    name = f"pod-{meta['name']}-3f2a1"[:63]
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/job-uid": meta["uid"]}},
        "spec": {"queueName": "team-a"},
    }
    workloads.create_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", "default", "workloads", workload)
    condition = {
        "type": "QuotaReserved",
        "status": "False",
        "reason": "Pending",
        "message": PENDING,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    workloads.patch_namespaced_custom_object_status(
        "kueue.x-k8s.io", "v1beta2", "default", "workloads", name, {"status": {"conditions": [condition]}}
    )
    seen = _first(recorder, ADMITTED.dag_id, lambda p: _gated_since(p) is not None, timeout=120)
    since = _gated_since(seen)
    assert since is not None
    # Held well past schedule_timeout (5 s), until the first gate note (30 s) has had its time.
    time.sleep(max(0.0, since + 40 - time.time()))
    api_client = kconfig.new_client_from_config(str(kubeconfig))
    try:
        k.CoreV1Api(api_client).patch_namespaced_pod(
            meta["name"],
            "default",
            {"spec": {"schedulingGates": None}},
            _content_type="application/merge-patch+json",
        )
    finally:
        api_client.close()
    return name


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory,
    kubeconfig: Path,
    migrated_database: MigratedDatabase,
    workload_api: k.CustomObjectsApi,
) -> tuple[dict[str, DagRunResult], PodRecorder, str]:
    root = tmp_path_factory.mktemp("queued")
    dags = root / "dags"
    dags.mkdir()
    scenarios = (ADMITTED, PAST_THE_DEADLINE)
    for scenario in scenarios:
        (dags / f"{scenario.dag_id}.py").write_text(scenario.dag_file())
    home = AirflowHome.create(root / "home", dags_folder=dags, database=migrated_database)
    dag_ids = [s.dag_id for s in scenarios]
    with PodRecorder(kubeconfig) as recorder:
        started = time.monotonic()
        proc = home.start_dags(dag_ids, kubeconfig=kubeconfig)
        workload = _admit(kubeconfig, workload_api, recorder)
        results = {r.dag_id: r for r in home.finish_dags(dag_ids, proc, started, timeout=900)}
        _first(recorder, PAST_THE_DEADLINE.dag_id, lambda p: p["metadata"]["uid"] in recorder.deleted, 60)
    return results, recorder, workload


def test_a_gated_try_outlives_schedule_timeout_and_runs_once_admitted(runs: Any):
    results, recorder, workload = runs
    result = results[ADMITTED.dag_id]
    assert [(t.try_number, t.state) for t in result.tries("work")] == [(1, "success")], result.output[-4000:]
    pods = recorder.of_dag(ADMITTED.dag_id)
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    assert "schedule.timeout" not in result.output
    notes = [line for line in result.output.splitlines() if "schedule.gated: held by scheduling gate" in line]
    assert notes, result.output[-4000:]
    assert f"{KUEUE_GATE} since" in notes[0]
    assert f"Kueue Workload {workload}: QuotaReserved=False (Pending): {PENDING}" in notes[0]


def test_a_gate_nobody_lifts_ends_the_try_at_its_queue_deadline(runs: Any):
    results, recorder, _ = runs
    result = results[PAST_THE_DEADLINE.dag_id]
    assert [(t.try_number, t.state) for t in result.tries("work")] == [(1, "failed")], result.output[-4000:]
    assert "schedule.queue_timeout" in result.output
    assert "schedule.timeout" not in result.output.replace("schedule.queue_timeout", "")
    (pod,) = recorder.of_dag(PAST_THE_DEADLINE.dag_id)
    assert pod["metadata"]["uid"] in recorder.deleted, "the try's pod was deleted"
    assert not pod["spec"].get("nodeName"), "the real scheduler never placed the gated pod"
