"""A real Kubernetes control plane for tests: etcd, kube-apiserver, kube-scheduler,
kube-controller-manager and KWOK nodes, built by ``make controlplane`` from the Go modules pinned in
``tools/controlplane/go.mod`` and driven by the same scenario language as ``FakeCluster``.

``make cluster-up SCENARIO=FILE`` / ``make cluster-down`` run it from a shell;
``python -m airflow_k8s_retry_testing.controlplane`` is the command behind them.
"""

from __future__ import annotations

from airflow_k8s_retry_testing.controlplane.cluster import COMPONENTS, ControlPlane, ControlPlaneError
from airflow_k8s_retry_testing.controlplane.stages import UnsupportedScenario

__all__ = ["COMPONENTS", "ControlPlane", "ControlPlaneError", "UnsupportedScenario"]
