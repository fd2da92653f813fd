"""More memory for the next try after an OOM kill, opt-in, capped by what the cluster allows.

``RetryingPodOperator(memory_growth=MemoryGrowth(factor=2, maximum="16Gi"))``: when a try's verdict
is ``container.oom`` (the container's termination reason says ``OOMKilled``; exit code 137 alone
never counts), the next try's pod asks for more memory for the container the verdict names: its
memory limit and request are multiplied by ``factor`` (or raised by ``step``). No other cause grows
anything: a rate limit, an eviction or an exit code retries at the size the try ran with.

The new size is the smallest of: the grown size; ``maximum``; the namespace's ``LimitRange``
maximum per container (and per pod, less the other containers); the room left in each
``ResourceQuota`` of the namespace (``limits.memory``, ``requests.memory``, ``memory``); the largest
schedulable node's allocatable memory, less the other containers' requests. Each of the last three
is read only after an OOM kill, and each is optional: a read the task's RBAC refuses skips that cap
with one log line. When the caps leave no room above the size that was OOM-killed, the task fails
at once (``PodFailurePermanent``) naming the limit that stopped it, instead of spending its retries
on the same kill.

Where the size lives between tries: an Airflow Variable per task (and map index),
``k8s_retry.memory.<dag_id>.<task_id>[.<map_index>]``, JSON. Airflow clears a task instance's XComs
when its next try starts, and a worker has no database of its own; a Variable survives the try,
is read and written through the Task SDK from any worker, and an operator sees it in the UI
(Admin, Variables) and resets it with ``airflow variables delete <key>``. It holds the size the next
try of the current run asks for and, with ``remember=True``, the size that last succeeded, which
the first try of a later run starts from (never below what the task itself asks for, and never
above ``maximum``). Concurrent runs of one task share the Variable: the last write wins.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from decimal import ROUND_CEILING, Decimal
from typing import TYPE_CHECKING, Any

from airflow.sdk import Variable

from airflow_k8s_retry.classification.model import Outcome, Reason
from airflow_k8s_retry.kube.errors import Forbidden, KubeError
from airflow_k8s_retry.kube.quantity import parse_memory

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_k8s_retry.classification.model import Verdict

Json = dict[str, Any]

#: Prefix of the Airflow Variables that hold each task's sizes.
VARIABLE_PREFIX = "k8s_retry.memory."
#: Airflow's longest Variable key.
KEY_LIMIT = 250
MI = Decimal(2**20)
GI = Decimal(2**30)


def format_memory(size: Decimal) -> str:
    """A size in binary units, as a pod spec writes it: ``4Gi``, ``1536Mi`` (bytes otherwise)."""
    if size % GI == 0:
        return f"{int(size / GI)}Gi"
    if size % MI == 0:
        return f"{int(size / MI)}Mi"
    return str(int(size))


@dataclass(frozen=True)
class MemoryGrowth:
    """How the memory of an OOM-killed container grows from one try to the next.

    :param factor: multiply the limit and request (default 2, when ``step`` is not given).
    :param step: add this much instead (``"1Gi"``).
    :param maximum: never ask for more than this (``"16Gi"``); the cluster's caps apply too.
    :param remember: start later runs from the size that last succeeded.
    """

    factor: float | None = None
    step: str | None = None
    maximum: str | None = None
    remember: bool = False

    def __post_init__(self) -> None:
        if self.factor is not None and self.step is not None:
            raise ValueError("MemoryGrowth: give factor or step, not both")
        if self.factor is not None and (
            isinstance(self.factor, bool)
            or not isinstance(self.factor, (int, float))
            or not math.isfinite(self.factor)
            or self.factor <= 1
        ):
            raise ValueError(f"MemoryGrowth: factor must be a number greater than 1, got {self.factor!r}")
        if self.step is not None and self.step_bytes <= 0:
            raise ValueError(f"MemoryGrowth: step must be more than 0, got {self.step!r}")
        if self.maximum is not None and (self.maximum_bytes or 0) <= 0:
            raise ValueError(f"MemoryGrowth: maximum must be more than 0, got {self.maximum!r}")
        if not isinstance(self.remember, bool):
            raise ValueError(f"MemoryGrowth: remember must be True or False, got {self.remember!r}")

    @property
    def step_bytes(self) -> Decimal:
        return parse_memory(self.step, "MemoryGrowth step") if self.step is not None else Decimal(0)

    @property
    def maximum_bytes(self) -> Decimal | None:
        return parse_memory(self.maximum, "MemoryGrowth maximum") if self.maximum is not None else None

    def grown(self, size: Decimal) -> Decimal:
        """``size`` after one growth, rounded up to a whole MiB."""
        bigger = size + self.step_bytes if self.step is not None else size * Decimal(str(self.factor or 2))
        return (bigger / MI).to_integral_value(rounding=ROUND_CEILING) * MI


@dataclass(frozen=True)
class Size:
    """A container's memory ``limit`` and ``request`` in bytes (``None``: not set)."""

    limit: Decimal | None = None
    request: Decimal | None = None

    @classmethod
    def of(cls, container: Mapping[str, Any]) -> Size:
        resources = container.get("resources") or {}
        limit = (resources.get("limits") or {}).get("memory")
        request = (resources.get("requests") or {}).get("memory")
        name = container.get("name", "?")
        return cls(
            parse_memory(limit, f"container {name} memory limit") if limit is not None else None,
            parse_memory(request, f"container {name} memory request") if request is not None else None,
        )

    @property
    def largest(self) -> Decimal | None:
        values = [v for v in (self.limit, self.request) if v is not None]
        return max(values) if values else None

    def text(self) -> str:
        if self.limit is not None:
            return format_memory(self.limit)
        return f"{format_memory(self.request)} requested" if self.request is not None else "no memory set"

    def to_payload(self) -> Json:
        return {
            k: format_memory(v)
            for k, v in (("limit", self.limit), ("request", self.request))
            if v is not None
        }

    @classmethod
    def from_payload(cls, data: object) -> Size | None:
        if not isinstance(data, Mapping):
            return None
        try:
            return cls.of({"resources": {"limits": _only(data, "limit"), "requests": _only(data, "request")}})
        except ValueError:
            return None

    def at_least(self, other: Size) -> Size:
        """Each of limit and request the larger of the two (a remembered size never shrinks a pod)."""
        return Size(_larger(self.limit, other.limit), _larger(self.request, other.request))

    def at_most(self, cap: Decimal) -> Size:
        return Size(_smaller(self.limit, cap), _smaller(self.request, cap))


