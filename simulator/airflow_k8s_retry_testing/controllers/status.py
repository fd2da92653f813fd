"""The status manager the node components share: timers, conditions, Events and status writes.

As the kubelet's status manager does, it turns a component's private ``PodRun`` into the pod
object's ``status`` (one MODIFIED per change), keeping the conditions others wrote (the Eviction
API's ``DisruptionTarget``), and records Events with the component's name as their source. The
scheduler, the kubelet and the node controllers all write through it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_k8s_retry_testing.controllers.runs import ContainerRun, PodRun
from airflow_k8s_retry_testing.scenario import Scenario
from airflow_k8s_retry_testing.store import Obj, Store, now_iso
from airflow_k8s_retry_testing.timers import TimerHeap

#: The order the kubelet lists a pod's conditions in.
CONDITION_ORDER = (
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
    "DisruptionTarget",
)


class StatusManager:
    """What every node component needs: the store, the scenario, the timers and the runs."""

    def __init__(self, store: Store, scenario: Scenario, clock: TimerHeap) -> None:
        self.store = store
        self.scenario = scenario
        self.clock = clock
        self.runs: dict[str, PodRun] = {}  # uid -> run

    def pod(self, run: PodRun) -> Obj | None:
        return self.store.get("pods", run.namespace, run.name)

    def after(self, run: PodRun, sim_seconds: float, fn: Callable[..., None], *args: Any) -> None:
        """Call ``fn`` later unless the pod is gone or its node lost meanwhile."""

        def guarded() -> None:
            if not run.gone and not run.frozen:
                fn(*args)

        run.timers.append(self.clock.later(sim_seconds, guarded))
        if len(run.timers) > 64:
            run.timers = [t for t in run.timers if not t.cancelled() and t.when() >= self.clock.loop.time()]

    def event(
        self,
        run: PodRun,
        reason: str,
        message: str,
        *,
        warning: bool = False,
        component: str = "kubelet",
        container: ContainerRun | None = None,
    ) -> None:
        pod = self.pod(run)
        if pod is None:
            return
        field_path = None
        if container is not None:
            kind = "initContainers" if container.init else "containers"
            field_path = f"spec.{kind}{{{container.name}}}"
        host = run.node.spec.name if run.node is not None and component == "kubelet" else None
        self.store.record_event(
            pod,
            reason,
            message,
            type_="Warning" if warning else "Normal",
            component=component,
            host=host,
            field_path=field_path,
        )

    @staticmethod
    def condition(
        run: PodRun, type_: str, status: bool, reason: str | None = None, message: str | None = None
    ) -> None:
        value = "True" if status else "False"
        current = run.conditions.get(type_)
        if current is not None and current["status"] == value and current.get("reason") == reason:
            if message is not None and current.get("message") != message:
                run.conditions[type_] = {**current, "message": message}
            return
        cond: Obj = {"type": type_, "status": value, "lastProbeTime": None, "lastTransitionTime": now_iso()}
        if reason:
            cond["reason"] = reason
        if message:
            cond["message"] = message
        run.conditions[type_] = cond

    def not_ready(self, run: PodRun, reason: str = "ContainersNotReady") -> None:
        unready = " ".join(c.name for c in run.main if not c.ready)
        message = f"containers with unready status: [{unready}]" if reason == "ContainersNotReady" else None
        self.condition(run, "Ready", False, reason, message)
        self.condition(run, "ContainersReady", False, reason, message)

    def set_phase(self, run: PodRun, phase: str) -> list[str]:
        if run.phase == phase:
            return []
        run.phase = phase
        if phase in ("Succeeded", "Failed"):
            # The kubelet tears the sandbox down once the pod is terminal.
            self.condition(run, "PodReadyToStartContainers", False)
        return [f"phase:{phase}"]

    def publish(self, run: PodRun, *changes: str, **extra: Any) -> None:
        """Write the run's state into the pod object (one MODIFIED) and audit the changes."""
        pod = self.pod(run)
        if pod is None or pod["metadata"]["uid"] != run.uid:
            return
        # A new version shares the unchanged parts with the old one: stored objects are never
        # mutated in place (patches build new dicts), so only the changed levels are copied.
        pod = {**pod, "metadata": dict(pod["metadata"])}
        written = pod.get("status") or {}
        status = _status(run, written.get("conditions") or [])
        status["qosClass"] = written.get("qosClass", "BestEffort")
        pod["status"] = status
        if run.node is not None and pod["spec"].get("nodeName") != run.node.spec.name:
            pod["spec"] = {**pod["spec"], "nodeName": run.node.spec.name}
        self.store.put("pods", pod, "MODIFIED")
        for change in changes:
            self.store.lifecycle(pod, change, **extra)


def _status(run: PodRun, written: list[Obj]) -> Obj:
    """The pod's ``status`` as the kubelet reports it (the QoS class aside: admission set it), with
    the conditions of types the run does not know kept as ``written`` into the object by others."""
    conditions = {c["type"]: c for c in written if c.get("type") not in run.conditions}
    conditions.update(run.conditions)
    status: Obj = {"phase": run.phase}
    status["conditions"] = [conditions[t] for t in CONDITION_ORDER if t in conditions] + [
        c for t, c in conditions.items() if t not in CONDITION_ORDER
    ]
    if run.reason:
        status["reason"] = run.reason
    if run.message:
        status["message"] = run.message
    if run.node is not None and run.start_time:
        status["hostIP"] = "10.0.0.1"
        status["hostIPs"] = [{"ip": "10.0.0.1"}]
        ip = f"10.244.{int(run.uid[:2], 16)}.{int(run.uid[2:4], 16) % 250 + 2}"
        status["podIP"] = ip
        status["podIPs"] = [{"ip": ip}]
    if run.start_time:
        status["startTime"] = run.start_time
        if run.init:
            status["initContainerStatuses"] = [c.status() for c in run.init]
        status["containerStatuses"] = [c.status() for c in run.main]
    return status
