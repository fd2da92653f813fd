"""The cluster tier: a real control plane (etcd, kube-apiserver, kube-scheduler,
kube-controller-manager, KWOK nodes) for the whole session.

The session reuses a control plane that ``make cluster-up SCENARIO=tests/cluster/scenario.yaml``
left running in ``.cluster/``; otherwise it starts one in a temporary folder from the binaries
``make controlplane`` built (``AIRFLOW_K8S_RETRY_CONTROLPLANE_BIN``, or found through
``tools/controlplane/build.sh --path``) and stops it at the end. Without binaries the tier is
skipped, unless ``AIRFLOW_K8S_RETRY_REQUIRE_CLUSTER=1`` (``make test``) makes that a failure.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_k8s_retry.kube.aio import AsyncKube, WatchEvent
from airflow_k8s_retry.kube.config import ClusterConfig
from airflow_k8s_retry.testing.controlplane import ControlPlane
from airflow_k8s_retry.testing.scenario import Scenario
from tests.support.airflow_runner import MigratedDatabase

REPO = Path(__file__).resolve().parents[2]
SCENARIO_FILE = Path(__file__).with_name("scenario.yaml")


def _bin_dir() -> Path | None:
    given = os.environ.get("AIRFLOW_K8S_RETRY_CONTROLPLANE_BIN")
    if given:
        return Path(given)
    proc = subprocess.run(
        ["bash", str(REPO / "tools" / "controlplane" / "build.sh"), "--path"],
        capture_output=True,
        text=True,
        check=False,
    )
    return Path(proc.stdout.strip()) if proc.returncode == 0 else None


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
    bin_dir = _bin_dir()
    if bin_dir is None:
        message = "the control plane is not built; run 'make controlplane'"
        if os.environ.get("AIRFLOW_K8S_RETRY_REQUIRE_CLUSTER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    cp = ControlPlane(tmp_path_factory.mktemp("controlplane") / "cluster", bin_dir, cluster_scenario)
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()


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
def kubeconfig(control_plane: ControlPlane, watch_probe: WatchProbe) -> Path:
    return control_plane.kubeconfig


@pytest.fixture(scope="session")
def migrated_database(tmp_path_factory: pytest.TempPathFactory) -> MigratedDatabase:
    return MigratedDatabase.create(Path(tmp_path_factory.mktemp("airflow-template")))
