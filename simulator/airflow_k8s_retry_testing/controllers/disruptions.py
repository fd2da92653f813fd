"""Scripted disruptions: what a scenario's ``disruptions`` (or ``FakeCluster.disrupt``) do to a pod.

* ``evict``: the ``DisruptionTarget=True/EvictionByEvictionAPI`` condition, then the pod fails
  with reason ``Evicted``;
* ``preempt``: ``DisruptionTarget=True/PreemptionByScheduler``, a ``Preempted`` Event, then a
  graceful deletion;
* ``node_lost``: the node stops reporting (``controllers/nodes.py`` takes it from there);
* ``delete``: a graceful deletion by someone else;
* ``admit``: the pod's scheduling gates are lifted (as Kueue does when it admits the pod), and the
  scheduler considers it.

A deletion is marked through the pod strategy (``apiserver/pods.py``), with the pod's own grace
period even before it runs; the kubelet learns of it from the store. The Eviction API
(``POST pods/NAME/eviction``) is the API server's own (``pods.evict_pod``).
"""

from __future__ import annotations

import uuid

from airflow_k8s_retry_testing.apiserver import pods as pod_strategy
from airflow_k8s_retry_testing.controllers.kubelet import Kubelet
from airflow_k8s_retry_testing.controllers.nodes import NodeLifecycle
from airflow_k8s_retry_testing.controllers.runs import PodRun
from airflow_k8s_retry_testing.controllers.status import StatusManager
from airflow_k8s_retry_testing.scenario import Disruption
from airflow_k8s_retry_testing.store import Obj


class Disruptions:
    """Plans the scenario's disruptions for each new pod and carries them out."""

    def __init__(self, status: StatusManager, kubelet: Kubelet, nodes: NodeLifecycle) -> None:
        self.status = status
        self.kubelet = kubelet
        self.nodes = nodes
        #: How many more pods each scenario disruption may hit (None: every matching pod).
        self.budget: dict[int, int | None] = {i: d.count for i, d in enumerate(status.scenario.disruptions)}

    def plan(self, run: PodRun) -> None:
        """A pod was created: arm every disruption whose prefix it matches and budget allows."""
        for index, disruption in enumerate(self.status.scenario.disruptions):
            if not run.name.startswith(disruption.pod_name_prefix):
                continue
            budget = self.budget[index]
            if budget is not None:
                if budget <= 0:
                    continue
                self.budget[index] = budget - 1
            self.status.after(run, disruption.after_seconds, self._scheduled, run, disruption)

    def _scheduled(self, run: PodRun, disruption: Disruption) -> None:
        self.disrupt(run, disruption.kind)

    def disrupt(self, run: PodRun, kind: str) -> None:
        pod = self.status.pod(run)
        if pod is None or run.gone:
            return
        if kind == "evict":
            self._target(run, "EvictionByEvictionAPI", "Eviction API: evicting")
            self.status.after(run, 0.1, self._evicted, run)
        elif kind == "preempt":
            self._preempt(run, pod)
        elif kind == "node_lost":
            self.nodes.node_lost(run)
        elif kind == "delete":
            self.status.store.lifecycle(pod, "deleted_externally")
            self._delete(run)
        elif kind == "admit":
            self._admit(pod)
        else:
            raise ValueError(
                f"unknown disruption kind {kind!r}; use evict, preempt, node_lost, delete or admit"
            )

    def _admit(self, pod: Obj) -> None:
        """Lift the gates, as the queue does through the API; the scheduler learns of it from the store."""
        if not pod["spec"].get("schedulingGates"):
            return
        spec = {k: v for k, v in pod["spec"].items() if k != "schedulingGates"}
        admitted = {**pod, "metadata": dict(pod["metadata"]), "spec": spec}
        self.status.store.put("pods", admitted, "MODIFIED")
        self.status.store.lifecycle(admitted, "admitted")

    def _target(self, run: PodRun, reason: str, message: str) -> None:
        self.status.condition(run, "DisruptionTarget", True, reason, message)
        self.status.publish(run, f"disruption:{reason}")

    def _preempt(self, run: PodRun, pod: Obj) -> None:
        self._target(
            run, "PreemptionByScheduler", "default-scheduler: preempting to accommodate a higher priority pod"
        )
        node = run.node.spec.name if run.node else "fake-node-1"
        self.status.event(
            run,
            "Preempted",
            f"Preempted by pod {uuid.uuid4()} on node {node}",
            component="default-scheduler",
        )
        self.status.store.lifecycle(pod, "preempted")
        self._delete(run)

    def _delete(self, run: PodRun) -> None:
        """A graceful deletion with the pod's own grace period, marked through the pod strategy."""
        current = self.status.pod(run)
        if current is not None:
            pod_strategy.mark_deleted(self.status.store, current, pod_strategy.spec_grace(current))

    def _evicted(self, run: PodRun) -> None:
        self.kubelet.fail_pod(run, "Evicted", "The pod was evicted through the Eviction API.", "evicted")
