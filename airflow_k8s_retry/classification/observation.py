"""A tolerant, flattened view of a pod's JSON and its Events, for the rules to read.

The rules should say what they look for, not how to dig it out of nested, optional, camelCase
JSON. Everything here accepts whatever it is given (missing keys, ``null``, wrong types) and
falls back to empty values, so that a malformed or half-written pod never makes the classifier
raise. Containers are listed init containers first, in spec order, because an init container
that cannot start is why the main containers wait.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_k8s_retry.classification.model import Evidence, History, Reason
from airflow_k8s_retry.classification.registry_messages import CAUSE_RANK, pull_cause

#: Waiting reasons of the kubelet that mean an image pull failed.
PULL_WAITING_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImagePullBackOff",
        "RegistryUnavailable",
        "SignatureValidationFailed",
    }
)
#: Waiting reasons whose message may state an image cause: the pull reasons, and the image inspection
#: that comes before a pull (CRI-O's short-name policy answers there).
IMAGE_WAITING_REASONS = PULL_WAITING_REASONS | {"ImageInspectError"}
#: Waiting reasons that are a normal part of starting.
BENIGN_WAITING_REASONS = frozenset({"", "ContainerCreating", "PodInitializing"})
#: The pod annotation naming its base container (``RetryingPodOperator`` sets it from KPO's
#: ``base_container_name``): when it names a main container of the pod, that container alone decides
#: success, skip and failure; another main container (a sidecar) never does.
BASE_CONTAINER_ANNOTATION = "airflow-k8s-retry.io/base-container"
#: Event reasons the kubelet uses for image pull trouble.
PULL_EVENT_REASONS = frozenset({"Failed", "BackOff", "ErrImagePull", "ImagePullBackOff", "InspectFailed"})


def mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def sequence(value: object) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else ()


def text(value: object) -> str:
    return "" if value is None else str(value)


def integer(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return int(value.strip()) if isinstance(value, str) else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Termination:
    reason: str
    message: str
    exit_code: int | None


@dataclass(frozen=True)
class RestartRule:
    """One of a container's ``restartPolicyRules`` (KEP-5307): ``action`` when its exit code is ``In``
    (or ``NotIn``) ``values``."""

    action: str
    operator: str
    values: frozenset[int]

    def matches(self, exit_code: int) -> bool:
        if self.operator == "In":
            return exit_code in self.values
        if self.operator == "NotIn":
            return exit_code not in self.values
        return False  # an operator this package does not know matches nothing, as in the kubelet


#: Restart rule actions that restart the container in place (``RestartAllContainers``: KEP-5532).
RESTART_ACTIONS = frozenset({"Restart", "RestartAllContainers"})


@dataclass(frozen=True)
class ContainerView:
    name: str
    init: bool
    sidecar: bool  # an init container with restartPolicy Always (a native sidecar)
    image: str  # as the status reports it (resolved), else as the spec names it
    spec_image: str
    memory_limit: str
    waiting_reason: str
    waiting_message: str
    terminated: Termination | None
    last_terminated: Termination | None
    running: bool = False
    #: The container's own ``restartPolicy`` ("" when it follows the pod's) and ``restartPolicyRules``.
    restart_policy: str = ""
    restart_rules: tuple[RestartRule, ...] = ()

    def restarted_by_rule(self, exit_code: int | None) -> bool:
        """Whether one of the container's restart rules restarts it in place after ``exit_code``."""
        if not self.restart_policy or exit_code is None:
            return False
        rule = next((r for r in self.restart_rules if r.matches(exit_code)), None)
        return rule is not None and rule.action in RESTART_ACTIONS

    def restarts_after(self, exit_code: int | None, pod_restart_policy: str) -> bool:
        """Whether the kubelet restarts the container after it exited with ``exit_code``: its restart
        rules first, then its own ``restartPolicy``, then the pod's (the kubelet's order)."""
        if self.restarted_by_rule(exit_code):
            return True
        failed = exit_code != 0
        for policy in (self.restart_policy, pod_restart_policy):
            if policy == "Never":
                return False
            if policy == "OnFailure":
                return failed
            if policy == "Always":
                return True
        return True  # the pod's default policy is Always

    @property
    def label(self) -> str:
        return f"init container {self.name!r}" if self.init else f"container {self.name!r}"

    @property
    def field_path(self) -> str:
        return f"spec.{'initContainers' if self.init else 'containers'}{{{self.name}}}"