def _only(data: Mapping[str, Any], key: str) -> dict[str, Any]:
    return {"memory": data[key]} if key in data else {}


def _larger(a: Decimal | None, b: Decimal | None) -> Decimal | None:
    return b if a is None else a if b is None else max(a, b)


def _smaller(a: Decimal | None, cap: Decimal) -> Decimal | None:
    return None if a is None else min(a, cap)


def apply_size(container: Json, size: Size) -> None:
    """Write ``size`` into a container of a pod as API JSON (the other resources stay)."""
    resources = container["resources"] = dict(container.get("resources") or {})
    for key, value in (("limits", size.limit), ("requests", size.request)):
        if value is not None:
            resources[key] = {**(resources.get(key) or {}), "memory": format_memory(value)}


# -- caps ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cap:
    """One bound on a container's memory: ``name`` says which limit it is and where it comes from."""

    name: str
    bytes: Decimal


def container_size(pod: Mapping[str, Any], container: str) -> Size | None:
    """The memory of ``container`` in ``pod`` (API JSON), or ``None`` when the pod has no such container."""
    for c in (pod.get("spec") or {}).get("containers") or []:
        if c.get("name") == container:
            return Size.of(c)
    return None


def _others(pod: Mapping[str, Any], container: str, which: str) -> Decimal:
    """The memory the pod's other (regular and native sidecar) containers ask for."""
    spec = pod.get("spec") or {}
    total = Decimal(0)
    sidecars = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    for c in [*(spec.get("containers") or []), *sidecars]:
        if c.get("name") == container:
            continue
        size = Size.of(c)
        value = size.limit if which == "limit" else (size.request if size.request is not None else size.limit)
        total += value or 0
    return total


