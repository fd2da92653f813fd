"""The simulator's object store: one resourceVersion sequence, a watch history, and the audit trail.

Like etcd behind the apiserver, every change gets the next resourceVersion and is appended to a
bounded history, so a watch can resume from any version still in the window and gets 410 Gone
for an older one. Each change is serialized once and shared by every watcher, which keeps
thousands of pods and several watchers cheap.

All mutations happen on the simulator's event loop thread; a re-entrant lock also lets other
threads (sync tests, the ``FakeCluster`` accessors) read consistent copies, and a condition is
notified on every change so ``FakeCluster.wait_for`` never polls.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from airflow_k8s_retry_testing.selectors import Matcher

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name)

RESOURCES = (
    "pods",
    "events",
    "namespaces",
    "secrets",
    "configmaps",
    "nodes",
    "jobs",
    "resourcequotas",
    "limitranges",
    "poddisruptionbudgets",
)
KINDS = {
    "pods": "Pod",
    "events": "Event",
    "namespaces": "Namespace",
    "secrets": "Secret",
    "configmaps": "ConfigMap",
    "nodes": "Node",
    "jobs": "Job",
    "resourcequotas": "ResourceQuota",
    "limitranges": "LimitRange",
    "poddisruptionbudgets": "PodDisruptionBudget",
}
#: Resources outside the core group, by their group/version (served under ``/apis/``).
API_VERSIONS = {"jobs": "batch/v1", "poddisruptionbudgets": "policy/v1"}
CLUSTER_SCOPED = frozenset({"namespaces", "nodes"})


def now_iso(t: float | None = None) -> str:
    """RFC 3339 timestamp, seconds precision, as the apiserver writes metadata timestamps."""
    return datetime.fromtimestamp(time.time() if t is None else t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _equality(selector: str, field: str) -> str | None:
    """The value ``field`` must equal in a field selector, if it says so plainly."""
    for part in selector.split(","):
        key, sep, value = part.strip().partition("==")
        if not sep:
            key, sep, value = part.strip().partition("=")
        if sep and key.strip() == field and not key.endswith("!"):
            return value.strip()
    return None


class WatchEvent:
    """One change, serialized once: the bytes every matching watcher writes."""

    __slots__ = ("_obj", "labels", "name", "namespace", "payload", "resource", "rv", "type")

    def __init__(self, rv: int, type_: str, resource: str, obj: Obj) -> None:
        self.rv = rv
        self.type = type_
        self.resource = resource
        meta = obj.get("metadata") or {}
        self.namespace: str = meta.get("namespace", "")
        self.name: str = meta.get("name", "")
        self.labels: dict[str, str] = dict(meta.get("labels") or {})
        self.payload = json.dumps({"type": type_, "object": obj}, separators=(",", ":")).encode() + b"\n"
        self._obj: Obj | None = None

    def obj(self) -> Obj:
        """The object as it was at this version (decoded lazily, only for field selectors)."""
        if self._obj is None:
            self._obj = json.loads(self.payload)["object"]
        return self._obj


class Watcher:
    """A subscriber to changes of one resource, filtered like the apiserver filters a watch."""

    def __init__(
        self, resource: str, namespace: str | None, labels: Matcher, fields: Matcher, *, field_filter: bool
    ) -> None:
        self.resource = resource
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.field_filter = field_filter
        self.queue: asyncio.Queue[WatchEvent] = asyncio.Queue()
        self.dropped = asyncio.Event()  # set to cut this watch short (see FakeCluster.drop_watches)
        self.reset = False  # cut it by resetting the connection instead of ending the stream
        #: Deliver only changes after this version: a watch from a version the store has not reached
        #: yet waits for it, as the API server's watch cache does, instead of replaying older ones.
        self.after = 0

    def matches(self, event: WatchEvent) -> bool:
        if event.resource != self.resource or event.rv <= self.after:
            return False
        if self.namespace is not None and event.namespace != self.namespace:
            return False
        if not self.labels(event.labels):
            return False
        return not self.field_filter or self.fields(event.obj())


class TooOld(Exception):
    """A resourceVersion older than the retained history."""

    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.requested = requested
        self.oldest = oldest


class Audit:
    """Audit records in memory and, optionally, one JSON line each in a file."""

    def __init__(self, path: str | Path | None) -> None:
        self.records: list[Obj] = []
        self.path = Path(path) if path is not None else None
        self._file: IO[str] | None = self.path.open("a", buffering=1) if self.path is not None else None
        self.lock = threading.Lock()

    def write(self, record: Obj) -> None:
        with self.lock:
            self.records.append(record)
            if self._file is not None:
                self._file.write(json.dumps(record, separators=(",", ":")) + "\n")

    def close(self) -> None:
        with self.lock:
            if self._file is not None:
                self._file.close()
                self._file = None


class Store:
    """Objects by resource and (namespace, name), the change history and the watchers."""

    def __init__(self, *, history: int = 20_000, audit: Audit | None = None) -> None:
        self.rv = 0
        self.objects: dict[str, dict[Key, Obj]] = {r: {} for r in RESOURCES}
        self.history: deque[WatchEvent] = deque(maxlen=history)
        self.oldest_rv = 0  # a watch from a resourceVersion below this gets 410 Gone
        self.watchers: set[Watcher] = set()
        #: In-process controllers told of every change (controllers/jobs.py); they act later, not inside.
        self.listeners: list[Callable[[WatchEvent], None]] = []
        self.lock = threading.RLock()
        self.changed = threading.Condition(threading.Lock())
        self.generation = 0
        self.pods_ever: dict[str, Obj] = {}  # uid -> last known pod (deleted ones marked)
        self.audit = audit or Audit(None)
        self.requests: Counter[tuple[str, str]] = Counter()
        self._event_keys: dict[tuple[str, ...], Key] = {}
        # Secrets/ConfigMaps declared by bare name in a scenario: any key lookup in them succeeds.
        self.open_keys: set[tuple[str, str, str]] = set()  # (kind, namespace, name)
        # Events by the (namespace, name) they are about: pod launchers list a pod's events by
        # field selector on every poll, which must not scan every event in the cluster.
        self.events_by_involved: dict[Key, set[Key]] = {}

    # -- reading -------------------------------------------------------------------------------

    def get(self, resource: str, namespace: str, name: str) -> Obj | None:
        return self.objects[resource].get((namespace, name))

    def items(self, resource: str, namespace: str | None = None) -> list[Obj]:
        objs = self.objects[resource]
        if namespace is None:
            return list(objs.values())
        return [o for (ns, _), o in objs.items() if ns == namespace]

    def candidates(self, resource: str, namespace: str | None, field_selector: str | None) -> list[Obj]:
        """Objects a list must look at: narrowed by an index when the field selector allows it."""
        if field_selector:
            name = _equality(field_selector, "metadata.name")
            if name is not None and namespace is not None:
                obj = self.objects[resource].get(("" if resource in CLUSTER_SCOPED else namespace, name))
                return [obj] if obj is not None else []
            involved = _equality(field_selector, "involvedObject.name")
            if resource == "events" and involved is not None:
                spaces = (
                    [namespace]
                    if namespace is not None
                    else sorted({ns for ns, _ in self.events_by_involved})
                )
                keys = [k for ns in spaces for k in self.events_by_involved.get((ns, involved), ())]
                return [self.objects["events"][k] for k in keys if k in self.objects["events"]]
        return self.items(resource, namespace)

    def copy_items(self, resource: str, namespace: str | None = None) -> list[Obj]:
        with self.lock:
            return copy.deepcopy(self.items(resource, namespace))

    def check_rv(self, rv: int) -> None:
        if rv < self.oldest_rv:
            raise TooOld(rv, self.oldest_rv)

    def since(self, rv: int) -> Iterable[WatchEvent]:
        """Changes after ``rv`` still in the history (raises TooOld when the window has moved on)."""
        self.check_rv(rv)
        return [e for e in self.history if e.rv > rv]

    def compact(self) -> None:
        """Forget the history, as etcd compaction does: older resourceVersions become 410 Gone."""
        with self.lock:
            self.history.clear()
            # A watch from the current version misses nothing; only older ones are gone.
            self.oldest_rv = self.rv

    # -- writing (event loop thread only) -------------------------------------------------------

    def next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def put(self, resource: str, obj: Obj, type_: str) -> None:
        """Store ``obj`` (ADDED or MODIFIED) under the next resourceVersion and tell watchers."""
        with self.lock:
            rv = self.next_rv()
            meta = obj.setdefault("metadata", {})
            meta["resourceVersion"] = str(rv)
            key = (meta.get("namespace", ""), meta["name"])
            self.objects[resource][key] = obj
            if resource == "events":
                involved = obj.get("involvedObject") or {}
                self.events_by_involved.setdefault(
                    (involved.get("namespace", ""), involved.get("name", "")), set()
                ).add(key)
            if resource == "pods":
                self.pods_ever[meta["uid"]] = obj
            self._emit(WatchEvent(rv, type_, resource, obj))

    def remove(self, resource: str, namespace: str, name: str) -> Obj | None:
        """Delete the object for good and send DELETED with its final state."""
        with self.lock:
            obj = self.objects[resource].pop((namespace, name), None)
            if obj is None:
                return None
            if resource == "events":
                involved = obj.get("involvedObject") or {}
                self.events_by_involved.get(
                    (involved.get("namespace", ""), involved.get("name", "")), set()
                ).discard((namespace, name))
            rv = self.next_rv()
            obj["metadata"]["resourceVersion"] = str(rv)
            if resource == "pods":
                # The API server marks every pod it deletes, a deletion with no grace period too.
                obj["metadata"].setdefault("deletionTimestamp", now_iso())
                obj["metadata"].setdefault("deletionGracePeriodSeconds", 0)
                final = copy.deepcopy(obj)
                final["deleted"] = True
                final["metadata"].setdefault("deletionTimestamp", now_iso())
                self.pods_ever[obj["metadata"]["uid"]] = final
            self._emit(WatchEvent(rv, "DELETED", resource, obj))
            return obj

    def _emit(self, event: WatchEvent) -> None:
        if self.history.maxlen is not None and len(self.history) == self.history.maxlen:
            self.oldest_rv = self.history[0].rv
        self.history.append(event)
        for watcher in self.watchers:
            if watcher.matches(event):
                watcher.queue.put_nowait(event)
        for listener in self.listeners:
            listener(event)
        self.notify()

    def notify(self) -> None:
        with self.changed:
            self.generation += 1
            self.changed.notify_all()

    # -- events ------------------------------------------------------------------------------

    def record_event(
        self,
        involved: Mapping[str, Any],
        reason: str,
        message: str,
        *,
        type_: str = "Normal",
        component: str = "kubelet",
        host: str | None = None,
        field_path: str | None = None,
        kind: str = "Pod",
    ) -> Obj:
        """Create an Event, or bump ``count`` of an identical recent one as the kubelet's recorder does."""
        meta = involved["metadata"]
        namespace = meta.get("namespace", "default")
        key = (meta.get("uid", ""), reason, message, type_, component, field_path or "")
        now = time.time()
        existing_key = self._event_keys.get(key)
        with self.lock:
            existing = self.objects["events"].get(existing_key) if existing_key else None
            if existing is not None:
                existing = copy.deepcopy(existing)
                existing["count"] = int(existing.get("count", 1)) + 1
                existing["lastTimestamp"] = now_iso(now)
                self.put("events", existing, "MODIFIED")
                return existing
            name = f"{meta['name']}.{uuid.uuid4().hex[:16]}"
            involved_ref: Obj = {
                "kind": kind,
                "namespace": namespace,
                "name": meta["name"],
                "uid": meta.get("uid", ""),
                "apiVersion": "v1",
                "resourceVersion": meta.get("resourceVersion", ""),
            }
            if field_path:
                involved_ref["fieldPath"] = field_path
            source: Obj = {"component": component}
            if host:
                source["host"] = host
            event: Obj = {
                "kind": "Event",
                "apiVersion": "v1",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": str(uuid.uuid4()),
                    "creationTimestamp": now_iso(now),
                },
                "involvedObject": involved_ref,
                "reason": reason,
                "message": message,
                "source": source,
                "firstTimestamp": now_iso(now),
                "lastTimestamp": now_iso(now),
                "count": 1,
                "type": type_,
                "eventTime": None,
                "reportingComponent": component,
                "reportingInstance": host or "",
            }
            self._event_keys[key] = (namespace, name)
            self.put("events", event, "ADDED")
            return event

    # -- audit ---------------------------------------------------------------------------------

    def lifecycle(self, pod: Mapping[str, Any], change: str, **extra: Any) -> None:
        meta = pod["metadata"]
        record: Obj = {
            "t": time.time(),
            "kind": "lifecycle",
            "namespace": meta.get("namespace"),
            "name": meta.get("name"),
            "uid": meta.get("uid"),
            "change": change,
            "resourceVersion": meta.get("resourceVersion"),
        }
        record.update(extra)
        self.audit.write(record)
