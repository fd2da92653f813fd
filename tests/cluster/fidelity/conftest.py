"""The fidelity suite: the same probe against ``FakeCluster`` and the real control plane.

Part of the cluster tier (every test is marked ``cluster``): the real side is the session's
``control_plane`` (``tests/support/cluster_session.py``, shared with ``tests/cluster``), the fake
side one ``FakeCluster`` playing the same scenario file for the whole session.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from airflow_k8s_retry_testing import FakeCluster
from airflow_k8s_retry_testing.scenario import Scenario
from tests.cluster.fidelity.probes import Backends
from tools.controlplane import ControlPlane
from tools.controlplane.stages import KUBERNETES_MINOR


@pytest.fixture(scope="session")
def fake_backend(cluster_scenario: Scenario) -> Iterator[FakeCluster]:
    """One FakeCluster for the session (the plugin's `fake_cluster` is one per test)."""
    # The real control plane is Kubernetes 1.36 whatever the scenario says (it accepts the default
    # 1.31 and plays 1.36 kubelets); FakeCluster is told so, as a DAG author would tell it.
    scenario = dataclasses.replace(cluster_scenario, kubernetes_version=f"1.{KUBERNETES_MINOR}")
    with FakeCluster(scenario) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def backends(fake_backend: FakeCluster, control_plane: ControlPlane) -> Backends:
    return Backends(fake=fake_backend, real=control_plane)