def limit_range_caps(items: Iterable[Mapping[str, Any]], pod: Mapping[str, Any], container: str) -> list[Cap]:
    caps = []
    for item in items:
        name = (item.get("metadata") or {}).get("name", "?")
        for limit in (item.get("spec") or {}).get("limits") or []:
            most = (limit.get("max") or {}).get("memory")
            if most is None:
                continue
            most_bytes = parse_memory(most, f"LimitRange {name} max memory")
            if limit.get("type") == "Container":
                caps.append(
                    Cap(f"LimitRange {name} (max {format_memory(most_bytes)} per container)", most_bytes)
                )
            elif limit.get("type") == "Pod":
                room = most_bytes - _others(pod, container, "limit")
                caps.append(Cap(f"LimitRange {name} (max {format_memory(most_bytes)} per pod)", room))
    return caps


def quota_caps(items: Iterable[Mapping[str, Any]], pod: Mapping[str, Any], container: str) -> list[Cap]:
    """The room each quota has left for the next try's pod (the OOM-killed pod is terminal, so the
    quota no longer counts it)."""
    caps = []
    for item in items:
        name = (item.get("metadata") or {}).get("name", "?")
        hard = (item.get("status") or {}).get("hard") or (item.get("spec") or {}).get("hard") or {}
        used = (item.get("status") or {}).get("used") or {}
        for key, which in (("limits.memory", "limit"), ("requests.memory", "request"), ("memory", "request")):
            if key not in hard:
                continue
            left = parse_memory(hard[key], f"ResourceQuota {name} {key}") - parse_memory(
                used.get(key, "0"), f"ResourceQuota {name} used {key}"
            )
            room = left - _others(pod, container, which)
            caps.append(
                Cap(f"ResourceQuota {name} ({format_memory(max(left, Decimal(0)))} of {key} left)", room)
            )
    return caps


def node_caps(items: Iterable[Mapping[str, Any]], pod: Mapping[str, Any], container: str) -> list[Cap]:
    best: tuple[Decimal, str] | None = None
    for node in items:
        if (node.get("spec") or {}).get("unschedulable"):
            continue
        memory = ((node.get("status") or {}).get("allocatable") or {}).get("memory")
        if memory is None:
            continue
        name = (node.get("metadata") or {}).get("name", "?")
        size = parse_memory(memory, f"node {name} allocatable memory")
        if best is None or size > best[0]:
            best = (size, name)
    if best is None:
        return []
    room = best[0] - _others(pod, container, "request")
    return [Cap(f"the largest node's allocatable memory ({best[1]}: {format_memory(best[0])})", room)]


#: What each cluster cap reads (``PodClient.list_sizing``'s resource) and how it becomes caps.
CLUSTER_CAPS: tuple[tuple[str, bool, Callable[..., list[Cap]]], ...] = (
    ("limitranges", True, limit_range_caps),
    ("resourcequotas", True, quota_caps),
    ("nodes", False, node_caps),
)


def read_caps(
    read: Callable[[str, str | None], list[Json]],
    namespace: str,
    pod: Mapping[str, Any],
    container: str,
    log: Callable[..., None],
) -> list[Cap]:
    """The cluster's caps on ``container`` of ``pod``; a refused or failed read skips its cap."""
    caps: list[Cap] = []
    for resource, namespaced, make in CLUSTER_CAPS:
        where = f" in namespace {namespace}" if namespaced else ""
        try:
            items = read(resource, namespace if namespaced else None)
        except Forbidden:
            log("Memory growth: cannot list %s%s (RBAC forbids it); that cap is skipped", resource, where)
            continue
        except KubeError as exc:
            log("Memory growth: listing %s%s failed (%s); that cap is skipped", resource, where, exc)
            continue
        try:
            caps.extend(make(items, pod, container))
        except ValueError as exc:
            log("Memory growth: %s%s unreadable (%s); that cap is skipped", resource, where, exc)
    return caps


# -- one step -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """What follows an OOM kill: the next try's ``size`` (``None``: stop) and why, in words."""

    size: Size | None
    why: str


