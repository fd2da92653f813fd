"""What the simulated cluster does, as data: image behaviours, objects, disruptions, faults, timings.

A scenario is written once (YAML or JSON file, or a Python dict) and validated strictly, so a typo
in a test's scenario fails loudly with the offending key instead of silently running the default
behaviour. The top-level keys ``images``, ``secrets``, ``configmaps``, ``disruptions``, ``faults``
and ``time_scale`` are a contract other tools rely on; ``nodes``, ``namespaces`` and
``autoscaler`` are optional extensions.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

PULL_BEHAVIOURS = ("ok", "not_found", "unauthorized", "rate_limited", "invalid_name")
DISRUPTION_KINDS = ("evict", "preempt", "node_lost", "delete", "admit")
FAULT_STATUSES: tuple[int | str, ...] = (500, 429, 410, 403, "reset", "slow", "lost")
FAULT_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "*")

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_FACTORS = {
    None: 1.0,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}


class ScenarioError(ValueError):
    """A scenario is malformed; the message names the key and says what is expected."""


class FieldError(ScenarioError):
    """One field of a scenario object has a bad value (raised by the object's own validation)."""

    def __init__(self, owner: object, field: str, reason: str) -> None:
        super().__init__(f"{type(owner).__name__}.{field}: {reason}")
        self.field = field
        self.reason = reason


T = TypeVar("T")


def _build(cls: Callable[..., T], where: str, **fields: Any) -> T:
    """Construct an object parsed from ``where``: its validation names the key under ``where``.

    ``from_dict`` only parses (keys, types, defaults); every value rule lives in the class's
    ``__post_init__``, so a spec built from a file and one built in Python are checked alike.
    """
    try:
        return cls(**fields)
    except FieldError as exc:
        raise ScenarioError(f"{where}.{exc.field}: {exc.reason}") from None


def _one_of(owner: object, field: str, value: object, allowed: tuple[Any, ...]) -> None:
    if value not in allowed or isinstance(value, bool):
        raise FieldError(owner, field, f"{value!r} is not one of {', '.join(str(a) for a in allowed)}")


def _at_least(owner: object, field: str, value: float | None, minimum: float) -> None:
    if value is not None and value < minimum:
        raise FieldError(owner, field, f"must be at least {minimum}, got {value:g}")


def parse_quantity(value: object, where: str) -> float:
    """Parse a Kubernetes quantity (``500m``, ``2``, ``128Mi``) into a float of base units."""
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if not match:
        raise ScenarioError(
            f"{where}: {value!r} is not a Kubernetes quantity (examples: 500m, 2, 128Mi, 1Gi)"
        )
    return float(match.group(1)) * _FACTORS[match.group(2)]


def _check_keys(data: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    for key in data:
        if key not in allowed:
            raise ScenarioError(f"{where}: unknown key {key!r}; allowed keys: {', '.join(allowed)}")


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ScenarioError(f"{where}: expected a mapping, got {type(value).__name__} {value!r}")
    return value


def _list(value: object, where: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise ScenarioError(f"{where}: expected a list, got {type(value).__name__} {value!r}")
    return list(value)


def _real(value: object, where: str) -> float:
    """A finite number (its range is the object's to check)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ScenarioError(f"{where}: expected a number, got {value!r}")
    return float(value)


def _number(value: object, where: str, *, minimum: float = 0.0) -> float:
    number = _real(value, where)
    if number < minimum:
        raise ScenarioError(f"{where}: must be at least {minimum}, got {value!r}")
    return number


def _items(data: Mapping[str, Any], key: str, where: str, parse: Callable[[Any, str], T]) -> tuple[T, ...]:
    """Parse the list under ``key`` (absent: empty), naming each entry ``where.key[i]``."""
    return tuple(
        parse(item, f"{where}.{key}[{i}]")
        for i, item in enumerate(_list(data.get(key) or [], f"{where}.{key}"))
    )


def _int(value: object, where: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScenarioError(f"{where}: expected an integer, got {value!r}")
    if value < minimum:
        raise ScenarioError(f"{where}: must be at least {minimum}, got {value!r}")
    return value


def _version_text(value: object) -> str:
    """A version as text (YAML reads an unquoted 1.31 as a number); the object checks its form."""
    return str(value) if isinstance(value, str | float) else repr(value)


def _str(value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ScenarioError(f"{where}: expected a non-empty string, got {value!r}")
    return value


RUN_KEYS = ("exit_code", "duration_seconds", "log", "oom", "memory_needed", "xcom", "stop_seconds")


@dataclass(frozen=True)
class RunSpec:
    """How a container started from an image behaves once running."""

    exit_code: int = 0
    duration_seconds: float = 1.0
    log: str = ""
    oom: bool = False
    #: Bytes it needs: OOM-killed halfway through its run when its memory limit is lower.
    memory_needed: float | None = None
    xcom: Any = None  # content of /airflow/xcom/return.json, as JSON; None means an empty file
    #: How long the container takes to exit after SIGTERM (a checkpointing job); None: at once.
    #: The kubelet kills it when the pod's termination grace runs out first.
    stop_seconds: float | None = None

    def __post_init__(self) -> None:
        if (
            isinstance(self.exit_code, bool)
            or not isinstance(self.exit_code, int)
            or not 0 <= self.exit_code <= 255
        ):
            raise FieldError(
                self, "exit_code", f"must be an integer between 0 and 255, got {self.exit_code!r}"
            )
        _at_least(self, "duration_seconds", self.duration_seconds, 0)
        _at_least(self, "stop_seconds", self.stop_seconds, 0)

    @classmethod
    def from_dict(cls, data: object, where: str) -> RunSpec:
        data = _mapping(data, where)
        _check_keys(data, RUN_KEYS, where)
        exit_code = _int(data.get("exit_code", 0), f"{where}.exit_code")
        duration = _real(data.get("duration_seconds", 1.0), f"{where}.duration_seconds")
        log = data.get("log", "")
        if not isinstance(log, str):
            raise ScenarioError(f"{where}.log: expected text, got {log!r}")
        oom = data.get("oom", False)
        if not isinstance(oom, bool):
            raise ScenarioError(f"{where}.oom: expected true or false, got {oom!r}")
        xcom = data.get("xcom")
        try:
            json.dumps(xcom)
        except (TypeError, ValueError) as exc:
            raise ScenarioError(f"{where}.xcom: must be JSON-serializable ({exc})") from None
        stop = _real(data["stop_seconds"], f"{where}.stop_seconds") if "stop_seconds" in data else None
        need = data.get("memory_needed")
        needed = parse_quantity(need, f"{where}.memory_needed") if need is not None else None
        spec = _build(
            cls, where, exit_code=exit_code, duration_seconds=duration, log=log, oom=oom, stop_seconds=stop
        )
        spec = dataclasses.replace(spec, memory_needed=needed, xcom=xcom)
        return dataclasses.replace(spec, exit_code=137) if oom else spec  # the kernel's SIGKILL

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"exit_code": self.exit_code, "duration_seconds": self.duration_seconds}
        if self.log:
            out["log"] = self.log
        if self.oom:
            out["oom"] = True
        if self.memory_needed is not None:
            out["memory_needed"] = self.memory_needed
        if self.xcom is not None:
            out["xcom"] = self.xcom
        if self.stop_seconds is not None:
            out["stop_seconds"] = self.stop_seconds
        return out


@dataclass(frozen=True)
class ImageBehaviour:
    """How the kubelet treats one image reference: ``pull`` holds for ``for_seconds`` from the first
    pull of it anywhere (a registry outage is global) and for the first ``for_pods`` pods to pull it
    (each None: no end); a pull fails while both hold."""

    pull: str = "ok"
    for_seconds: float | None = None
    for_pods: int | None = None
    run: RunSpec = field(default_factory=RunSpec)

    def __post_init__(self) -> None:
        _one_of(self, "pull", self.pull, PULL_BEHAVIOURS)
        _at_least(self, "for_seconds", self.for_seconds, 0)
        _at_least(self, "for_pods", self.for_pods, 1)

    @classmethod
    def from_dict(cls, data: object, where: str) -> ImageBehaviour:
        data = _mapping(data if data is not None else {}, where)
        _check_keys(data, ("pull", "for_seconds", "for_pods", "run"), where)
        seconds, pods = data.get("for_seconds"), data.get("for_pods")
        ends = {
            "for_seconds": None if seconds is None else _real(seconds, f"{where}.for_seconds"),
            "for_pods": None if pods is None else _int(pods, f"{where}.for_pods", minimum=1),
        }
        run = RunSpec.from_dict(data.get("run", {}), f"{where}.run")
        return _build(cls, where, pull=data.get("pull", "ok"), run=run, **ends)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pull": self.pull, "run": self.run.to_dict()}
        ends = {"for_seconds": self.for_seconds, "for_pods": self.for_pods}
        return out | {key: value for key, value in ends.items() if value is not None}


@dataclass(frozen=True)
class ObjectSpec:
    """A Secret or ConfigMap that exists in the cluster. ``data=None`` means any key resolves."""

    name: str
    namespace: str = "default"
    data: Mapping[str, str] | None = None

    @classmethod
    def from_item(cls, item: object, where: str) -> ObjectSpec:
        if isinstance(item, str):
            return cls(name=_str(item, where))
        data = _mapping(item, where)
        _check_keys(data, ("name", "namespace", "data"), where)
        values = data.get("data")
        if values is not None:
            values = {str(k): str(v) for k, v in _mapping(values, f"{where}.data").items()}
        return cls(
            name=_str(data.get("name"), f"{where}.name"),
            namespace=_str(data.get("namespace", "default"), f"{where}.namespace"),
            data=values,
        )

    def to_item(self) -> str | dict[str, Any]:
        if self.namespace == "default" and self.data is None:
            return self.name
        out: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if self.data is not None:
            out["data"] = dict(self.data)
        return out


@dataclass(frozen=True)
class Disruption:
    """Disrupt pods whose name starts with a prefix, ``after_seconds`` after each one is created.

    ``count`` limits how many pods are hit (default 1, so a relaunched pod survives); ``None``
    hits every matching pod. ``admit`` is the one kind that is no disruption: it lifts the pod's
    scheduling gates, as an admission queue (Kueue) does when it admits the pod.
    """

    pod_name_prefix: str
    after_seconds: float
    kind: str
    count: int | None = 1

    def __post_init__(self) -> None:
        _one_of(self, "kind", self.kind, DISRUPTION_KINDS)
        _at_least(self, "after_seconds", self.after_seconds, 0)
        _at_least(self, "count", self.count, 1)

    @classmethod
    def from_dict(cls, data: object, where: str) -> Disruption:
        data = _mapping(data, where)
        _check_keys(data, ("pod_name_prefix", "after_seconds", "kind", "count"), where)
        prefix = data.get("pod_name_prefix", "")
        if not isinstance(prefix, str):
            raise ScenarioError(f"{where}.pod_name_prefix: expected a string, got {prefix!r}")
        count_raw = data.get("count", 1)
        count = None if count_raw in (None, "all") else _int(count_raw, f"{where}.count")
        after = _real(data.get("after_seconds", 0), f"{where}.after_seconds")
        return _build(
            cls, where, pod_name_prefix=prefix, after_seconds=after, kind=data.get("kind"), count=count
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "pod_name_prefix": self.pod_name_prefix,
            "after_seconds": self.after_seconds,
            "kind": self.kind,
            "count": "all" if self.count is None else self.count,
        }


@dataclass(frozen=True)
class Fault:
    """Answer the next ``times`` matching requests with an error instead of serving them.

    ``verb``/``resource`` may be ``*``; ``times=None`` means every matching request. ``slow``
    serves the request normally after ``delay_seconds`` real seconds (client timeouts are real).
    """

    verb: str
    resource: str
    status: int | str
    times: int | None = 1
    delay_seconds: float = 0.0

    def __post_init__(self) -> None:
        _one_of(self, "status", self.status, FAULT_STATUSES)
        _one_of(self, "verb", self.verb, FAULT_VERBS)
        _at_least(self, "times", self.times, 1)
        _at_least(self, "delay_seconds", self.delay_seconds, 0)
        if self.status == "slow" and not self.delay_seconds > 0:
            raise FieldError(
                self, "delay_seconds", f"a slow fault needs a delay above 0, got {self.delay_seconds!r}"
            )

    @classmethod
    def from_dict(cls, data: object, where: str) -> Fault:
        data = _mapping(data, where)
        _check_keys(data, ("verb", "resource", "status", "times", "delay_seconds"), where)
        times_raw = data.get("times", 1)
        return _build(
            cls,
            where,
            verb=data.get("verb", "*"),
            resource=_str(data.get("resource", "*"), f"{where}.resource"),
            status=data.get("status"),
            times=None if times_raw is None else _int(times_raw, f"{where}.times"),
            delay_seconds=_real(data.get("delay_seconds", 0.0), f"{where}.delay_seconds"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "verb": self.verb,
            "resource": self.resource,
            "status": self.status,
            "times": self.times,
        }
        if self.delay_seconds:
            out["delay_seconds"] = self.delay_seconds
        return out


@dataclass(frozen=True)
class NodeSpec:
    """A schedulable node and what it can hold."""

    name: str
    cpu: float = 64.0
    memory: float = 256.0 * 2**30
    pods: int = 100_000
    labels: Mapping[str, str] = field(default_factory=dict)

    def all_labels(self) -> dict[str, str]:
        """The node's labels, with the well-known ones every node carries."""
        return {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **self.labels,
        }

    @classmethod
    def from_dict(cls, data: object, where: str) -> NodeSpec:
        data = _mapping(data, where)
        _check_keys(data, ("name", "cpu", "memory", "pods", "labels"), where)
        labels = {str(k): str(v) for k, v in _mapping(data.get("labels") or {}, f"{where}.labels").items()}
        return cls(
            labels=labels,
            name=_str(data.get("name"), f"{where}.name"),
            cpu=parse_quantity(data.get("cpu", "64"), f"{where}.cpu"),
            memory=parse_quantity(data.get("memory", "256Gi"), f"{where}.memory"),
            pods=_int(data.get("pods", 100_000), f"{where}.pods", minimum=1),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "cpu": self.cpu, "memory": self.memory, "pods": self.pods}
        if self.labels:
            out["labels"] = dict(self.labels)
        return out


@dataclass(frozen=True)
class Autoscaler:
    """A cluster autoscaler: an unschedulable pod triggers a scale-up that adds ``node`` later."""

    scale_up_after_seconds: float = 60.0
    node: NodeSpec = field(default_factory=lambda: NodeSpec(name="autoscaled"))
    max_nodes: int = 10

    @classmethod
    def from_dict(cls, data: object, where: str) -> Autoscaler:
        data = _mapping(data, where)
        _check_keys(data, ("scale_up_after_seconds", "node", "max_nodes"), where)
        node_data = dict(_mapping(data.get("node", {}), f"{where}.node"))
        node_data.setdefault("name", "autoscaled")
        after = _number(data.get("scale_up_after_seconds", 60.0), f"{where}.scale_up_after_seconds")
        return cls(
            scale_up_after_seconds=after,
            node=NodeSpec.from_dict(node_data, f"{where}.node"),
            max_nodes=_int(data.get("max_nodes", 10), f"{where}.max_nodes", minimum=1),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "scale_up_after_seconds": self.scale_up_after_seconds,
            "node": self.node.to_dict(),
            "max_nodes": self.max_nodes,
        }


DEFAULT_NODES = (NodeSpec(name="fake-node-1"),)
TOP_LEVEL_KEYS = (
    "images",
    "secrets",
    "configmaps",
    "disruptions",
    "faults",
    "time_scale",
    "nodes",
    "namespaces",
    "autoscaler",
    "kubernetes_version",
)
_VERSION = re.compile(r"^1\.([0-9]{1,2})$")


@dataclass(frozen=True)
class Scenario:
    """A validated scenario. Build it with :meth:`from_dict` or :meth:`load`.

    Example::

        Scenario.from_dict({"images": {"ghost:1": {"pull": "not_found"}}, "time_scale": 0.01})
    """

    images: Mapping[str, ImageBehaviour] = field(default_factory=dict)
    secrets: tuple[ObjectSpec, ...] = ()
    configmaps: tuple[ObjectSpec, ...] = ()
    disruptions: tuple[Disruption, ...] = ()
    faults: tuple[Fault, ...] = ()
    time_scale: float = 1.0
    nodes: tuple[NodeSpec, ...] = DEFAULT_NODES
    namespaces: tuple[str, ...] = ()
    autoscaler: Autoscaler | None = None
    kubernetes_version: str = "1.31"  # 1.32+ kubelets append the pull error to the back-off message

    def __post_init__(self) -> None:
        if not self.time_scale > 0:
            raise FieldError(self, "time_scale", f"must be greater than 0, got {self.time_scale!r}")
        if not _VERSION.match(self.kubernetes_version):
            raise FieldError(
                self,
                "kubernetes_version",
                f"{self.kubernetes_version!r} is not a 1.N version such as '1.31' (quote it in YAML)",
            )

    @property
    def minor_version(self) -> int:
        return int(self.kubernetes_version.split(".")[1])

    @classmethod
    def from_dict(cls, data: object, where: str = "scenario") -> Scenario:
        if data is None:
            return cls()
        data = _mapping(data, where)
        _check_keys(data, TOP_LEVEL_KEYS, where)
        images_raw = _mapping(data.get("images") or {}, f"{where}.images")
        images = {
            _str(ref, f"{where}.images key"): ImageBehaviour.from_dict(spec, f"{where}.images[{ref!r}]")
            for ref, spec in images_raw.items()
        }
        nodes_raw = data.get("nodes")
        nodes = (
            DEFAULT_NODES
            if nodes_raw is None
            else tuple(
                NodeSpec.from_dict(item, f"{where}.nodes[{i}]")
                for i, item in enumerate(_list(nodes_raw, f"{where}.nodes"))
            )
        )
        autoscaler_raw = data.get("autoscaler")
        autoscaler = (
            None if autoscaler_raw is None else Autoscaler.from_dict(autoscaler_raw, f"{where}.autoscaler")
        )
        return _build(
            cls,
            where,
            images=images,
            secrets=_items(data, "secrets", where, ObjectSpec.from_item),
            configmaps=_items(data, "configmaps", where, ObjectSpec.from_item),
            disruptions=_items(data, "disruptions", where, Disruption.from_dict),
            faults=_items(data, "faults", where, Fault.from_dict),
            time_scale=_real(data.get("time_scale", 1.0), f"{where}.time_scale"),
            nodes=nodes,
            namespaces=_items(data, "namespaces", where, _str),
            autoscaler=autoscaler,
            kubernetes_version=_version_text(data.get("kubernetes_version", "1.31")),
        )

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        """Read a scenario from a ``.yaml``/``.yml`` or ``.json`` file."""
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise ScenarioError(f"cannot read scenario file {str(path)!r}: {exc.strerror}") from None
        if path.suffix == ".json":
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ScenarioError(f"{path}: not valid JSON: {exc}") from None
        else:
            import yaml

            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise ScenarioError(f"{path}: not valid YAML: {exc}") from None
        return cls.from_dict(data, where=path.name)

    @classmethod
    def coerce(cls, value: Scenario | Mapping[str, Any] | str | Path | None) -> Scenario:
        """Accept what :class:`FakeCluster` accepts: a Scenario, a dict, a file path, or None."""
        if isinstance(value, Scenario):
            return value
        if value is None or isinstance(value, Mapping):
            return cls.from_dict(value)
        if isinstance(value, str | Path):
            return cls.load(value)
        raise ScenarioError(
            f"scenario: expected a Scenario, a dict or a file path, got {type(value).__name__}"
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "images": {ref: spec.to_dict() for ref, spec in self.images.items()},
            "secrets": [s.to_item() for s in self.secrets],
            "configmaps": [c.to_item() for c in self.configmaps],
            "disruptions": [d.to_dict() for d in self.disruptions],
            "faults": [f.to_dict() for f in self.faults],
            "time_scale": self.time_scale,
            "nodes": [n.to_dict() for n in self.nodes],
            "namespaces": list(self.namespaces),
        }
        if self.autoscaler is not None:
            out["autoscaler"] = self.autoscaler.to_dict()
        out["kubernetes_version"] = self.kubernetes_version
        return out

    def image(self, ref: str) -> ImageBehaviour | None:
        """The behaviour for an image reference: exact match first, then without tag or digest."""
        if ref in self.images:
            return self.images[ref]
        bare = ref.split("@", 1)[0]
        if bare in self.images:
            return self.images[bare]
        if ":" in bare.rsplit("/", 1)[-1]:
            bare = bare.rsplit(":", 1)[0]
        return self.images.get(bare)
