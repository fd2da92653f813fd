"""The node side of the cluster wired together: scheduler, kubelet, node lifecycle, disruptions.

The API server tells this facade what a real control plane's components would learn from their
watches (a pod was created, marked for deletion, evicted, lost a finalizer); ``FakeCluster``
reaches the scripted disruptions and the runs through it. Every component shares one
``StatusManager`` and one timer heap.
"""

from __future__ import annotations

from airflow_k8s_retry_testing.controllers.disruptions import Disruptions
from airflow_k8s_retry_testing.controllers.kubelet import Kubelet
from airflow_k8s_retry_testing.controllers.nodes import NodeLifecycle
from airflow_k8s_retry_testing.controllers.runs import Node, PodRun, new_run
from airflow_k8s_retry_testing.controllers.scheduler import Scheduler
from airflow_k8s_retry_testing.controllers.status import StatusManager
from airflow_k8s_retry_testing.controllers.timers import TimerHeap
from airflow_k8s_retry_testing.scenario import Disruption, Scenario
from airflow_k8s_retry_testing.store import Obj, Store

SCHEDULE_DELAY = 0.02  # simulated seconds from creation to the scheduler's first look


class Components:
    """The scheduler, the kubelet and the node controllers of one simulated cluster."""

    def __init__(self, store: Store, scenario: Scenario, clock: TimerHeap) -> None:
        self.status = StatusManager(store, scenario, clock)
        self.scheduler = Scheduler(self.status, on_bound=self._bound)
        self.kubelet = Kubelet(self.status, self.scheduler)
        self.node_lifecycle = NodeLifecycle(self.status, self.kubelet)
        self.disruptions = Disruptions(self.status, self.kubelet, self.node_lifecycle)

    def _bound(self, run: PodRun) -> None:
        self.kubelet.start_pod(run)

    @property
    def scenario(self) -> Scenario:
        return self.status.scenario

    @scenario.setter
    def scenario(self, scenario: Scenario) -> None:
        self.status.scenario = scenario

    @property
    def runs(self) -> dict[str, PodRun]:
        return self.status.runs

    @property
    def nodes(self) -> list[Node]:
        return self.scheduler.nodes

    def run_of(self, pod: Obj) -> PodRun | None:
        return self.status.runs.get(pod["metadata"]["uid"])

    # -- what the API server reports ------------------------------------------------------------

    def admit(self, pod: Obj) -> None:
        """A pod was created: plan its life."""
        run = new_run(pod, self.status.scenario)
        self.status.runs[run.uid] = run
        self.status.store.lifecycle(pod, "created", labels=dict(pod["metadata"].get("labels") or {}))
        self.disruptions.plan(run)
        self.status.after(run, SCHEDULE_DELAY, self.scheduler.schedule, run)

    def delete(self, pod: Obj, grace: int) -> None:
        """A pod was marked for deletion with this grace period (0: removed at once)."""
        self.kubelet.delete(pod, grace)

    def gates_lifted(self, pod: Obj) -> None:
        """The pod's last scheduling gate was removed: the scheduler considers it now."""
        run = self.run_of(pod)
        if run is not None:
            self.status.after(run, SCHEDULE_DELAY, self.scheduler.schedule, run)

    def finalizers_changed(self, pod: Obj) -> None:
        self.kubelet.finalizers_changed(pod)

    def evict(self, pod: Obj, grace: int) -> None:
        """The Eviction API was called for this pod."""
        run = self.run_of(pod)
        if run is not None:
            self.disruptions.evict_via_api(run, grace)

    # -- what FakeCluster does -------------------------------------------------------------------

    def disrupt(self, pod: Obj, kind: str) -> None:
        self.disruptions.disrupt(self.status.runs[pod["metadata"]["uid"]], kind)

    def exit_container(self, pod: Obj, container: str | None, exit_code: int) -> bool:
        """End a running main container now (``None``: the first); False if none was running."""
        run = self.status.runs[pod["metadata"]["uid"]]
        for c in run.main:
            if c.running and (container is None or c.name == container):
                self.kubelet.container_exited(run, c, exit_code)
                return True
        return False

    def add_disruption(self, scenario: Scenario, disruption: Disruption) -> None:
        """``scenario`` (now in force) ends with ``disruption``: it may hit ``count`` more pods."""
        self.status.scenario = scenario
        self.disruptions.budget[len(scenario.disruptions) - 1] = disruption.count