def next_size(
    growth: MemoryGrowth, container: str, ran: Size, try_number: int, caps: list[Cap]
) -> Step | None:
    """The size after ``ran`` was OOM-killed in try ``try_number``, capped; ``None`` when the
    container set no memory at all (there is nothing to grow: the retry runs as written)."""
    base = ran.largest
    if base is None:
        return None
    killed = f"try {try_number} was OOMKilled at {ran.text()}"
    wanted = Size(
        growth.grown(ran.limit) if ran.limit is not None else None,
        growth.grown(ran.request) if ran.request is not None else None,
    )
    bounds = list(caps)
    if growth.maximum_bytes is not None:
        bounds.append(
            Cap(f"the task's maximum (MemoryGrowth maximum={growth.maximum})", growth.maximum_bytes)
        )
    tightest = min(bounds, key=lambda c: c.bytes, default=None)
    size = wanted if tightest is None else wanted.at_most(tightest.bytes)
    grown = size.largest
    if tightest is not None and (grown is None or grown <= base):
        return Step(
            None,
            f"memory growth stopped: container {container} {killed}, and {tightest.name} "
            f"allows no more than {format_memory(max(tightest.bytes, Decimal(0)))}",
        )
    capped = f", capped by {tightest.name}" if tightest is not None and size != wanted else ""
    return Step(size, f"container {container} {killed}{capped}")


# -- the record between tries and runs ----------------------------------------------------------


def variable_key(dag_id: str, task_id: str, map_index: int) -> str:
    """The Airflow Variable holding one task's (one mapped index's) sizes."""
    key = f"{VARIABLE_PREFIX}{dag_id}.{task_id}" + (f".{map_index}" if map_index >= 0 else "")
    if len(key) <= KEY_LIMIT:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return f"{key[: KEY_LIMIT - 17]}.{digest}"


@dataclass(frozen=True)
class Planned:
    """A size for one container, what it is for (``run_id``, from ``try_number`` on) and why."""

    container: str
    size: Size
    why: str
    run_id: str
    try_number: int

    def to_payload(self) -> Json:
        return {**asdict(self), "size": self.size.to_payload()}

    @classmethod
    def from_payload(cls, data: object) -> Planned | None:
        if not isinstance(data, Mapping):
            return None
        size = Size.from_payload(data.get("size"))
        container, run_id, try_number = data.get("container"), data.get("run_id"), data.get("try_number")
        if size is None or not isinstance(container, str) or not isinstance(run_id, str):
            return None
        if not isinstance(try_number, int) or isinstance(try_number, bool):
            return None
        return cls(container, size, str(data.get("why") or ""), run_id, try_number)


@dataclass(frozen=True)
class Record:
    """A Variable's content: the size ``next`` tries of a run ask for, and the ``remembered`` one."""

    next: Planned | None = None
    remembered: Planned | None = None

    def to_payload(self) -> Json:
        out: Json = {"version": 1}
        if self.next is not None:
            out["next"] = self.next.to_payload()
        if self.remembered is not None:
            out["remembered"] = self.remembered.to_payload()
        return out

    @classmethod
    def from_payload(cls, data: object) -> Record:
        if not isinstance(data, Mapping):
            return cls()
        return cls(Planned.from_payload(data.get("next")), Planned.from_payload(data.get("remembered")))

    @property
    def empty(self) -> bool:
        return self.next is None and self.remembered is None

    def for_try(self, run_id: str, try_number: int, remember: bool) -> Planned | None:
        """The size this try starts from: this run's grown size, else (with ``remember``) the size
        that succeeded before."""
        planned = self.next
        if planned is not None and planned.run_id == run_id and planned.try_number <= try_number:
            return planned
        return self.remembered if remember else None


# -- the operator's side: the Variable, a try's start, an OOM kill, a success -------------------


def _key(context: Context) -> str:
    ti = context["ti"]
    return variable_key(ti.dag_id, ti.task_id, ti.map_index if ti.map_index is not None else -1)


def load(context: Context, log: Callable[..., None]) -> Record:
    """The task's record, or an empty one (a missing or unreadable Variable starts from scratch)."""
    key = _key(context)
    try:
        return Record.from_payload(Variable.get(key, default=None, deserialize_json=True))
    except Exception as exc:  # the store must never fail the try: it runs as written
        log("Memory growth: cannot read Variable %s (%s); this try runs as written", key, exc)
        return Record()