@dataclass(frozen=True)
class Condition:
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class EventView:
    reason: str
    message: str
    count: int
    stamp: str
    field_path: str

    @property
    def identity(self) -> str:
        """Stable across observations for one occurrence, different for a new one."""
        return f"{self.reason}|{self.stamp}|{self.count}"


@dataclass(frozen=True)
class Observation:
    exists: bool
    name: str
    namespace: str
    phase: str
    reason: str
    message: str
    deleting: bool
    restart_policy: str
    conditions: Mapping[str, Condition]
    containers: tuple[ContainerView, ...]
    events: tuple[EventView, ...]
    pull_causes: Mapping[str, Evidence]  # container name -> cause to act on
    history: History
    base: str = ""  # the base container, when the pod names one of its main containers so
    generation: int | None = None  # metadata.generation
    observed_generation: int | None = None  # status.observedGeneration (absent before Kubernetes 1.33)
    scheduling_gates: tuple[str, ...] = ()  # spec.schedulingGates[].name, in spec order
    #: The last lines of a container's log, by container name (the trigger reads them before a
    #: container's failure leaves; ``explain --log``); empty when none was read.
    log_tails: Mapping[str, str] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        """Whether the pod's work runs: phase ``Running``, or any container reported running."""
        return self.phase == "Running" or any(c.running for c in self.containers)

    @property
    def title(self) -> str:
        return f"pod {self.namespace}/{self.name}" if self.namespace else f"pod {self.name}"

    def condition(self, kind: str) -> Condition | None:
        return self.conditions.get(kind)

    def events_named(self, *reasons: str) -> tuple[EventView, ...]:
        return tuple(e for e in self.events if e.reason in reasons)

    def decides(self, container: ContainerView) -> bool:
        """Whether ``container``'s ending decides the task: any container when the pod names no base
        container; else the base container and the init containers it waits for."""
        if container.sidecar:
            return False  # a native sidecar never decides: the kubelet restarts it, then stops it
        return not self.base or container.init or container.name == self.base

    @property
    def initialized(self) -> bool:
        """Whether the kubelet got past the init containers: ``Initialized=True``, or a main container
        that ran or is being started (waiting for anything but ``PodInitializing``)."""
        cond = self.condition("Initialized")
        if cond is not None and cond.status == "True":
            return True
        return any(
            c.running
            or c.terminated is not None
            or c.last_terminated is not None
            or c.waiting_reason not in ("", "PodInitializing")
            for c in self.containers
            if not c.init
        )

    def blocks(self, container: ContainerView) -> bool:
        """Whether ``container`` not starting keeps the pod from its work: every container but a native
        sidecar once the pod is initialized (the kubelet restarts it beside the running main
        containers); before that, a sidecar that never started holds the main containers back."""
        return not container.sidecar or not self.initialized


def _termination(value: object) -> Termination | None:
    data = mapping(value)
    if not data:
        return None
    return Termination(
        reason=text(data.get("reason")),
        message=text(data.get("message")).strip(),
        exit_code=integer(data.get("exitCode")),
    )


