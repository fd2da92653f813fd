"""The soak's plan draws preemption as a fate: its pods request CPU (a preemption for CPU can only
take a pod that requests some), its scenario entry is a ``preempt`` disruption, and its pods run
past it. No other fate's pods can be preempted, and a preempted task may succeed (it is relaunched
inside its try, as an evicted one is)."""

from __future__ import annotations

from airflow_k8s_retry_testing.scenario import NodeSpec, Scenario, parse_quantity
from tests.soak.judge import NEVER_SUCCEED
from tests.soak.plan import DISRUPTIONS, WEIGHTS, draw


def test_preemption_is_a_fate_with_a_cpu_request_and_a_preempt_disruption() -> None:
    assert WEIGHTS["disruption_preempt"] == 1
    assert DISRUPTIONS["disruption_preempt"] == "preempt"
    plan = draw(2, 12)
    preempted = [t for t in plan.tasks if t.fate == "disruption_preempt"]
    assert len(preempted) == 3
    scenario = plan.scenario()
    disruptions = {d["pod_name_prefix"]: d for d in scenario["disruptions"]}
    parsed = Scenario.from_dict(scenario)  # the control plane accepts it
    assert [d.kind for d in parsed.disruptions].count("preempt") == 3
    for task in preempted:
        assert task.operator == {"cpu_request": "100m"}
        assert disruptions[task.prefix] == {
            "pod_name_prefix": task.prefix,
            "after_seconds": 100,
            "kind": "preempt",
            "count": 1,
        }
        run = scenario["images"][task.image]["run"]
        assert run["duration_seconds"] > disruptions[task.prefix]["after_seconds"]


def test_only_the_preempted_fates_pods_can_be_victims() -> None:
    """The preemptor asks for all of a node's CPU, so it takes every pod that requests CPU from
    that node: only the preempted fate's pods may request CPU that a node can give."""
    node_cpu = NodeSpec(name="kwok-node-1").cpu  # the soak's scenario sizes no nodes: the default
    plan = draw(1, 300)
    for task in plan.tasks:
        request = task.operator.get("cpu_request")
        if task.fate == "disruption_preempt":
            assert request is not None
            assert 0 < parse_quantity(request, "cpu_request") < node_cpu
        elif request is not None:
            assert task.fate == "unschedulable"
            assert parse_quantity(request, "cpu_request") > node_cpu


def test_a_preempted_task_may_succeed() -> None:
    assert "disruption_preempt" not in NEVER_SUCCEED
