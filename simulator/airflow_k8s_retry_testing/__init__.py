"""A Kubernetes API simulator with a scripted kubelet, for tests, demos and offline DAG runs.

``FakeCluster`` serves the core/v1 API subset pod launchers use on 127.0.0.1, moves pods through
scheduling, image pulls, config errors, runs, terminations and disruptions as a ``Scenario``
says, and records every request and lifecycle change. The real ``kubernetes`` and
``kubernetes_asyncio`` clients, ``kubectl`` and the cncf ``KubernetesPodOperator`` work against it
unchanged through the kubeconfig it writes. See ``docs/simulator.md``.

This is the ``airflow-k8s-retry-testing`` distribution (``pip install "airflow-k8s-retry[testing]"``):
it imports nothing from the provider, and its pytest plugin (``pytest_plugin``) offers the
``fake_cluster`` and ``make_fake_cluster`` fixtures.
"""

from __future__ import annotations

from pathlib import Path

from airflow_k8s_retry_testing.cluster import FakeCluster
from airflow_k8s_retry_testing.scenario import (
    Autoscaler,
    Disruption,
    Fault,
    ImageBehaviour,
    NodeSpec,
    ObjectSpec,
    RunSpec,
    Scenario,
    ScenarioError,
)

__version__ = "0.1.0"

#: The example scenarios shipped with the simulator (``healthy``, ``image_pull_failures``, ...).
SCENARIOS = Path(__file__).parent / "scenarios"


def scenario_file(name: str) -> Path:
    """The path of a shipped scenario by its name (``"flaky_api"`` or ``"flaky_api.yaml"``)."""
    path = SCENARIOS / (name if name.endswith(".yaml") else f"{name}.yaml")
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in SCENARIOS.glob("*.yaml")))
        raise ScenarioError(f"no shipped scenario named {name!r}; choose one of: {known}")
    return path


__all__ = [
    "SCENARIOS",
    "Autoscaler",
    "Disruption",
    "FakeCluster",
    "Fault",
    "ImageBehaviour",
    "NodeSpec",
    "ObjectSpec",
    "RunSpec",
    "Scenario",
    "ScenarioError",
    "scenario_file",
]
