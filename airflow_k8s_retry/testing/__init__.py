"""A Kubernetes API simulator with a scripted kubelet, for tests, demos and offline DAG runs.

``FakeCluster`` serves the core/v1 API subset pod launchers use on 127.0.0.1, moves pods through
scheduling, image pulls, config errors, runs, terminations and disruptions as a ``Scenario``
says, and records every request and lifecycle change. The real ``kubernetes`` and
``kubernetes_asyncio`` clients, ``kubectl`` and the cncf ``KubernetesPodOperator`` work against it
unchanged through the kubeconfig it writes. See ``docs/simulator.md``.
"""

from __future__ import annotations

from airflow_k8s_retry.testing.cluster import FakeCluster
from airflow_k8s_retry.testing.scenario import (
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

__all__ = [
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
]
