"""The scripted scheduler, kubelet and node controllers that move simulated pods through their lives.

Everything is driven by one clock: each step of a pod's life is a timer on the event loop's timer
heap (never a task or a loop per pod), so thousands of pods cost only their pending timers. All
scripted durations are in simulated seconds and multiplied by the scenario's ``time_scale``.

The statuses, conditions, events and messages follow what a containerd-based kubelet and the
control plane write, since the classifier under test reads exactly those strings.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import re
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_k8s_retry.testing.scenario import (
    Disruption,
    ImageBehaviour,
    NodeSpec,
    RunSpec,
    Scenario,
    parse_quantity,
)
from airflow_k8s_retry.testing.store import Obj, Store, now_iso

SIDECAR = "airflow-xcom-sidecar"
XCOM_PATH = "/airflow/xcom/return.json"

# Scripted timings, in simulated seconds.
SCHEDULE_DELAY = 0.02
KUBELET_ADMIT_DELAY = 0.05
PULL_SECONDS = 0.2
PULL_FAIL_SECONDS = 0.3
BACKOFF_TRANSITION = 1.0
PULL_BACKOFF_START = 10.0
PULL_BACKOFF_CAP = 300.0
CONFIG_RETRY = 10.0
MOUNT_RETRY_START = 2.0
MOUNT_RETRY_CAP = 120.0
STOP_SECONDS = 0.5
NODE_NOT_READY_AFTER = 40.0
TAINT_EVICTION_AFTER = 300.0
POD_GC_AFTER = 40.0
RESCHEDULE_EVERY = 10.0

_IMAGE_REF = re.compile(
    r"^(?:(?:[a-zA-Z0-9-]+\.)*[a-zA-Z0-9-]+(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"
)


def normalize_image(ref: str) -> str:
    """``busybox`` -> ``docker.io/library/busybox:latest``, as containerd names images."""
    name, _, digest = ref.partition("@")
    first = name.split("/", 1)[0]
    if "/" not in name:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    if not digest and ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return f"{name}@{digest}" if digest else name


def pull_error(behaviour: str, ref: str) -> tuple[str, str]:
    """(gRPC-wrapped message, short cause) the way containerd reports a failed pull."""
    full = normalize_image(ref)
    repo = full.split("/", 1)[1].rsplit(":", 1)[0] if "/" in full else full
    if behaviour == "not_found":
        msg = (
            f'failed to pull and unpack image "{full}": failed to resolve reference "{full}": '
            f"{full}: not found"
        )
        return f"rpc error: code = NotFound desc = {msg}", msg
    if behaviour == "unauthorized":
        msg = (
            f'failed to pull and unpack image "{full}": failed to resolve reference "{full}": '
            f"failed to authorize: failed to fetch oauth token: unexpected status from GET request to "
            f"https://auth.docker.io/token?scope=repository%3A{repo.replace('/', '%2F')}%3Apull"
            f"&service=registry.docker.io: 401 Unauthorized"
        )
        return f"rpc error: code = Unknown desc = {msg}", msg
    digest = hashlib.sha256(full.encode()).hexdigest()
    msg = (
        f'failed to pull and unpack image "{full}": failed to copy: httpReadSeeker: failed open: '
        f"unexpected status code https://registry-1.docker.io/v2/{repo}/manifests/sha256:{digest}: "
        f"429 Too Many Requests - Server message: toomanyrequests: You have reached your pull rate "
        f"limit. You may increase the limit by authenticating and upgrading: "
        f"https://www.docker.com/increase-rate-limit"
    )
    return f"rpc error: code = Unknown desc = {msg}", msg


class Clock:
    """Simulated time on the loop's timer heap; records how late each timer fired."""

    def __init__(self, loop: asyncio.AbstractEventLoop, scale: float) -> None:
        self.loop = loop
        self.scale = scale
        self.lags: deque[float] = deque(maxlen=200_000)

    def later(self, sim_seconds: float, fn: Callable[..., None], *args: Any) -> asyncio.TimerHandle:
        due = self.loop.time() + max(0.0, sim_seconds) * self.scale
        return self.loop.call_at(due, self._fire, due, fn, args)

    def _fire(self, due: float, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        self.lags.append(self.loop.time() - due)
        fn(*args)


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
    """The kubelet's private view of one pod."""

    namespace: str
    name: str
    uid: str
    cpu: float
    memory: float
    init: list[ContainerRun]
    main: list[ContainerRun]
    node: Node | None = None
    timers: list[asyncio.TimerHandle] = field(default_factory=list)
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

    def container(self, name: str) -> ContainerRun | None:
        for c in self.containers:
            if c.name == name:
                return c
        return None

    def cancel_timers(self) -> None:
        for timer in self.timers:
            timer.cancel()
        self.timers.clear()


def _requests(containers: list[Obj]) -> tuple[float, float]:
    cpu = memory = 0.0
    for c in containers:
        req = ((c.get("resources") or {}).get("requests")) or ((c.get("resources") or {}).get("limits")) or {}
        if "cpu" in req:
            cpu += parse_quantity(req["cpu"], "cpu")
        if "memory" in req:
            memory += parse_quantity(req["memory"], "memory")
    return cpu, memory


class Kubelet:
    """Scheduler, kubelet, node controller, taint manager and pod GC in one scripted component."""

    def __init__(self, store: Store, scenario: Scenario, clock: Clock) -> None:
        self.store = store
        self.scenario = scenario
        self.clock = clock
        self.nodes: list[Node] = [Node(spec) for spec in scenario.nodes]
        self.runs: dict[str, PodRun] = {}  # uid -> run
        self.first_pull: dict[str, float] = {}  # normalized image -> loop time of first attempt
        self.disruption_budget: dict[int, int | None] = {
            i: d.count for i, d in enumerate(scenario.disruptions)
        }
        self.unschedulable: dict[str, PodRun] = {}
        self.scale_ups_pending = 0
        self.autoscaled = 0

    # -- helpers --------------------------------------------------------------------------------

    def pod(self, run: PodRun) -> Obj | None:
        return self.store.get("pods", run.namespace, run.name)

    def after(self, run: PodRun, sim_seconds: float, fn: Callable[..., None], *args: Any) -> None:
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

    def condition(
        self, run: PodRun, type_: str, status: bool, reason: str | None = None, message: str | None = None
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

    def publish(self, run: PodRun, *changes: str, **extra: Any) -> None:
        """Write the run's state into the pod object (one MODIFIED) and audit the changes."""
        pod = self.pod(run)
        if pod is None or pod["metadata"]["uid"] != run.uid:
            return
        # A new version shares the unchanged parts with the old one: stored objects are never
        # mutated in place (patches build new dicts), so only the changed levels are copied.
        pod = {**pod, "metadata": dict(pod["metadata"])}
        status: Obj = {"phase": run.phase}
        order = [
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled",
            "DisruptionTarget",
        ]
        status["conditions"] = [run.conditions[t] for t in order if t in run.conditions]
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
        status["qosClass"] = (pod.get("status") or {}).get("qosClass", "BestEffort")
        pod["status"] = status
        if run.node is not None and pod["spec"].get("nodeName") != run.node.spec.name:
            pod["spec"] = {**pod["spec"], "nodeName": run.node.spec.name}
        self.store.put("pods", pod, "MODIFIED")
        for change in changes:
            self.store.lifecycle(pod, change, **extra)

    def set_phase(self, run: PodRun, phase: str) -> list[str]:
        if run.phase == phase:
            return []
        run.phase = phase
        return [f"phase:{phase}"]

    # -- creation and scheduling -----------------------------------------------------------------

    def admit(self, pod: Obj) -> None:
        """A pod was created: plan its life."""
        spec = pod["spec"]
        meta = pod["metadata"]

        def make(c: Obj, init: bool) -> ContainerRun:
            behaviour = self.scenario.image(c.get("image", "")) or ImageBehaviour()
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
        cpu, memory = _requests(spec.get("containers") or [])
        init_cpu, init_memory = _requests(spec.get("initContainers") or [])
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
        self.runs[run.uid] = run
        self.store.lifecycle(pod, "created", labels=dict(meta.get("labels") or {}))
        for index, disruption in enumerate(self.scenario.disruptions):
            if not run.name.startswith(disruption.pod_name_prefix):
                continue
            budget = self.disruption_budget[index]
            if budget is not None:
                if budget <= 0:
                    continue
                self.disruption_budget[index] = budget - 1
            self.after(run, disruption.after_seconds, self._scheduled_disruption, run, disruption)
        self.after(run, SCHEDULE_DELAY, self.schedule, run)

    def _scheduled_disruption(self, run: PodRun, disruption: Disruption) -> None:
        self.disrupt(run, disruption.kind)

    def schedule(self, run: PodRun) -> None:
        if run.node is not None or run.deleting:
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
        self.condition(run, "PodScheduled", False, "Unschedulable", message)
        self.unschedulable[run.uid] = run
        self.event(run, "FailedScheduling", message, warning=True, component="default-scheduler")
        self.publish(run, "unschedulable" if first else "unschedulable:retry", message=message)
        self.maybe_scale_up(run)
        self.after(run, RESCHEDULE_EVERY, self.schedule, run)

    def maybe_scale_up(self, run: PodRun) -> None:
        autoscaler = self.scenario.autoscaler
        if autoscaler is None:
            return
        template = Node(autoscaler.node)
        if template.fits(run.cpu, run.memory, run.node_selector):
            self.event(
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
        self.event(
            run,
            "TriggeredScaleUp",
            f"pod triggered scale-up: [{{autoscaled-pool {before}->{before + 1} "
            f"(max: {autoscaler.max_nodes})}}]",
            component="cluster-autoscaler",
        )
        self.clock.later(autoscaler.scale_up_after_seconds, self._add_autoscaled_node)

    def _add_autoscaled_node(self) -> None:
        assert self.scenario.autoscaler is not None
        self.scale_ups_pending -= 1
        self.autoscaled += 1
        spec = self.scenario.autoscaler.node
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
        self.condition(run, "PodScheduled", True)
        self.event(
            run,
            "Scheduled",
            f"Successfully assigned {run.namespace}/{run.name} to {node.spec.name}",
            component="default-scheduler",
        )
        self.publish(run, "scheduled", node=node.spec.name)
        self.after(run, KUBELET_ADMIT_DELAY, self.start_pod, run)

    def release(self, run: PodRun) -> None:
        if run.node is None or run.released:
            return
        run.released = True
        run.node.cpu_used -= run.cpu
        run.node.memory_used -= run.memory
        run.node.pods -= 1
        if self.unschedulable:
            self.clock.later(0, self.retry_unschedulable)

    # -- kubelet ------------------------------------------------------------------------------

    def start_pod(self, run: PodRun) -> None:
        if run.deleting:
            return
        run.start_time = now_iso()
        self.condition(run, "PodReadyToStartContainers", False)
        if run.init:
            names = " ".join(c.name for c in run.init)
            self.condition(
                run,
                "Initialized",
                False,
                "ContainersNotInitialized",
                f"containers with incomplete status: [{names}]",
            )
        else:
            self.condition(run, "Initialized", True)
        self.not_ready(run)
        self.publish(run, "waiting:ContainerCreating" if not run.init else "waiting:PodInitializing")
        if run.active_deadline is not None:
            self.after(run, run.active_deadline, self.deadline_exceeded, run)
        self.check_volumes(run, MOUNT_RETRY_START)

    def deadline_exceeded(self, run: PodRun) -> None:
        """``activeDeadlineSeconds`` passed since startTime: the kubelet kills the pod and fails it."""
        if run.phase in ("Succeeded", "Failed") or run.deleting:
            return
        self.fail_pod(
            run,
            "DeadlineExceeded",
            "Pod was active on the node longer than the specified deadline",
            "deadline_exceeded",
        )

    def fail_pod(self, run: PodRun, reason: str, message: str, change: str) -> None:
        """The kubelet kills every container and fails the pod with a status reason and an event."""
        for c in run.containers:
            c.kill(137)
        run.reason = reason
        run.message = message
        changes = self.set_phase(run, "Failed")
        self.not_ready(run, "PodFailed")
        self.release(run)
        self.event(run, reason, message, warning=True)
        run.cancel_timers()
        self.publish(run, change, *changes)

    def not_ready(self, run: PodRun, reason: str = "ContainersNotReady") -> None:
        unready = " ".join(c.name for c in run.main if not c.ready)
        message = f"containers with unready status: [{unready}]" if reason == "ContainersNotReady" else None
        self.condition(run, "Ready", False, reason, message)
        self.condition(run, "ContainersReady", False, reason, message)

    def missing_volume(self, run: PodRun) -> tuple[str, str] | None:
        pod = self.pod(run)
        if pod is None:
            return None
        for volume in pod["spec"].get("volumes") or []:
            sources: list[tuple[str, Obj]] = []
            if "secret" in volume:
                sources.append(("secret", volume["secret"]))
            if "configMap" in volume:
                sources.append(("configMap", volume["configMap"]))
            for proj in (volume.get("projected") or {}).get("sources") or []:
                for kind in ("secret", "configMap"):
                    if kind in proj:
                        sources.append((kind, proj[kind]))
            for kind, src in sources:
                if src.get("optional"):
                    continue
                name = src.get("secretName") if kind == "secret" and "secretName" in src else src.get("name")
                resource = "secrets" if kind == "secret" else "configmaps"
                if self.store.get(resource, run.namespace, name or "") is None:
                    what = "secret" if kind == "secret" else "configmap"
                    return volume["name"], f'{what} "{name}" not found'
        return None

    def check_volumes(self, run: PodRun, retry: float) -> None:
        if run.deleting:
            return
        missing = self.missing_volume(run)
        if missing is not None:
            volume, why = missing
            self.event(
                run, "FailedMount", f'MountVolume.SetUp failed for volume "{volume}" : {why}', warning=True
            )
            self.store.lifecycle(
                self.pod(run) or {"metadata": {}}, "failed_mount", volume=volume, message=why
            )
            self.after(run, retry, self.check_volumes, run, min(retry * 2, MOUNT_RETRY_CAP))
            return
        self.condition(run, "PodReadyToStartContainers", True)
        if run.init:
            self.start_container(run, run.init[0])
        else:
            for c in run.main:
                self.start_container(run, c)
        self.publish(run)

    def start_container(self, run: PodRun, c: ContainerRun) -> None:
        """Pull (if needed), check config, create and start one container."""
        if run.deleting:
            return
        assert run.node is not None
        full = normalize_image(c.image)
        policy = c.spec.get("imagePullPolicy") or ("Always" if full.endswith(":latest") else "IfNotPresent")
        if not _IMAGE_REF.match(c.image):
            self.invalid_image(run, c)
            return
        behaviour = self.scenario.image(c.image) or ImageBehaviour()
        if behaviour.pull == "invalid_name":
            self.invalid_image(run, c)
            return
        if policy != "Always" and full in run.node.images:
            self.event(run, "Pulled", f'Container image "{c.image}" already present on machine', container=c)
            c.image_id = self.image_id(full)
            self.create_container(run, c)
            return
        self.event(run, "Pulling", f'Pulling image "{c.image}"', container=c)
        now = self.clock.loop.time()
        first = self.first_pull.setdefault(full, now)
        failing = behaviour.pull != "ok" and (
            behaviour.for_seconds is None or (now - first) < behaviour.for_seconds * self.clock.scale
        )
        if failing:
            self.after(run, PULL_FAIL_SECONDS, self.pull_failed, run, c, behaviour.pull)
        else:
            self.after(run, PULL_SECONDS, self.pulled, run, c)

    @staticmethod
    def image_id(full: str) -> str:
        return (
            f"{full.rsplit(':', 1)[0] if '@' not in full else full.split('@', maxsplit=1)[0]}@sha256:"
            + hashlib.sha256(full.encode()).hexdigest()
        )

    def invalid_image(self, run: PodRun, c: ContainerRun) -> None:
        message = (
            f'Failed to apply default image tag "{c.image}": '
            f'couldn\'t parse image name "{c.image}": invalid reference format'
        )
        c.state = {"waiting": {"reason": "InvalidImageName", "message": message}}
        self.event(run, "InspectFailed", message, warning=True, container=c)
        self.event(run, "Failed", "Error: InvalidImageName", warning=True, container=c)
        self.publish(run, "waiting:InvalidImageName", container=c.name)

    def pulled(self, run: PodRun, c: ContainerRun) -> None:
        assert run.node is not None
        full = normalize_image(c.image)
        run.node.images.add(full)
        c.image_id = self.image_id(full)
        took = int(PULL_SECONDS * 1000)
        size = int(hashlib.sha256(full.encode()).hexdigest()[:6], 16) * 7
        self.event(
            run,
            "Pulled",
            f'Successfully pulled image "{c.image}" in {took}ms ({took}ms including waiting). '
            f"Image size: {size} bytes.",
            container=c,
        )
        self.create_container(run, c)

    def pull_failed(self, run: PodRun, c: ContainerRun, behaviour: str) -> None:
        grpc, _ = pull_error(behaviour, c.image)
        c.pull_failures += 1
        c.state = {"waiting": {"reason": "ErrImagePull", "message": grpc}}
        self.event(run, "Failed", f'Failed to pull image "{c.image}": {grpc}', warning=True, container=c)
        self.event(run, "Failed", "Error: ErrImagePull", warning=True, container=c)
        self.publish(run, "waiting:ErrImagePull", container=c.name, message=grpc)
        backoff = min(PULL_BACKOFF_START * 2 ** (c.pull_failures - 1), PULL_BACKOFF_CAP)
        self.after(run, min(BACKOFF_TRANSITION, backoff / 2), self.pull_backoff, run, c, grpc)
        self.after(run, backoff, self.start_container, run, c)

    def pull_backoff(self, run: PodRun, c: ContainerRun, cause: str) -> None:
        event_message = f'Back-off pulling image "{c.image}"'
        message = event_message
        if self.scenario.minor_version >= 32:
            message += f": ErrImagePull: {cause}"  # 1.32+ kubelets keep the last pull error in the status
        c.state = {"waiting": {"reason": "ImagePullBackOff", "message": message}}
        self.event(run, "BackOff", event_message, container=c)
        self.event(run, "Failed", "Error: ImagePullBackOff", warning=True, container=c)
        self.publish(run, "waiting:ImagePullBackOff", container=c.name, message=message)

    def config_error(self, run: PodRun, c: ContainerRun) -> str | None:
        """Why the container's env cannot be built, in the kubelet's words, or None."""
        spec = c.spec
        for env in spec.get("env") or []:
            source = env.get("valueFrom") or {}
            for kind, resource, label in (
                ("secretKeyRef", "secrets", "Secret"),
                ("configMapKeyRef", "configmaps", "ConfigMap"),
            ):
                ref = source.get(kind)
                if not ref or ref.get("optional"):
                    continue
                obj = self.store.get(resource, run.namespace, ref.get("name", ""))
                if obj is None:
                    what = "secret" if resource == "secrets" else "configmap"
                    return f'{what} "{ref.get("name")}" not found'
                if not self.has_key(obj, ref.get("key", "")):
                    return f"couldn't find key {ref.get('key')} in {label} {run.namespace}/{ref.get('name')}"
        for env_from in spec.get("envFrom") or []:
            for kind, resource in (("secretRef", "secrets"), ("configMapRef", "configmaps")):
                ref = env_from.get(kind)
                if not ref or ref.get("optional"):
                    continue
                if self.store.get(resource, run.namespace, ref.get("name", "")) is None:
                    what = "secret" if resource == "secrets" else "configmap"
                    return f'{what} "{ref.get("name")}" not found'
        return None

    def has_key(self, obj: Mapping[str, Any], key: str) -> bool:
        meta = obj.get("metadata") or {}
        if (obj.get("kind", ""), meta.get("namespace", ""), meta.get("name", "")) in self.store.open_keys:
            return True
        return key in (obj.get("data") or {}) or key in (obj.get("stringData") or {})

    def create_container(self, run: PodRun, c: ContainerRun) -> None:
        if run.deleting:
            return
        error = self.config_error(run, c)
        if error is not None:
            first = c.state.get("waiting", {}).get("reason") != "CreateContainerConfigError"
            c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": error}}
            self.event(run, "Failed", f"Error: {error}", warning=True, container=c)
            if first:
                self.publish(run, "waiting:CreateContainerConfigError", container=c.name, message=error)
            self.after(run, CONFIG_RETRY, self.create_container, run, c)
            return
        c.container_id = "containerd://" + uuid.uuid4().hex + uuid.uuid4().hex
        self.event(run, "Created", f"Created container: {c.name}", container=c)
        self.event(run, "Started", f"Started container {c.name}", container=c)
        started = now_iso()
        c.state = {"running": {"startedAt": started}}
        c.started = True
        c.ready = not c.init
        c.touch()
        changes = [f"running:{c.name}"]
        if not c.init:
            if all(x.ready for x in run.main):
                self.condition(run, "Ready", True)
                self.condition(run, "ContainersReady", True)
            else:
                self.not_ready(run)
            changes += self.set_phase(run, "Running")
        self.publish(run, *changes, container=c.name)
        if c.name == SIDECAR and not c.init:
            return  # runs until killed through exec, like the real sidecar's sleep loop
        lines = c.run.log.splitlines()
        duration = c.run.duration_seconds
        if lines:
            groups = min(len(lines), 50)
            per = -(-len(lines) // groups)
            for g in range(groups):
                chunk = lines[g * per : (g + 1) * per]
                if chunk:
                    self.after(run, duration * g / groups, self.emit_log, c, chunk)
        self.after(
            run, duration, self.container_exited, run, c, c.run.exit_code, "OOMKilled" if c.run.oom else None
        )

    @staticmethod
    def emit_log(c: ContainerRun, lines: list[str]) -> None:
        now = time.time()
        c.logs.extend((now, line) for line in lines)
        c.touch()

    def container_exited(
        self,
        run: PodRun,
        c: ContainerRun,
        exit_code: int,
        reason: str | None = None,
        message: str | None = None,
    ) -> None:
        if not c.running:
            return
        started = c.state["running"]["startedAt"]
        reason = reason or ("Completed" if exit_code == 0 else "Error")
        terminated: Obj = {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": started,
            "finishedAt": now_iso(),
            "containerID": c.container_id,
        }
        if message:
            terminated["message"] = message
        c.state = {"terminated": terminated}
        c.ready = False
        c.touch()
        changes = [f"terminated:{reason}"]
        extra: dict[str, Any] = {"container": c.name, "exit_code": exit_code}
        pod = self.pod(run)
        restart_policy = (pod or {}).get("spec", {}).get("restartPolicy", "Always")
        if c.init:
            if exit_code == 0:
                run.init_done += 1
                if run.init_done < len(run.init):
                    self.publish(run, *changes, **extra)
                    self.start_container(run, run.init[run.init_done])
                    return
                self.condition(run, "Initialized", True)
                for m in run.main:
                    m.state = {"waiting": {"reason": "PodInitializing"}}
                self.publish(run, *changes, **extra)
                for m in run.main:
                    self.start_container(run, m)
                return
            if restart_policy == "Never":
                changes += self.set_phase(run, "Failed")
                self.not_ready(run, "PodFailed")
                self.release(run)
            else:
                self.schedule_restart(run, c, changes, extra)
                return
            self.publish(run, *changes, **extra)
            return
        if run.deleting or run.stopped:
            self.publish(run, *changes, **extra)
            return
        if restart_policy == "Always" or (restart_policy == "OnFailure" and exit_code != 0):
            self.schedule_restart(run, c, changes, extra)
            return
        if all(x.terminated for x in run.main):
            failed = any(x.state["terminated"]["exitCode"] != 0 for x in run.main)
            changes += self.set_phase(run, "Failed" if failed else "Succeeded")
            self.not_ready(run, "PodFailed" if failed else "PodCompleted")
            self.release(run)
        else:
            self.not_ready(run)
        self.publish(run, *changes, **extra)

    def schedule_restart(
        self, run: PodRun, c: ContainerRun, changes: list[str], extra: dict[str, Any]
    ) -> None:
        c.last_state = c.state
        c.previous_logs, c.logs = c.logs, []
        c.restart_count += 1
        delay = c.crash_backoff
        c.crash_backoff = min(c.crash_backoff * 2, 300.0)
        c.state = {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off {int(delay)}s restarting failed container={c.name} "
                f"pod={run.name}_{run.namespace}({run.uid})",
            }
        }
        self.event(
            run,
            "BackOff",
            f"Back-off restarting failed container {c.name} in pod {run.name}_{run.namespace}({run.uid})",
            warning=True,
            container=c,
        )
        self.not_ready(run)
        self.publish(run, *changes, "waiting:CrashLoopBackOff", **extra)
        self.after(run, delay, self.create_container, run, c)

    def kill(self, run: PodRun, c: ContainerRun, signal: int) -> int | None:
        """Signal a container's main process from exec; returns its exit code if it stopped."""
        if not c.running or run.frozen:
            return None
        # The XCom sidecar traps SIGINT and exits 0; anything else dies of the signal.
        code = 0 if c.name == SIDECAR and signal == 2 else 128 + signal
        self.clock.later(0.0, self.container_exited, run, c, code)
        return code

    # -- deletion -------------------------------------------------------------------------------

    def delete(self, pod: Obj, grace: int) -> None:
        """API DELETE with a grace period: mark, stop containers, then remove (unless finalizers)."""
        run = self.runs.get(pod["metadata"]["uid"])
        if run is None:
            return
        first = not run.deleting
        run.deleting = True
        if first:
            self.store.lifecycle(pod, "deleting", grace_seconds=grace)
        if grace == 0:
            self.finish_delete(run, force=True)
            return
        if run.frozen:
            return  # nobody on the node confirms; the pod GC removes it later
        if run.node is None or not run.start_time or run.phase in ("Succeeded", "Failed"):
            self.after(run, 0.01, self.finish_delete, run)
            return
        if first:
            for c in run.containers:
                if c.running:
                    self.event(run, "Killing", f"Stopping container {c.name}", container=c)
            stop = max(
                (c.run.stop_seconds for c in run.containers if c.running and c.run.stop_seconds is not None),
                default=STOP_SECONDS,
            )
            self.after(run, min(stop, float(grace)), self.stop_containers, run)

    def stop_containers(self, run: PodRun) -> None:
        run.stopped = True
        changes: list[str] = []
        for c in run.containers:
            if c.kill(143):
                changes.append(f"terminated:Error:{c.name}")
            elif "waiting" in c.state:
                c.state = {
                    "terminated": {
                        "exitCode": 137,
                        "reason": "ContainerStatusUnknown",
                        "message": "The container could not be located when the pod was terminated",
                        "startedAt": None,
                        "finishedAt": None,
                    }
                }
        failed = any((x.state.get("terminated") or {}).get("exitCode", 1) != 0 for x in run.main)
        changes += self.set_phase(run, "Failed" if failed else "Succeeded")
        self.not_ready(run, "PodFailed" if failed else "PodCompleted")
        self.release(run)
        self.publish(run, *changes)
        self.after(run, 0.05, self.finish_delete, run)

    def finish_delete(self, run: PodRun, force: bool = False) -> None:
        pod = self.pod(run)
        if pod is None or pod["metadata"]["uid"] != run.uid:
            return
        if pod["metadata"].get("finalizers") and not force:
            return  # removed when the last finalizer goes (see finalizers_changed)
        self.remove(run)

    def finalizers_changed(self, pod: Obj) -> None:
        run = self.runs.get(pod["metadata"]["uid"])
        if run is None or not run.deleting or pod["metadata"].get("finalizers"):
            return
        if (
            run.frozen
            or run.stopped
            or run.node is None
            or not run.start_time
            or run.phase in ("Succeeded", "Failed", "Unknown")
        ):
            self.clock.later(0.0, self.finish_delete, run)

    def remove(self, run: PodRun) -> None:
        run.cancel_timers()
        self.release(run)
        self.unschedulable.pop(run.uid, None)
        removed = self.store.remove("pods", run.namespace, run.name)
        run.gone = True
        for c in run.containers:
            c.touch()
        if removed is not None:
            self.store.lifecycle(removed, "deleted")

    # -- disruptions ----------------------------------------------------------------------------

    def disrupt(self, run: PodRun, kind: str) -> None:
        pod = self.pod(run)
        if pod is None or run.gone:
            return
        if kind == "evict":
            self.condition(run, "DisruptionTarget", True, "EvictionByEvictionAPI", "Eviction API: evicting")
            self.publish(run, "disruption:EvictionByEvictionAPI")
            self.after(run, 0.1, self._evicted, run)
        elif kind == "preempt":
            self.condition(
                run,
                "DisruptionTarget",
                True,
                "PreemptionByScheduler",
                "default-scheduler: preempting to accommodate a higher priority pod",
            )
            self.publish(run, "disruption:PreemptionByScheduler")
            node = run.node.spec.name if run.node else "fake-node-1"
            self.event(
                run,
                "Preempted",
                f"Preempted by pod {uuid.uuid4()} on node {node}",
                component="default-scheduler",
            )
            self.store.lifecycle(pod, "preempted")
            grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
            self.mark_deleted(run, grace)
            self.delete(self.pod(run) or pod, grace)
        elif kind == "node_lost":
            run.cancel_timers()
            run.frozen = True
            self.store.lifecycle(pod, "node_lost")
            self.clock.later(NODE_NOT_READY_AFTER, self._node_not_ready, run)
        elif kind == "delete":
            grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
            self.store.lifecycle(pod, "deleted_externally")
            self.mark_deleted(run, grace)
            self.delete(self.pod(run) or pod, grace)
        else:
            raise ValueError(f"unknown disruption kind {kind!r}; use evict, preempt, node_lost or delete")

    def evict_via_api(self, run: PodRun, grace: int) -> None:
        """POST pods/NAME/eviction: DisruptionTarget, then a graceful deletion (the object goes away)."""
        pod = self.pod(run)
        if pod is None or run.gone:
            return
        self.condition(run, "DisruptionTarget", True, "EvictionByEvictionAPI", "Eviction API: evicting")
        self.publish(run, "disruption:EvictionByEvictionAPI")
        if run.node is None or not run.start_time or run.phase in ("Succeeded", "Failed"):
            grace = 0
        self.mark_deleted(run, grace)
        self.delete(self.pod(run) or pod, grace)

    def mark_deleted(self, run: PodRun, grace: int) -> None:
        pod = self.pod(run)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return
        pod = copy.deepcopy(pod)
        pod["metadata"]["deletionTimestamp"] = now_iso(time.time() + grace)
        pod["metadata"]["deletionGracePeriodSeconds"] = grace
        self.store.put("pods", pod, "MODIFIED")

    def _evicted(self, run: PodRun) -> None:
        self.fail_pod(run, "Evicted", "The pod was evicted through the Eviction API.", "evicted")

    def _node_not_ready(self, run: PodRun) -> None:
        if run.gone:
            return
        self.condition(run, "Ready", False, "NodeNotReady")
        self.condition(run, "ContainersReady", False, "NodeNotReady")
        run.phase = "Unknown"
        self.event(run, "NodeNotReady", "Node is not ready", warning=True, component="node-controller")
        self.publish(run, "phase:Unknown")
        self.clock.later(TAINT_EVICTION_AFTER, self._taint_evict, run)

    def _taint_evict(self, run: PodRun) -> None:
        if run.gone:
            return
        self.condition(
            run,
            "DisruptionTarget",
            True,
            "DeletionByTaintManager",
            "Taint manager: deleting due to NoExecute taint",
        )
        for c in run.containers:
            if not c.terminated:
                c.state = {
                    "terminated": {
                        "exitCode": 137,
                        "reason": "ContainerStatusUnknown",
                        "message": "The container could not be located when the pod was "
                        "deleted.  The container used to be Running",
                        "startedAt": None,
                        "finishedAt": None,
                    }
                }
                c.ready = False
                c.touch()
        self.event(
            run,
            "TaintManagerEviction",
            f"Marking for deletion Pod {run.namespace}/{run.name}",
            component="taint-eviction-controller",
        )
        self.publish(run, "disruption:DeletionByTaintManager", "terminated:ContainerStatusUnknown")
        pod = self.pod(run)
        if pod is not None:
            grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
            self.mark_deleted(run, grace)
            run.deleting = True
            self.clock.later(grace + POD_GC_AFTER, self._pod_gc, run)

    def _pod_gc(self, run: PodRun) -> None:
        if run.gone:
            return
        run.phase = "Failed"
        self.publish(run, "phase:Failed")
        self.remove(run)

    # -- exec support -----------------------------------------------------------------------------

    def xcom(self, run: PodRun) -> str:
        """The content of /airflow/xcom/return.json: the main containers' scenario ``run.xcom``."""
        for c in run.main:
            if c.name != SIDECAR and c.xcom is not None:
                return json.dumps(c.xcom)
        return ""
