"""A real Kubernetes control plane for tests and benchmarks: etcd, kube-apiserver, kube-scheduler,
kube-controller-manager and KWOK nodes, built by ``make controlplane`` from the Go modules pinned in
``tools/controlplane/go.mod`` and driven by the same scenario language as ``FakeCluster``.

``make cluster-up SCENARIO=FILE`` / ``make cluster-down`` run it from a shell;
``python -m tools.controlplane`` is the command behind them. :class:`~.realcluster.RealCluster`
runs one with the API server's audit log, read as the simulator's records (``make bench
CLUSTER=real``, ``make bench-stack``, the soak).
"""

from __future__ import annotations

from tools.controlplane.cluster import COMPONENTS, ControlPlane, ControlPlaneError, built_binaries
from tools.controlplane.stages import UnsupportedScenario

__all__ = ["COMPONENTS", "ControlPlane", "ControlPlaneError", "UnsupportedScenario", "built_binaries"]
