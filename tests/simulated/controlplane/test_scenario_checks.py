"""What the real backend cannot honour fails at once, naming the key (no control plane needed)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_k8s_retry_testing.scenario import Scenario
from tests.support.example_dags import demo_scenario_on_a_control_plane
from tests.support.paths import REPO
from tools.controlplane import COMPONENTS, ControlPlane, ControlPlaneError
from tools.controlplane.cluster import KWOK_CRDS
from tools.controlplane.stages import UnsupportedScenario, check_supported, kwok_config


@pytest.mark.parametrize(
    ("scenario", "key"),
    [
        ({"faults": [{"verb": "list", "resource": "pods", "status": 500}]}, "scenario.faults"),
        ({"autoscaler": {}}, "scenario.autoscaler"),
        ({"images": {"a:1": {"run": {"xcom": {"rows": 3}}}}}, "run.xcom"),
        ({"kubernetes_version": "1.30"}, "scenario.kubernetes_version"),
        ({"images": {"a:1": {"pull": "rate_limited", "for_pods": 1}}}, "for_pods"),
    ],
)
def test_what_the_real_backend_cannot_do_fails_with_the_key(scenario: dict[str, Any], key: str):
    with pytest.raises(UnsupportedScenario, match=key.replace(".", r"\.")):
        check_supported(Scenario.from_dict(scenario))


def test_the_tier_scenario_becomes_kwok_stages():
    scenario = Scenario.load(REPO / "tests" / "cluster" / "scenario.yaml")
    docs = list(yaml.safe_load_all(kwok_config(scenario)))
    assert {d["kind"] for d in docs} == {"Stage"}
    names = [d["metadata"]["name"] for d in docs]
    assert len(names) == len(set(names))
    expected = {"node-initialize", "pod-create", "config-missing", "pod-start", "pod-exit", "pod-delete"}
    assert expected <= set(names)


def test_the_demo_scenario_runs_on_the_real_backend():
    """An outage that ends (``for_seconds``) and container logs (``run.log``) are played there; 07's
    outage, which ends by pods (``for_pods``), is refused, and the cluster tier plays the demo's
    scenario without it (``demo_scenario_on_a_control_plane``; the tier runs 01-05)."""
    with pytest.raises(UnsupportedScenario, match="for_pods"):
        check_supported(Scenario.load(REPO / "demo" / "scenario.yaml"))
    scenario = demo_scenario_on_a_control_plane()
    check_supported(scenario)
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(kwok_config(scenario))]
    report = sorted(scenario.images).index("registry.example.com/team/report:1.4")
    assert {f"image-{report}-pulled", f"image-{report}-pulled-after-back-off", f"image-{report}-exit"} <= set(
        names
    )


def test_kwok_is_never_given_an_exec_target():
    """KWOK's only exec runs the client's command on this machine (the XCom sidecar's
    ``kill -s SIGINT 1`` would reach this machine's PID 1): no Exec in its config or its CRDs."""
    scenario = demo_scenario_on_a_control_plane()
    kinds = {d["kind"] for d in yaml.safe_load_all(kwok_config(scenario))}
    assert kinds == {"Stage"}
    assert not [crd for crd in KWOK_CRDS if "exec" in crd.lower() or "attach" in crd.lower()]


def test_missing_binaries_are_one_line_that_says_what_to_do(tmp_path: Path):
    cp = ControlPlane(tmp_path / "cluster", tmp_path / "no-such-bin")
    with pytest.raises(ControlPlaneError) as caught:
        cp.start()
    message = str(caught.value)
    assert "\n" not in message
    assert "kube-apiserver" in message and "run 'make controlplane' first" in message
    assert not (tmp_path / "cluster").exists()


def test_a_port_in_use_is_one_line_that_says_what_to_do(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in COMPONENTS:  # never started: the port is checked before anything runs
        (bin_dir / name).write_text("#!/bin/sh\nexit 1\n")
        (bin_dir / name).chmod(0o755)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cp = ControlPlane(tmp_path / "cluster", bin_dir, apiserver_port=port)
        with pytest.raises(ControlPlaneError) as caught:
            cp.start()
    assert str(caught.value) == (
        f"controlplane: port {port} on 127.0.0.1 is in use; choose another (APISERVER_PORT=N) "
        "or leave it unset for a free one"
    )
    assert not (tmp_path / "cluster").exists()


def test_the_state_file_is_replaced_whole_never_rewritten_in_place(tmp_path: Path):
    # The harness reads state.json as it starts while the launching process writes it again; a
    # file truncated and rewritten in place can be read empty.
    cp = ControlPlane(tmp_path / "cluster", tmp_path / "bin")
    cp.directory.mkdir(parents=True)
    cp._write_state()
    first = cp.state_file.stat().st_ino
    cp.ports["kube-apiserver"] = 6443
    cp._write_state()
    assert cp.state_file.stat().st_ino != first
    assert json.loads(cp.state_file.read_text())["ports"] == {"kube-apiserver": 6443}
    assert sorted(p.name for p in cp.directory.iterdir()) == ["state.json"]
