"""The example DAGs (dags/01-05) under real Airflow (``airflow dags test``) on the real control
plane, driven by the demo's own scenario (demo/scenario.yaml), with what tests/end_to_end asserts
on FakeCluster: each try's outcome, the reason stamped on each pod, the pods each try cost, and
every pod deleted.

The demo's scenario is not the tier's (it runs ten times faster than real time and has images,
an outage that ends and logs of its own), so this module has a control plane of its own; it
reuses one that ``make cluster-up SCENARIO=demo/scenario.yaml`` left running in ``.cluster/``.

One change to the demo's scenario: 05's pod is evicted 10 s after it is created instead of 1 s,
and runs 20 s instead of 3 s. FakeCluster's ``evict`` keeps the evicted pod (a kubelet eviction);
the real one is the Eviction API, whose graceful deletion KWOK confirms at once, so a pod
evicted before the trigger's first look is simply gone (``pod.deleted_externally``, a spent try:
what a real cluster does to a pod whose container exits at SIGTERM). Airflow's ``dags test``
starts the trigger a few seconds after the pod under this machine's load; 10 s puts the eviction
where the trigger watches, which is what the example is about.
The pods are read from a watch kept open during the runs: they are deleted by the time the runs
end. 06_sensor runs on the tier's control plane (test_operator_lifecycle).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from airflow_k8s_retry.testing.controlplane import ControlPlane
from airflow_k8s_retry.testing.scenario import Scenario
from demo.run import DAGS, SCENARIO, build_rows
from tests.cluster.kube import PodRecorder
from tests.end_to_end.test_example_dags_run import EXPECTED
from tests.support.airflow_runner import AirflowHome, DagRunResult, MigratedDatabase
from tests.support.cluster_session import REPO, bin_dir

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

EXAMPLES = (
    "01_basic",
    "02_image_pull_retry",
    "03_rate_limit_recovers",
    "04_missing_secret",
    "05_eviction_relaunch",
)
TRAIN = "example.com/ml/train:2"
#: The container log each example's image writes in the demo's scenario (``run.log``), which the
#: operator copies into the task log: read back from the KWOK node through the API server.
LOGS = {
    "01_basic": "hello from the demo",
    "03_rate_limit_recovers": "report built",
    "05_eviction_relaunch": "epoch 1/1 done",
}


def cluster_scenario() -> Scenario:
    """demo/scenario.yaml, with 05's eviction where the trigger already watches (see above)."""
    import yaml

    data = yaml.safe_load(SCENARIO.read_text())
    data["images"][TRAIN]["run"]["duration_seconds"] = 200
    (evict,) = [d for d in data["disruptions"] if d["pod_name_prefix"].startswith("05-")]
    evict["after_seconds"] = 100
    return Scenario.from_dict(data)


@pytest.fixture(scope="module")
def demo_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    scenario = cluster_scenario()
    running = ControlPlane.attach(REPO / ".cluster")
    if running is not None and running.scenario.to_dict() == scenario.to_dict():
        yield running
        return
    found = bin_dir()
    if found is None:
        message = "the control plane is not built; run 'make controlplane'"
        if os.environ.get("AIRFLOW_K8S_RETRY_REQUIRE_CLUSTER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    cp = ControlPlane(tmp_path_factory.mktemp("demo-controlplane") / "cluster", found, scenario)
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()


@dataclass
class Outcome:
    results: dict[str, DagRunResult]
    recorder: PodRecorder


@pytest.fixture(scope="module")
def outcome(
    tmp_path_factory: pytest.TempPathFactory,
    demo_control_plane: ControlPlane,
    migrated_database: MigratedDatabase,
) -> Outcome:
    work = Path(tmp_path_factory.mktemp("examples-on-cluster"))
    kubeconfig = demo_control_plane.kubeconfig

    def run(dag_id: str) -> DagRunResult:
        home = AirflowHome.create(work / dag_id, dags_folder=DAGS, database=migrated_database)
        result = home.run_dag(dag_id, kubeconfig=kubeconfig, timeout=420)
        (work / dag_id / "airflow-output.log").write_text(result.output)
        return result

    with PodRecorder(kubeconfig) as recorder, ThreadPoolExecutor(max_workers=len(EXAMPLES)) as pool:
        results = dict(zip(EXAMPLES, pool.map(run, EXAMPLES), strict=True))
    return Outcome(results, recorder)


def test_the_examples_are_the_numbered_dags_but_the_sensor():
    assert sorted(EXAMPLES) == sorted(p.stem for p in DAGS.glob("0[1-5]_*.py"))


@pytest.mark.parametrize("dag_id", EXAMPLES)
def test_the_example_dag_ends_on_the_real_control_plane_as_on_fakecluster(outcome: Outcome, dag_id: str):
    expected = EXPECTED[dag_id]
    result = outcome.results[dag_id]
    assert result.dag_run_state() == expected.dag_run, result.output[-4000:]
    for task_id, (tries, final) in expected.tasks.items():
        numbers = [t.try_number for t in result.tries(task_id)]
        assert max(numbers) == tries, (task_id, numbers)
        assert result.final_state(task_id) == final, task_id
    pods = outcome.recorder.of_dag(dag_id)
    rows = [r for r in build_rows(result, pods, outcome.recorder.deleted_names()) if r.created]
    assert len(rows) == expected.pods, rows
    assert all(r.deleted for r in rows), f"every pod the operator created is deleted: {rows}"
    if expected.reasons:
        assert {r.reason for r in rows} == expected.reasons, rows
    if dag_id in LOGS:
        assert LOGS[dag_id] in result.output, "the container's log, served by its KWOK node"


def test_the_evicted_pod_was_evicted_through_the_eviction_api(outcome: Outcome):
    """05's first pod went through the real Eviction API (the demo's disruption), not a delete."""
    first = min(
        outcome.recorder.of_dag("05_eviction_relaunch"), key=lambda p: p["metadata"]["creationTimestamp"]
    )
    reasons = {
        c.get("reason") for c in first["status"].get("conditions") or [] if c["type"] == "DisruptionTarget"
    }
    assert reasons == {"EvictionByEvictionAPI"}, first["status"]


def test_the_outage_ends_and_the_same_pod_pulls(outcome: Outcome):
    """03: the registry answered 429 for the outage's 4 s, the pod rode it out and then ran."""
    (pod,) = outcome.recorder.of_dag("03_rate_limit_recovers")
    assert pod["status"]["phase"] == "Succeeded"
    waited = [r for r in outcome.recorder.waiting[pod["metadata"]["uid"]] if r != "ContainerCreating"]
    assert waited[:2] == ["ErrImagePull", "ImagePullBackOff"], waited
    assert set(waited) == {"ErrImagePull", "ImagePullBackOff"}, waited
