"""The scheduler and the cluster autoscaler: which node a pod runs on, and when there is none.

Like kube-scheduler, it leaves a pod with scheduling gates alone until the last is lifted, binds a
pod to the first node it fits (resources, pod count, node selector) or marks it
``PodScheduled=False/Unschedulable`` with the scheduler's
``0/N nodes are available: ...`` message and retries every 10 simulated seconds. With a scenario
``autoscaler``, an unschedulable pod that a new node would fit triggers a scale-up, announced by
the cluster-autoscaler's ``TriggeredScaleUp`` Event, and the pods waiting are retried once the
node is there.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from airflow_k8s_retry_testing.apiserver.pods import SCHEDULING_GATED_MESSAGE
from airflow_k8s_retry_testing.controllers.runs import Node, PodRun
from airflow_k8s_retry_testing.controllers.status import StatusManager
from airflow_k8s_retry_testing.scenario import NodeSpec

# Scripted timings, in simulated seconds.
KUBELET_ADMIT_DELAY = 0.05
RESCHEDULE_EVERY = 10.0


class Scheduler:
    """Binds pods to nodes and keeps the nodes' resource accounting."""

    def __init__(self, status: StatusManager, on_bound: Callable[[PodRun], None]) -> None:
        self.status = status
        self.on_bound = on_bound  # the kubelet starting the pod on its node
        self.nodes: list[Node] = [Node(spec) for spec in status.scenario.nodes]
        self.unschedulable: dict[str, PodRun] = {}
        self.scale_ups_pending = 0
        self.autoscaled = 0

    def schedule(self, run: PodRun) -> None:
        if run.node is not None or run.deleting:
            return
        pod = self.status.pod(run)
        if pod is not None and pod["spec"].get("schedulingGates"):
            # Like kube-scheduler, skip a gated pod until its last gate is lifted (gates_lifted).
            self.status.condition(run, "PodScheduled", False, "SchedulingGated", SCHEDULING_GATED_MESSAGE)
            return
        reasons: dict[str, int] = {}
        for node in self.nodes:
            why = node.fits(run.cpu, run.memory, run.node_selector)
            if not why:
                self.bind(run, node)
                return
            for r in why:
                reasons[r] = reasons.get(r, 0) + 1
        n = len(self.nodes)
        detail = ", ".join(f"{count} {r}" for r, count in sorted(reasons.items()))
        message = (
            f"0/{n} nodes are available: {detail}. preemption: 0/{n} nodes are available: "
            f"{n} No preemption victims found for incoming pod."
        )
        first = run.unschedulable_since is None
        if first:
            run.unschedulable_since = time.time()
        status = self.status
        status.condition(run, "PodScheduled", False, "Unschedulable", message)
        self.unschedulable[run.uid] = run
        status.event(run, "FailedScheduling", message, warning=True, component="default-scheduler")
        status.publish(run, "unschedulable" if first else "unschedulable:retry", message=message)
        self.maybe_scale_up(run)
        status.after(run, RESCHEDULE_EVERY, self.schedule, run)

    def maybe_scale_up(self, run: PodRun) -> None:
        autoscaler = self.status.scenario.autoscaler
        if autoscaler is None:
            return
        template = Node(autoscaler.node)
        if template.fits(run.cpu, run.memory, run.node_selector):
            self.status.event(
                run,
                "NotTriggerScaleUp",
                "pod didn't trigger scale-up: 1 node(s) didn't have enough resources in node group",
                component="cluster-autoscaler",
            )
            return
        if self.scale_ups_pending or self.autoscaled >= autoscaler.max_nodes:
            return
        self.scale_ups_pending += 1
        before = self.autoscaled
        self.status.event(
            run,
            "TriggeredScaleUp",
            f"pod triggered scale-up: [{{autoscaled-pool {before}->{before + 1} "
            f"(max: {autoscaler.max_nodes})}}]",
            component="cluster-autoscaler",
        )
        self.status.clock.later(autoscaler.scale_up_after_seconds, self._add_autoscaled_node)

    def _add_autoscaled_node(self) -> None:
        autoscaler = self.status.scenario.autoscaler
        assert autoscaler is not None
        self.scale_ups_pending -= 1
        self.autoscaled += 1
        spec = autoscaler.node
        self.nodes.append(
            Node(
                NodeSpec(
                    name=f"{spec.name}-{self.autoscaled}",
                    cpu=spec.cpu,
                    memory=spec.memory,
                    pods=spec.pods,
                    labels=spec.labels,
                )
            )
        )
        self.retry_unschedulable()

    def retry_unschedulable(self) -> None:
        for run in list(self.unschedulable.values()):
            if run.gone or run.node is not None:
                self.unschedulable.pop(run.uid, None)
                continue
            self.schedule(run)

    def bind(self, run: PodRun, node: Node) -> None:
        self.unschedulable.pop(run.uid, None)
        run.node = node
        node.cpu_used += run.cpu
        node.memory_used += run.memory
        node.pods += 1
        status = self.status
        status.condition(run, "PodScheduled", True)
        status.event(
            run,
            "Scheduled",
            f"Successfully assigned {run.namespace}/{run.name} to {node.spec.name}",
            component="default-scheduler",
        )
        status.publish(run, "scheduled", node=node.spec.name)
        status.after(run, KUBELET_ADMIT_DELAY, self.on_bound, run)

    def release(self, run: PodRun) -> None:
        """The pod no longer holds its node's resources (terminal or gone)."""
        if run.node is None or run.released:
            return
        run.released = True
        run.node.cpu_used -= run.cpu
        run.node.memory_used -= run.memory
        run.node.pods -= 1
        if self.unschedulable:
            self.status.clock.later(0, self.retry_unschedulable)

    def forget(self, run: PodRun) -> None:
        """The pod is gone: give back its node's share and stop retrying it."""
        self.release(run)
        self.unschedulable.pop(run.uid, None)
