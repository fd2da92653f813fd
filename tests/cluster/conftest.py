"""The cluster tier: a real control plane (etcd, kube-apiserver, kube-scheduler,
kube-controller-manager, KWOK nodes) for the whole session.

The session fixture ``control_plane`` lives in ``tests/support/cluster_session.py`` (registered by
``tests/conftest.py``); the fidelity suite (``tests/cluster/fidelity``) shares the same control
plane. The session reuses a control plane that ``make cluster-up SCENARIO=tests/cluster/scenario.yaml``
left running in ``.cluster/``; otherwise it starts one in a temporary folder from the binaries
``make controlplane`` built (``AIRFLOW_K8S_RETRY_CONTROLPLANE_BIN``, or found through
``tools/controlplane/build.sh --path``) and stops it at the end. Without binaries the tier is
skipped, unless ``AIRFLOW_K8S_RETRY_REQUIRE_CLUSTER=1`` (``make test``) makes that a failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.examples import ExampleRuns, selected
from tests.cluster.watch_probe import WatchProbe
from tools.airflow_runner import MigratedDatabase
from tools.controlplane import ControlPlane


@pytest.fixture(scope="session")
def watch_probe(control_plane: ControlPlane) -> WatchProbe:
    probe = WatchProbe(control_plane.kubeconfig, seconds=75)
    probe.thread.start()
    return probe


@pytest.fixture(scope="session")
def example_runs(
    tmp_path_factory: pytest.TempPathFactory, migrated_database: MigratedDatabase
) -> Iterator[ExampleRuns]:
    """The example DAGs on a control plane of their own, started now and read at the end."""
    runs = ExampleRuns.start(tmp_path_factory.mktemp("examples-on-cluster"), migrated_database)
    try:
        yield runs
    finally:
        runs.stop()


@pytest.fixture(scope="session")
def kubeconfig(control_plane: ControlPlane, watch_probe: WatchProbe, request: pytest.FixtureRequest) -> Path:
    if selected(request.session.items):  # start them with the first cluster test (tests/cluster/examples.py)
        request.getfixturevalue("example_runs")
    return control_plane.kubeconfig