def _containers(spec: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[ContainerView, ...]:
    views: list[ContainerView] = []
    for init, spec_key, status_key in (
        (True, "initContainers", "initContainerStatuses"),
        (False, "containers", "containerStatuses"),
    ):
        specs = {text(mapping(c).get("name")): mapping(c) for c in sequence(spec.get(spec_key))}
        order = list(specs)
        statuses: dict[str, Mapping[str, Any]] = {}
        for raw in sequence(status.get(status_key)):
            entry = mapping(raw)
            name = text(entry.get("name"))
            statuses[name] = entry
            if name not in specs:
                order.append(name)
        for name in order:
            cspec = specs.get(name, {})
            cstat = statuses.get(name, {})
            state = mapping(cstat.get("state"))
            waiting = mapping(state.get("waiting"))
            limits = mapping(mapping(cspec.get("resources")).get("limits"))
            own_policy = text(cspec.get("restartPolicy"))
            views.append(
                ContainerView(
                    name=name,
                    init=init,
                    sidecar=init and own_policy == "Always",
                    image=text(cstat.get("image")) or text(cspec.get("image")),
                    spec_image=text(cspec.get("image")),
                    memory_limit=text(limits.get("memory")),
                    waiting_reason=text(waiting.get("reason")) if "waiting" in state else "",
                    waiting_message=text(waiting.get("message")).strip(),
                    terminated=_termination(state.get("terminated")),
                    last_terminated=_termination(mapping(cstat.get("lastState")).get("terminated")),
                    running="running" in state,
                    restart_policy=own_policy,
                    restart_rules=_restart_rules(cspec.get("restartPolicyRules")),
                )
            )
    return tuple(views)


def _restart_rules(value: object) -> tuple[RestartRule, ...]:
    rules: list[RestartRule] = []
    for raw in sequence(value):
        rule = mapping(raw)
        codes = mapping(rule.get("exitCodes"))
        if not codes:
            continue  # the only condition a rule has today; a rule without it matches nothing
        values = frozenset(v for v in (integer(x) for x in sequence(codes.get("values"))) if v is not None)
        rules.append(RestartRule(text(rule.get("action")), text(codes.get("operator")), values))
    return tuple(rules)


def _events(events: object, uid: str) -> tuple[EventView, ...]:
    items: object = events
    if isinstance(events, Mapping):  # an EventList
        items = events.get("items")
    views: list[EventView] = []
    for raw in sequence(items):
        event = mapping(raw)
        involved = mapping(event.get("involvedObject") or event.get("regarding"))
        other_uid = text(involved.get("uid"))
        if uid and other_uid and other_uid != uid:
            continue  # an event of an earlier pod with the same name
        series = mapping(event.get("series"))
        stamp = (
            text(event.get("lastTimestamp"))
            or text(series.get("lastObservedTime"))
            or text(event.get("eventTime"))
            or text(event.get("firstTimestamp"))
        )
        views.append(
            EventView(
                reason=text(event.get("reason")),
                message=text(event.get("message") or event.get("note")).strip(),
                count=integer(event.get("count")) or integer(series.get("count")) or 1,
                stamp=stamp,
                field_path=text(involved.get("fieldPath")),
            )
        )
    views.sort(key=lambda e: e.stamp)  # RFC 3339 strings sort in time order
    return tuple(views)


def _speaks_for_the_image(event: EventView) -> bool:
    # "Failed" also reports config and runtime errors ('Error: secret "x" not found'): only
    # messages about pulling or inspecting an image speak for the registry.
    lowered = event.message.lower()
    return event.reason in PULL_EVENT_REASONS and ("pull" in lowered or "inspect image" in lowered)


def _owner(event: EventView, containers: tuple[ContainerView, ...]) -> str | None:
    """The container an image Event is about: by its field path, else by the image it quotes."""
    for c in containers:
        if event.field_path:
            if event.field_path == c.field_path:
                return c.name
        elif any(i and f'"{i}"' in event.message for i in (c.image, c.spec_image)):
            return c.name
    return None


def _stronger(candidate: Evidence, current: Evidence | None) -> bool:
    # Strictly stronger only: the first sighting of a cause keeps its time.
    return current is None or CAUSE_RANK[candidate.reason] > CAUSE_RANK[current.reason]


def _event_causes(
    events: tuple[EventView, ...], containers: tuple[ContainerView, ...], stamp: float
) -> Iterator[Evidence]:
    for event in events:
        cause = pull_cause(event.message) if _speaks_for_the_image(event) else None
        if cause is not None:
            yield Evidence(
                cause, "event", f"{event.reason}: {event.message}", _owner(event, containers), stamp
            )


def _status_causes(containers: tuple[ContainerView, ...], stamp: float) -> Iterator[tuple[str, Evidence]]:
    for c in containers:
        cause = pull_cause(c.waiting_message) if c.waiting_reason in IMAGE_WAITING_REASONS else None
        if cause is not None:
            yield c.name, Evidence(cause, "status", f"{c.waiting_reason}: {c.waiting_message}", c.name, stamp)


def _pull_evidence(
    containers: tuple[ContainerView, ...], events: tuple[EventView, ...], history: History, stamp: float
) -> tuple[dict[str, Evidence], History]:
    """Decide the pull cause per failing container and remember the strongest cause seen."""
    strongest = history.strongest
    # Events first: they carry the full error text even after the status decayed.
    for found in _event_causes(events, containers, stamp):
        if _stronger(found, strongest):
            strongest = found
    causes: dict[str, Evidence] = {}
    for name, current in _status_causes(containers, stamp):
        causes[name] = current
        if _stronger(current, strongest):
            strongest = current
    for container in containers:
        pulling = container.waiting_reason in PULL_WAITING_REASONS and container.name not in causes
        if pulling and strongest is not None and strongest.container in (None, container.name):
            causes[container.name] = strongest
    if strongest is not history.strongest:
        history = History(first_seen=history.first_seen, strongest=strongest)
    return causes, history


def observe(
    pod: Mapping[str, Any] | None,
    events: object,
    history: History,
    now: float,
    logs: Mapping[str, str] | None = None,
) -> Observation:
    """Flatten ``pod`` and ``events``; ``history`` comes back with the strongest pull cause."""
    data = mapping(pod)
    meta = mapping(data.get("metadata"))
    spec = mapping(data.get("spec"))
    status = mapping(data.get("status"))
    conditions: dict[str, Condition] = {}
    for raw in sequence(status.get("conditions")):
        cond = mapping(raw)
        kind = text(cond.get("type"))
        if kind:
            conditions[kind] = Condition(
                status=text(cond.get("status")),
                reason=text(cond.get("reason")),
                message=text(cond.get("message")).strip(),
            )
    containers = _containers(spec, status)
    event_views = _events(events, text(meta.get("uid")))
    causes, history = _pull_evidence(containers, event_views, history, now)
    base = text(mapping(meta.get("annotations")).get(BASE_CONTAINER_ANNOTATION))
    if not any(c.name == base and not c.init for c in containers):
        base = ""
    return Observation(
        exists=pod is not None,
        name=text(meta.get("name")) or "<unnamed>",
        namespace=text(meta.get("namespace")),
        phase=text(status.get("phase")),
        reason=text(status.get("reason")),
        message=text(status.get("message")).strip(),
        deleting=bool(meta.get("deletionTimestamp")),
        restart_policy=text(spec.get("restartPolicy")) or "Always",
        conditions=conditions,
        containers=containers,
        events=event_views,
        pull_causes=causes,
        history=history,
        base=base,
        generation=integer(meta.get("generation")),
        observed_generation=integer(status.get("observedGeneration")),
        scheduling_gates=tuple(
            name
            for name in (text(mapping(g).get("name")) for g in sequence(spec.get("schedulingGates")))
            if name
        ),
        log_tails={text(k): text(v) for k, v in mapping(logs).items()},
    )


__all__ = [
    "BASE_CONTAINER_ANNOTATION",
    "BENIGN_WAITING_REASONS",
    "IMAGE_WAITING_REASONS",
    "PULL_WAITING_REASONS",
    "Condition",
    "ContainerView",
    "EventView",
    "Observation",
    "Reason",
    "RestartRule",
    "Termination",
    "observe",
]
