"""Node lifecycle: a lost node's pods go ``Unknown``, are evicted by the taint manager, then GC'd.

When a node stops reporting (a scenario ``node_lost``), the node lifecycle controller marks its
pods ``Ready=False/NodeNotReady`` after the node monitor grace period (40 s) and the phase
``Unknown``; the taint-eviction controller deletes them after the ``not-ready`` toleration (300 s)
with ``DisruptionTarget=True/DeletionByTaintManager``; nobody on the node confirms, so the pod
garbage collector removes the object once the grace period has passed as well.
"""

from __future__ import annotations

from airflow_k8s_retry_testing.apiserver import pods as pod_strategy
from airflow_k8s_retry_testing.controllers.kubelet import Kubelet
from airflow_k8s_retry_testing.controllers.runs import PodRun
from airflow_k8s_retry_testing.controllers.status import StatusManager

# Scripted timings, in simulated seconds.
NODE_NOT_READY_AFTER = 40.0
TAINT_EVICTION_AFTER = 300.0
POD_GC_AFTER = 40.0


class NodeLifecycle:
    """The node lifecycle controller, the taint-eviction controller and the pod GC."""

    def __init__(self, status: StatusManager, kubelet: Kubelet) -> None:
        self.status = status
        self.kubelet = kubelet

    def node_lost(self, run: PodRun) -> None:
        """The pod's node stops reporting: its kubelet does nothing more for it."""
        pod = self.status.pod(run)
        if pod is None:
            return
        run.cancel_timers()
        run.frozen = True
        self.status.store.lifecycle(pod, "node_lost")
        self.status.clock.later(NODE_NOT_READY_AFTER, self._node_not_ready, run)

    def _node_not_ready(self, run: PodRun) -> None:
        if run.gone:
            return
        status = self.status
        status.condition(run, "Ready", False, "NodeNotReady")
        status.condition(run, "ContainersReady", False, "NodeNotReady")
        run.phase = "Unknown"
        status.event(run, "NodeNotReady", "Node is not ready", warning=True, component="node-controller")
        status.publish(run, "phase:Unknown")
        status.clock.later(TAINT_EVICTION_AFTER, self._taint_evict, run)

    def _taint_evict(self, run: PodRun) -> None:
        if run.gone:
            return
        status = self.status
        status.condition(
            run,
            "DisruptionTarget",
            True,
            "DeletionByTaintManager",
            "Taint manager: deleting due to NoExecute taint",
        )
        for c in run.containers:
            if not c.terminated:
                c.lost(
                    "The container could not be located when the pod was "
                    "deleted.  The container used to be Running"
                )
                c.ready = False
                c.touch()
        status.event(
            run,
            "TaintManagerEviction",
            f"Marking for deletion Pod {run.namespace}/{run.name}",
            component="taint-eviction-controller",
        )
        status.publish(run, "disruption:DeletionByTaintManager", "terminated:ContainerStatusUnknown")
        pod = status.pod(run)
        if pod is not None:
            grace = pod_strategy.spec_grace(pod)
            pod_strategy.mark_deleted(status.store, pod, grace)
            status.clock.later(grace + POD_GC_AFTER, self._pod_gc, run)

    def _pod_gc(self, run: PodRun) -> None:
        if run.gone:
            return
        run.phase = "Failed"
        self.status.publish(run, "phase:Failed")
        self.kubelet.remove(run)
