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

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_k8s_retry.kube.aio import AsyncKube, WatchEvent
from airflow_k8s_retry.kube.config import ClusterConfig
from tests.cluster.examples import ExampleRuns, selected
from tools.airflow_runner import MigratedDatabase
from tools.controlplane import ControlPlane


class WatchProbe:
    """One long watch through the package's client, opened with the first cluster test and read by
    the bookmark test at its end (the watch cache's periodic bookmark comes about once a minute, so
    the wait overlaps the other tests instead of adding to them)."""

    def __init__(self, kubeconfig: Path, seconds: int) -> None:
        self.kubeconfig = kubeconfig
        self.seconds = seconds
        self.events: list[WatchEvent] = []
        self.list_version = ""
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._watch())
        except BaseException as exc:
            self.error = exc

    async def _watch(self) -> None:
        kube = await AsyncKube.connect(ClusterConfig(kube_config_path=str(self.kubeconfig)))
        try:
            selector = "probe=bookmarks"
            self.list_version = (await kube.list_pods("default", label_selector=selector)).resource_version
            async for event in kube.watch_pods(
                "default",
                resource_version=self.list_version,
                label_selector=selector,
                timeout_seconds=self.seconds,
            ):
                self.events.append(event)
        finally:
            await kube.close()

    def result(self) -> list[WatchEvent]:
        self.thread.join(self.seconds + 30)
        if self.error is not None:
            raise self.error
        return self.events


@pytest.fixture(scope="session")
def watch_probe(control_plane: ControlPlane) -> WatchProbe:
    probe = WatchProbe(control_plane.kubeconfig, seconds=75)
    probe.thread.start()
    return probe


@pytest.fixture(scope="session")
def migrated_database(tmp_path_factory: pytest.TempPathFactory) -> MigratedDatabase:
    return MigratedDatabase.create(Path(tmp_path_factory.mktemp("airflow-template")))


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
