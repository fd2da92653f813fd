"""The node side of the cluster wired together: scheduler, kubelet, node lifecycle, disruptions.

The components learn what happens to pods from the store, as a real control plane's learn from
their watches: a pod created, its scheduling gates lifted, marked for deletion, changed
finalizers, gone. The API server knows
nothing of them. They act once the write that told them is done (on the cluster's timebase: on a
manual clock within the running advance, or on the loop's next turn), as a watch delivers after
the write; on a manual clock that takes no simulated time. ``FakeCluster`` reaches the scripted
disruptions and the runs through this facade. Every component shares one ``StatusManager`` and one
timer heap.
"""

from __future__ import annotations

import contextlib

from airflow_k8s_retry_testing.controllers.disruptions import Disruptions
from airflow_k8s_retry_testing.controllers.kubelet import Kubelet
from airflow_k8s_retry_testing.controllers.nodes import NodeLifecycle
from airflow_k8s_retry_testing.controllers.runs import Node, PodRun, new_run
from airflow_k8s_retry_testing.controllers.scheduler import Scheduler
from airflow_k8s_retry_testing.controllers.status import StatusManager
from airflow_k8s_retry_testing.scenario import Disruption, Scenario
from airflow_k8s_retry_testing.store import Obj, Store, WatchEvent
from airflow_k8s_retry_testing.timers import TimerHeap

SCHEDULE_DELAY = 0.02  # simulated seconds from creation to the scheduler's first look


class Components:
    """The scheduler, the kubelet and the node controllers of one simulated cluster."""

    def __init__(self, store: Store, scenario: Scenario, clock: TimerHeap) -> None:
        self.status = StatusManager(store, scenario, clock)
        self.scheduler = Scheduler(self.status, on_bound=self._bound)
        self.kubelet = Kubelet(self.status, self.scheduler)
        self.node_lifecycle = NodeLifecycle(self.status, self.kubelet)
        self.disruptions = Disruptions(self.status, self.kubelet, self.node_lifecycle)
        #: What the watch has told of each pod so far (by UID): marked for deletion, its finalizers.
        self._marked: set[str] = set()
        self._finalizers: dict[str, tuple[str, ...]] = {}
        self._gated: set[str] = set()
        store.listeners.append(self._changed)  # watch the store's pods from now on

    def stop(self) -> None:
        with contextlib.suppress(ValueError):
            self.status.store.listeners.remove(self._changed)

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

    # -- what the watch tells -------------------------------------------------------------------

    def _changed(self, event: WatchEvent) -> None:
        """Told of every change inside the store's write (``Store.listeners``): note what it says of
        a pod now, and act on it once the write is done."""
        if event.resource != "pods":
            return
        soon = self.status.clock.loop.call_soon
        if event.type == "DELETED":
            uid = event.obj()["metadata"]["uid"]
            self._marked.discard(uid)
            self._finalizers.pop(uid, None)
            self._gated.discard(uid)
            soon(self.kubelet.removed, uid)
            return
        # Read before any other write: the store holds this very version now.
        pod = self.status.store.get("pods", event.namespace, event.name)
        if pod is None:
            return
        if event.type == "ADDED":
            soon(self.admit, pod)
        if self._gates_lifted_now(pod, added=event.type == "ADDED"):
            soon(self.gates_lifted, pod)
        if self._marked_now(pod):
            soon(self.kubelet.delete, pod, int(pod["metadata"].get("deletionGracePeriodSeconds") or 0))
        if self._finalizers_changed_now(pod) and event.type == "MODIFIED":
            soon(self.kubelet.finalizers_changed, pod)

    def _gates_lifted_now(self, pod: Obj, *, added: bool) -> bool:
        uid, gated = pod["metadata"]["uid"], bool(pod["spec"].get("schedulingGates"))
        if added and gated:
            self._gated.add(uid)
        if gated or uid not in self._gated:
            return False
        self._gated.discard(uid)
        return True

    def _marked_now(self, pod: Obj) -> bool:
        uid = pod["metadata"]["uid"]
        if not pod["metadata"].get("deletionTimestamp") or uid in self._marked:
            return False
        self._marked.add(uid)
        return True

    def _finalizers_changed_now(self, pod: Obj) -> bool:
        uid, finalizers = pod["metadata"]["uid"], tuple(pod["metadata"].get("finalizers") or ())
        if finalizers == self._finalizers.get(uid, ()):
            return False
        if finalizers:
            self._finalizers[uid] = finalizers
        else:
            del self._finalizers[uid]
        return True

    def admit(self, pod: Obj) -> None:
        """A pod was created: plan its life."""
        run = new_run(pod, self.status.scenario)
        self.status.runs[run.uid] = run
        self.disruptions.plan(run)
        self.status.after(run, SCHEDULE_DELAY, self.scheduler.schedule, run)

    def gates_lifted(self, pod: Obj) -> None:
        """The pod's last scheduling gate was removed: the scheduler considers it now."""
        run = self.run_of(pod)
        if run is not None:
            self.status.after(run, SCHEDULE_DELAY, self.scheduler.schedule, run)

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
