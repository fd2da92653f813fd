"""The node components' private view of the cluster: nodes, and each pod's and container's run.

The API objects are what clients see; these records are what the scheduler, the kubelet and the
node controllers know and act on. Every component mutates a ``PodRun`` and then publishes it
into the pod object through the status manager (``controllers/status.py``).
"""

from __future__ import annotations

import asyncio
import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_k8s_retry_testing.controllers.registry import normalize_image
from airflow_k8s_retry_testing.scenario import ImageBehaviour, NodeSpec, RunSpec, Scenario, parse_quantity
from airflow_k8s_retry_testing.store import Obj, now_iso

if TYPE_CHECKING:
    from airflow_k8s_retry_testing.timers import Handle

#: The cncf provider's XCom sidecar: it sleeps until killed through exec, and traps SIGINT.
SIDECAR = "airflow-xcom-sidecar"
XCOM_PATH = "/airflow/xcom/return.json"

TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass
class Node:
    spec: NodeSpec
    cpu_used: float = 0.0
    memory_used: float = 0.0
    pods: int = 0
    images: set[str] = field(default_factory=set)

    def fits(self, cpu: float, memory: float, selector: Mapping[str, str] | None = None) -> list[str]:
        """Reasons it does not fit (empty when it fits)."""
        if selector:
            labels = self.spec.all_labels()
            if any(labels.get(k) != v for k, v in selector.items()):
                return ["node(s) didn't match Pod's node affinity/selector"]
        reasons = []
        if self.cpu_used + cpu > self.spec.cpu:
            reasons.append("Insufficient cpu")
        if self.memory_used + memory > self.spec.memory:
            reasons.append("Insufficient memory")
        if self.pods + 1 > self.spec.pods:
            reasons.append("Too many pods")
        return reasons


@dataclass
class ContainerRun:
    name: str
    image: str
    init: bool
    spec: Obj
    run: RunSpec
    state: Obj = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: Obj = field(default_factory=dict)
    restart_count: int = 0
    image_id: str = ""
    container_id: str = ""
    ready: bool = False
    started: bool = False
    pull_failures: int = 0
    crash_backoff: float = 10.0
    logs: list[tuple[float, str]] = field(default_factory=list)
    previous_logs: list[tuple[float, str]] | None = None  # the run before the last restart
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    xcom: Any = None

    @property
    def running(self) -> bool:
        return "running" in self.state

    @property
    def terminated(self) -> bool:
        return "terminated" in self.state

    def touch(self) -> None:
        """Wake log followers and exec sessions waiting on this container."""
        self.changed.set()
        self.changed = asyncio.Event()

    def kill(self, exit_code: int) -> bool:
        """Stop the container by a signal (143 SIGTERM, 137 SIGKILL) if it runs; True if it did."""
        if not self.running:
            return False
        self.state = {
            "terminated": {
                "exitCode": exit_code,
                "reason": "Error",
                "startedAt": self.state["running"]["startedAt"],
                "finishedAt": now_iso(),
                "containerID": self.container_id,
            }
        }
        self.ready = False
        self.touch()
        return True

    def lost(self, message: str) -> None:
        """The container cannot be found any more: the terminated state the kubelet then reports."""
        self.state = {
            "terminated": {
                "exitCode": 137,
                "reason": "ContainerStatusUnknown",
                "message": message,
                "startedAt": None,
                "finishedAt": None,
            }
        }

    def status(self) -> Obj:
        out: Obj = {
            "name": self.name,
            "image": normalize_image(self.image) if self.image_id else self.image,
            "imageID": self.image_id,
            "ready": self.ready,
            "restartCount": self.restart_count,
            "started": self.started,
            "state": copy.deepcopy(self.state),
            "lastState": copy.deepcopy(self.last_state),
        }
        if self.container_id:
            out["containerID"] = self.container_id
        return out


@dataclass
class PodRun:
    """The node components' private view of one pod."""

    namespace: str
    name: str
    uid: str
    cpu: float
    memory: float
    init: list[ContainerRun]
    main: list[ContainerRun]
    node: Node | None = None
    timers: list[Handle] = field(default_factory=list)
    frozen: bool = False  # node lost: the kubelet no longer reports
    conditions: dict[str, Obj] = field(default_factory=dict)
    phase: str = "Pending"
    reason: str | None = None
    message: str | None = None
    start_time: str | None = None
    init_done: int = 0
    gone: bool = False
    deleting: bool = False
    stopped: bool = False  # containers stopped by deletion
    unschedulable_since: float | None = None
    released: bool = False
    node_selector: dict[str, str] = field(default_factory=dict)
    active_deadline: float | None = None

    @property
    def containers(self) -> list[ContainerRun]:
        return self.init + self.main

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def started_on_node(self) -> bool:
        """Bound, started and not yet terminal: deleting it means stopping containers first."""
        return self.node is not None and bool(self.start_time) and not self.terminal

    def container(self, name: str) -> ContainerRun | None:
        for c in self.containers:
            if c.name == name:
                return c
        return None

    def cancel_timers(self) -> None:
        for timer in self.timers:
            timer.cancel()
        self.timers.clear()


def pod_requests(containers: list[Obj]) -> tuple[float, float]:
    """The (cpu, memory) a group of containers requests (limits stand in for missing requests)."""
    cpu = memory = 0.0
    for c in containers:
        req = ((c.get("resources") or {}).get("requests")) or ((c.get("resources") or {}).get("limits")) or {}
        if "cpu" in req:
            cpu += parse_quantity(req["cpu"], "cpu")
        if "memory" in req:
            memory += parse_quantity(req["memory"], "memory")
    return cpu, memory


def memory_limit(container: Obj) -> float:
    """A container's memory limit in bytes (infinite when it sets none)."""
    limit = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    return parse_quantity(limit, "memory") if limit is not None else math.inf


def new_run(pod: Obj, scenario: Scenario) -> PodRun:
    """The run of a pod just created: its containers as the scenario scripts their images."""
    spec = pod["spec"]
    meta = pod["metadata"]

    def make(c: Obj, init: bool) -> ContainerRun:
        behaviour = scenario.image(c.get("image", "")) or ImageBehaviour()
        return ContainerRun(
            name=c["name"],
            image=c.get("image", ""),
            init=init,
            spec=c,
            run=behaviour.run,
            xcom=behaviour.run.xcom,
        )

    init = [make(c, True) for c in spec.get("initContainers") or []]
    main = [make(c, False) for c in spec.get("containers") or []]
    cpu, memory = pod_requests(spec.get("containers") or [])
    init_cpu, init_memory = pod_requests(spec.get("initContainers") or [])
    run = PodRun(
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta["uid"],
        cpu=max(cpu, init_cpu),
        memory=max(memory, init_memory),
        init=init,
        main=main,
    )
    for c in main:
        c.state = {"waiting": {"reason": "PodInitializing" if init else "ContainerCreating"}}
    for c in init:
        c.state = {"waiting": {"reason": "PodInitializing"}}
    run.node_selector = {str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()}
    deadline = spec.get("activeDeadlineSeconds")
    run.active_deadline = float(deadline) if isinstance(deadline, int | float) and deadline > 0 else None
    return run
