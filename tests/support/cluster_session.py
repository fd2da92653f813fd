"""The real control plane's session fixture, of the cluster tier (``tests/cluster``, the fidelity
suite in ``tests/cluster/fidelity`` included): one control plane per session, whichever starts first."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from airflow_k8s_retry_testing.scenario import Scenario
from tests.support.paths import REPO
from tools.controlplane import ControlPlane, built_binaries

SCENARIO_FILE = REPO / "tests" / "cluster" / "scenario.yaml"


@pytest.fixture(scope="session")
def cluster_scenario() -> Scenario:
    return Scenario.load(SCENARIO_FILE)


@pytest.fixture(scope="session")
def control_plane(
    tmp_path_factory: pytest.TempPathFactory, cluster_scenario: Scenario
) -> Iterator[ControlPlane]:
    running = ControlPlane.attach(REPO / ".cluster")
    if running is not None and running.scenario.to_dict() == cluster_scenario.to_dict():
        yield running
        return
    found = built_binaries()
    if found is None:
        message = "the control plane is not built; run 'make controlplane'"
        if os.environ.get("AIRFLOW_K8S_RETRY_REQUIRE_CLUSTER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    cp = ControlPlane(tmp_path_factory.mktemp("controlplane") / "cluster", found, cluster_scenario)
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()
