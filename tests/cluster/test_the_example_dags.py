"""The example DAGs (dags/01-05) under real Airflow (``airflow dags test``) on the real control
plane, driven by the demo's own scenario (demo/scenario.yaml), with what tests/airflow/end_to_end asserts
on FakeCluster: each try's outcome, the reason stamped on each pod, the pods each try cost, and
every pod deleted.

The demo's scenario is not the tier's (it runs ten times faster than real time and has images,
an outage that ends and logs of its own), so the examples have a control plane of their own (it
reuses one that ``make cluster-up SCENARIO=...`` left running with the same scenario). They start
with the first cluster test and are read here (tests/cluster/examples.py; the one change to the
demo's scenario, 05's eviction coming later, is in tests/support/example_dags.py). The pods are
read from a watch kept open during the runs: they are deleted by the time the runs end. 06_sensor
runs on the tier's control plane (test_operator_lifecycle).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from demo.run import DAGS, build_rows
from tests.cluster.examples import EXAMPLES, ExampleRuns
from tests.cluster.kube import PodRecorder
from tests.support.example_dags import EXPECTED
from tools.airflow_runner import DagRunResult

#: The container log each example's image writes in the demo's scenario (``run.log``), which the
#: operator copies into the task log: read back from the KWOK node through the API server.
LOGS = {
    "01_basic": "hello from the demo",
    "03_rate_limit_recovers": "report built",
    "05_eviction_relaunch": "epoch 1/1 done",
}


@dataclass
class Outcome:
    results: dict[str, DagRunResult]
    recorder: PodRecorder


@pytest.fixture(scope="module")
def outcome(example_runs: ExampleRuns) -> Outcome:
    results = example_runs.results()
    outcome = Outcome(results, example_runs.recorder)
    example_runs.stop()  # its control plane is not needed any longer
    return outcome


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
