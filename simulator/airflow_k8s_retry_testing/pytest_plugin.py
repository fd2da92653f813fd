"""The simulator's pytest plugin, loaded by pytest from the distribution's ``pytest11`` entry point.

Fixtures:

``fake_cluster``
    A started :class:`~airflow_k8s_retry_testing.FakeCluster`, stopped after the test. ``KUBECONFIG``
    and ``AIRFLOW_CONN_KUBERNETES_DEFAULT`` point at it for the test, so the ``kubernetes`` client
    and a ``KubernetesPodOperator`` or ``RetryingPodOperator`` on the default connection find it.
    Its scenario and options come from the test's ``fake_cluster`` marker::

        @pytest.mark.fake_cluster("image_pull_failures", time_scale=0.05)
        def test_my_dag(fake_cluster): ...

    The marker's one positional argument is a shipped scenario's name, a path to a YAML or JSON
    file, a dict or a ``Scenario``; its keyword arguments are ``FakeCluster``'s (``clock="manual"``
    for a cluster that stands still until the test calls its ``advance``). Without the marker the
    cluster is the default one (a healthy node, every image pulls and exits 0). The closest marker
    wins, so a module's ``pytestmark`` gives its tests a scenario that one test's own marker
    replaces, and a parametrized test gives each case its own through the case's marks::

        def exiting(code):
            scenario = {"images": {"app:1": {"run": {"exit_code": code}}}}
            return pytest.param(code, marks=pytest.mark.fake_cluster(scenario))

        @pytest.mark.parametrize("code", [exiting(0), exiting(3)])
        def test_each_exit_code(fake_cluster, code): ...

``make_fake_cluster``
    A factory for more clusters in one test, ``make_fake_cluster(scenario=None, **options)``,
    each started at once and stopped after the test. It sets no environment variable.

The audit log of every cluster goes to the test's ``tmp_path``. Nothing is imported from the
simulator until a fixture is used, so the plugin costs nothing in test runs that do not use it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from airflow_k8s_retry_testing.cluster import FakeCluster


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "fake_cluster(scenario=None, **options): the scenario and FakeCluster options of the "
        "fake_cluster fixture (airflow-k8s-retry-testing)",
    )


def _resolve(scenario: Any) -> Any:
    """A bare name (no path separator, no suffix) is a shipped scenario; anything else is as given."""
    named = isinstance(scenario, str) and "/" not in scenario
    if named and not scenario.endswith((".yaml", ".yml", ".json")):
        from airflow_k8s_retry_testing import scenario_file

        return scenario_file(scenario)
    return scenario


@pytest.fixture
def make_fake_cluster(tmp_path: Path) -> Iterator[Callable[..., FakeCluster]]:
    from airflow_k8s_retry_testing.cluster import FakeCluster

    started: list[FakeCluster] = []

    def make(scenario: Any = None, **options: Any) -> FakeCluster:
        options.setdefault("audit", tmp_path / f"fake-cluster-{len(started)}-audit.jsonl")
        cluster = FakeCluster(_resolve(scenario), **options)
        cluster.start()
        started.append(cluster)
        return cluster

    yield make
    for cluster in reversed(started):
        cluster.stop()


@pytest.fixture
def fake_cluster(
    request: pytest.FixtureRequest,
    make_fake_cluster: Callable[..., FakeCluster],
    monkeypatch: pytest.MonkeyPatch,
) -> FakeCluster:
    marker = request.node.get_closest_marker("fake_cluster")
    args: tuple[Any, ...] = marker.args if marker is not None else ()
    options: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    if len(args) > 1 or (args and "scenario" in options):
        raise pytest.UsageError(
            "@pytest.mark.fake_cluster takes one scenario (a positional argument or scenario=...), "
            f"got {len(args)} positional and {sorted(options)}"
        )
    scenario = args[0] if args else options.pop("scenario", None)
    cluster = make_fake_cluster(scenario, **options)
    connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(cluster.kubeconfig)}}
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(connection))
    return cluster
