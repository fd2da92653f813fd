"""Scenario files and dicts are validated strictly: a typo names the key instead of running defaults."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_k8s_retry_testing import (
    Disruption,
    FakeCluster,
    Fault,
    ImageBehaviour,
    RunSpec,
    Scenario,
    ScenarioError,
)
from tests.support.paths import REPO

SCENARIOS = REPO / "simulator" / "airflow_k8s_retry_testing" / "scenarios"


def test_every_documented_key_is_read() -> None:
    scenario = Scenario.from_dict(
        {
            "images": {
                "ghost:1": {"pull": "not_found"},
                "slow:1": {"pull": "rate_limited", "for_seconds": 30, "run": {"exit_code": 3, "log": "x"}},
                "big:1": {"run": {"oom": True, "duration_seconds": 2}},
                "limited:1": {"pull": "rate_limited", "for_pods": 2},
            },
            "secrets": ["db", {"name": "api", "namespace": "jobs", "data": {"token": "t"}}],
            "configmaps": ["settings"],
            "disruptions": [{"pod_name_prefix": "etl-", "after_seconds": 5, "kind": "evict"}],
            "faults": [{"verb": "get", "resource": "pods", "status": 500, "times": 2}],
            "time_scale": 0.5,
        }
    )
    assert scenario.images["ghost:1"].pull == "not_found"
    assert scenario.images["slow:1"].for_seconds == 30
    assert scenario.images["limited:1"].for_pods == 2 and scenario.images["slow:1"].for_pods is None
    assert scenario.images["slow:1"].run.exit_code == 3
    assert scenario.images["big:1"].run.exit_code == 137  # OOM kills with SIGKILL
    assert [s.name for s in scenario.secrets] == ["db", "api"]
    assert scenario.secrets[1].data == {"token": "t"}
    assert scenario.disruptions[0].kind == "evict"
    assert scenario.faults[0].times == 2
    assert scenario.time_scale == 0.5
    assert Scenario.from_dict(scenario.to_dict()) == scenario


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"imagez": {}}, "'imagez'"),
        ({"images": {"x": {"pul": "ok"}}}, "images['x']: unknown key 'pul'"),
        ({"images": {"x": {"pull": "missing"}}}, "images['x'].pull"),
        ({"images": {"x": {"run": {"exit_code": "one"}}}}, "images['x'].run.exit_code"),
        ({"images": {"x": {"run": {"exit_code": 300}}}}, "images['x'].run.exit_code"),
        ({"images": {"x": {"for_seconds": -1}}}, "images['x'].for_seconds"),
        ({"images": {"x": {"for_pods": 0}}}, "images['x'].for_pods"),
        ({"images": {"x": {"for_pods": 1.5}}}, "images['x'].for_pods"),
        ({"disruptions": [{"kind": "explode"}]}, "disruptions[0].kind"),
        ({"disruptions": [{"kind": "evict", "after_seconds": "soon"}]}, "disruptions[0].after_seconds"),
        ({"faults": [{"verb": "get", "status": 404}]}, "faults[0].status"),
        ({"faults": [{"verb": "fetch", "status": 500}]}, "faults[0].verb"),
        ({"time_scale": 0}, "time_scale"),
        ({"secrets": "db"}, "secrets: expected a list"),
        ({"nodes": [{"name": "n", "cpu": "lots"}]}, "nodes[0].cpu"),
    ],
)
def test_a_bad_scenario_names_the_key(data: dict[str, object], named: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        Scenario.from_dict(data)
    assert named in str(caught.value)


def test_yaml_and_json_files_load(tmp_path: Path) -> None:
    yaml_file = tmp_path / "s.yaml"
    yaml_file.write_text("images:\n  ghost:1:\n    pull: not_found\ntime_scale: 0.1\n")
    json_file = tmp_path / "s.json"
    json_file.write_text(json.dumps({"images": {"ghost:1": {"pull": "not_found"}}, "time_scale": 0.1}))
    assert Scenario.load(yaml_file) == Scenario.load(json_file)
    bad = tmp_path / "bad.yaml"
    bad.write_text("images:\n  x:\n    pull: nope\n")
    with pytest.raises(ScenarioError, match=r"bad.yaml.images\['x'\].pull: 'nope' is not one of"):
        Scenario.load(bad)
    with pytest.raises(ScenarioError, match="cannot read scenario file"):
        Scenario.load(tmp_path / "missing.yaml")


def test_shipped_example_scenarios_are_valid() -> None:
    files = sorted(SCENARIOS.glob("*.yaml"))
    assert files, "example scenarios are shipped with the package"
    for path in files:
        Scenario.load(path)


def test_image_lookup_falls_back_to_the_untagged_name() -> None:
    scenario = Scenario.from_dict({"images": {"registry.example.com/team/app": {"pull": "unauthorized"}}})
    assert (
        scenario.image("registry.example.com/team/app:2.1")
        is scenario.images["registry.example.com/team/app"]
    )
    assert scenario.image("registry.example.com/team/other:1") is None


def test_fake_cluster_rejects_a_bad_scenario_before_starting() -> None:
    with pytest.raises(ScenarioError, match="time_scale"):
        FakeCluster({"time_scale": -1})


def test_python_objects_are_validated_too() -> None:
    from airflow_k8s_retry_testing import Disruption, Fault, ImageBehaviour, RunSpec

    scenario = Scenario(
        images={
            "ghost:1": ImageBehaviour(pull="not_found"),
            "oom:1": ImageBehaviour(run=RunSpec(exit_code=137, oom=True)),
        },
        disruptions=(Disruption("etl-", 5, "evict"),),
        faults=(Fault("get", "pods", 500, times=2),),
        time_scale=0.1,
    )
    assert Scenario.from_dict(scenario.to_dict()) == scenario
    with pytest.raises(ScenarioError, match=r"ImageBehaviour\.pull: 'notfound'"):
        ImageBehaviour(pull="notfound")
    with pytest.raises(ScenarioError, match=r"Disruption\.kind"):
        Disruption("x", 1, "explode")
    with pytest.raises(ScenarioError, match=r"Fault\.status"):
        Fault("get", "pods", 503)
    with pytest.raises(ScenarioError, match=r"RunSpec\.exit_code"):
        RunSpec(exit_code=256)
    with pytest.raises(ScenarioError, match="time_scale"):
        Scenario(time_scale=0)


@pytest.mark.parametrize(
    ("build", "data", "field"),
    [
        (lambda: ImageBehaviour(for_seconds=-1), {"images": {"x": {"for_seconds": -1}}}, "for_seconds"),
        (lambda: RunSpec(stop_seconds=-1), {"images": {"x": {"run": {"stop_seconds": -1}}}}, "stop_seconds"),
        (
            lambda: Disruption("x", -1, "evict"),
            {"disruptions": [{"kind": "evict", "after_seconds": -1}]},
            "after",
        ),
        (
            lambda: Disruption("x", 1, "evict", count=0),
            {"disruptions": [{"kind": "evict", "count": 0}]},
            "count",
        ),
        (lambda: Fault("get", "pods", 500, times=0), {"faults": [{"status": 500, "times": 0}]}, "times"),
        (lambda: Scenario(kubernetes_version="2.0"), {"kubernetes_version": "2.0"}, "kubernetes_version"),
    ],
)
def test_one_rule_checks_files_and_python_objects_alike(
    build: Callable[[], object], data: dict[str, object], field: str
) -> None:
    with pytest.raises(ScenarioError) as from_python:
        build()
    with pytest.raises(ScenarioError) as from_file:
        Scenario.from_dict(data)
    assert field in str(from_python.value)
    python_reason = str(from_python.value).split(": ", 1)[1]
    file_reason = str(from_file.value).split(": ", 1)[1]
    assert python_reason == file_reason  # the same rule, named under the file's key path