def save(context: Context, record: Record, log: Callable[..., None]) -> None:
    """Write the task's record (delete the Variable when nothing is left in it)."""
    key = _key(context)
    try:
        if record.empty:
            if Variable.get(key, default=None) is not None:
                Variable.delete(key)
            return
        description = "RetryingPodOperator memory_growth: sizes after OOM kills; delete to reset"
        Variable.set(key, record.to_payload(), description=description, serialize_json=True)
    except Exception as exc:
        log("Memory growth: cannot write Variable %s (%s)", key, exc)


def size_for_try(growth: MemoryGrowth, context: Context, pod: Json, log: Callable[..., None]) -> str | None:
    """Give the try's pod (API JSON) the size its record plans for it; returns what it runs with and
    why (``"memory 4Gi: container base try 1 was OOMKilled at 2Gi"``), or ``None`` as written."""
    ti = context["ti"]
    planned = load(context, log).for_try(ti.run_id, ti.try_number, growth.remember)
    if planned is None:
        return None
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") != planned.container:
            continue
        size = Size.of(container).at_least(planned.size)
        if growth.maximum_bytes is not None:
            size = size.at_most(growth.maximum_bytes)
        if size == Size.of(container):
            return None
        apply_size(container, size)
        return f"memory {size.text()} for container {planned.container}: {planned.why}"
    return None


def oom_container(verdict: Verdict) -> str | None:
    """The container an OOM verdict names (``None`` for another cause)."""
    if verdict.reason is not Reason.CONTAINER_OOM:
        return None
    named = [e.container for e in verdict.evidence if e.reason is Reason.CONTAINER_OOM and e.container]
    return named[0] if named else None


def after_oom(
    growth: MemoryGrowth,
    *,
    context: Context,
    verdict: Verdict,
    ran_on: Mapping[str, Any],
    read: Callable[[str, str | None], list[Json]],
    log: Callable[..., None],
) -> Verdict:
    """After a try's OOM kill: plan the next try's size, or turn the verdict into a permanent
    failure when the caps allow no more. The verdict's message says which (the failures page and
    Airflow's ``retry_reason`` show it); any other verdict is returned as it is."""
    container = oom_container(verdict)
    ran = container_size(ran_on, container) if container is not None else None
    if container is None or ran is None:
        return verdict
    ti = context["ti"]
    namespace = str((ran_on.get("metadata") or {}).get("namespace") or "")
    caps = read_caps(read, namespace, ran_on, container, log)
    step = next_size(growth, container, ran, ti.try_number, caps)
    if step is None:
        log("Memory growth: container %s sets no memory limit or request; nothing to grow", container)
        return verdict
    record = load(context, log)
    if step.size is None:
        save(context, replace(record, next=None), log)
        return replace(verdict, outcome=Outcome.FAIL, message=f"{verdict.message}; {step.why}")
    if ti.try_number > getattr(ti, "max_tries", ti.try_number):  # no try is left to grow into
        save(context, replace(record, next=None), log)
        return verdict
    planned = Planned(container, step.size, step.why, ti.run_id, ti.try_number + 1)
    save(context, replace(record, next=planned), log)
    text = f"try {ti.try_number + 1} asks for memory {step.size.text()} ({step.why})"
    return replace(verdict, message=f"{verdict.message}; memory growth: {text}")


def after_success(
    growth: MemoryGrowth, context: Context, ran_on: Mapping[str, Any], log: Callable[..., None]
) -> None:
    """A try succeeded: with ``remember``, keep the size it ran with if a record sized it; the run's
    plan is done either way."""
    record = load(context, log)
    if record.empty:
        return
    ti = context["ti"]
    planned = record.for_try(ti.run_id, ti.try_number, growth.remember)
    remembered = record.remembered
    if growth.remember and planned is not None:
        ran = container_size(ran_on, planned.container) or planned.size
        why = f"succeeded in run {ti.run_id}, try {ti.try_number}"
        remembered = Planned(planned.container, ran, why, ti.run_id, ti.try_number)
    save(context, Record(next=None, remembered=remembered), log)
