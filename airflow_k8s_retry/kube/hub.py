"""One LIST+WATCH per (cluster, label selector) per event loop, shared by every trigger.

A triggerer process runs hundreds of triggers in one event loop. If each watched (or polled) its
own pod, API load would grow with the number of pods. Here the first trigger that subscribes
starts a *feed*: one LIST, then one WATCH resumed from the last resourceVersion, and the same for
pod Events. Changes fan out to subscribers by namespace, name and UID. The last subscriber out
stops the feed and closes the client.

Scope: a feed covers the whole cluster when RBAC allows it (a ClusterRole with ``list`` and
``watch`` on pods and events, ``deploy/rbac/``), so 500 namespaces cost two watches, not a
thousand. The first ``403`` at the cluster scope moves every subscriber of that feed to a feed per
namespace (a namespaced Role is enough for those) and the hub never tries the cluster scope for
that selector again. A subscription without a label selector (the sensor's) always has a feed per
namespace: a cluster-wide watch of every pod would be far too much. Set
``AIRFLOW_K8S_RETRY_WATCH_SCOPE=namespace`` to skip the cluster scope altogether.

Failure handling, so no change is lost and none is delivered twice:

* the watch resumes from the last resourceVersion it saw (bookmarks included);
* ``410 Gone`` re-lists and diffs against the cache: changed pods are delivered, vanished pods
  are delivered as deleted;
* ``5xx``, ``429`` and dropped connections reconnect after a capped, jittered backoff;
* ``401`` reloads the cluster credentials (short-lived tokens) before reconnecting;
* ``403`` on WATCH falls back to a LIST every ``poll_interval``; ``403`` on LIST to a GET per
  subscribed pod every ``poll_interval`` (each logged once, naming the verb and resource);
* every delivery is de-duplicated per subscriber by resourceVersion.

A *follower* (:meth:`WatchHub.follow`) reads every object of a feed instead of one pod: a sensor
waiting for a pod to appear, following the newest pod of a selector, or following a Job (the
namespace's ``batch/v1`` Jobs have a feed of their own, for followers only). Followers always
read a feed of their own namespace.

Connections: watches and short requests use separate connection pools (``kube.aio.AsyncKube``),
so a thousand open watches can never make a last look or ``on_kill``'s DELETE wait for a slot.
Credentials are loaded outside any lock and with a time limit, so a credential plugin that hangs
stalls only the triggers of its own cluster.

Feeds are keyed by the running event loop as well, because ``airflow dags test`` runs each trigger
in its own ``asyncio.run`` and a client must never outlive its loop.

Example::

    hub = WatchHub.current()
    sub = await hub.subscribe(config, "default", "my-pod", uid, label_selector=MANAGED_SELECTOR)
    try:
        while True:
            await sub.wait(within=30)
            for change in sub.drain():
                ...
    finally:
        await sub.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import random
import weakref
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from airflow_k8s_retry.kube.aio import AsyncKube, Json, Listing, WatchEvent
from airflow_k8s_retry.kube.config import ClusterConfig
from airflow_k8s_retry.kube.errors import Forbidden, Gone, KubeError, NotFound, Unauthorized

log = logging.getLogger(__name__)

POD_EVENTS_SELECTOR = "involvedObject.kind=Pod"
#: How many Events are kept per pod (the newest win).
EVENTS_PER_POD = 64
#: How many pods' Events a feed keeps for pods nobody follows yet (a trigger may subscribe to a pod
#: a moment after it was created); the longest-unchanged go first.
EVENT_PODS_KEPT = 10_000
#: Environment variable: ``namespace`` keeps every feed to one namespace (no cluster-wide watch).
WATCH_SCOPE_ENV = "AIRFLOW_K8S_RETRY_WATCH_SCOPE"

#: A pod's place: (namespace, name).
PodKey = tuple[str, str]


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _rv_newer(new: str | None, old: str | None) -> bool:
    """True unless ``new`` is provably the same as or older than ``old``.

    resourceVersions are opaque, but every real API server uses etcd revisions (integers); when both
    look like integers they are compared, otherwise only equality counts as "not newer".
    """
    if not new or not old:
        return True
    if new == old:
        return False
    if new.isdigit() and old.isdigit():
        return int(new) > int(old)
    return True


@dataclass(frozen=True)
class PodChange:
    """A new state of the subscribed pod. ``pod`` is None when it is gone and its last state unknown."""

    pod: Json | None
    deleted: bool = False

    @property
    def resource_version(self) -> str | None:
        if self.pod is None:
            return None
        rv = _meta(self.pod).get("resourceVersion")
        return str(rv) if rv else None


class Backoff:
    """Capped exponential backoff with full jitter; :meth:`reset` after a success."""

    def __init__(self, base: float = 0.5, cap: float = 30.0, rng: random.Random | None = None) -> None:
        self.base = base
        self.cap = cap
        self.attempt = 0
        self._rng = rng or random.Random()

    def next(self) -> float:
        ceiling = min(self.cap, self.base * (2**self.attempt))
        self.attempt = min(self.attempt + 1, 30)
        return self._rng.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.attempt = 0


@dataclass
class _Connection:
    config: ClusterConfig
    kube: AsyncKube
    refs: int = 0


class PodSubscription:
    """One trigger's view of one pod: its changes in order, and its Events.

    Read with :meth:`wait` then :meth:`drain`; :attr:`events` always holds the Events seen so far.
    """

    def __init__(
        self,
        hub: WatchHub,
        conn: _Connection,
        namespace: str,
        name: str,
        uid: str | None,
        *,
        poll_interval: float = 10.0,
    ) -> None:
        self.hub = hub
        self.namespace = namespace
        self.name = name
        self.uid = uid
        self.poll_interval = poll_interval
        self._conn = conn
        self._changes: deque[PodChange] = deque()
        self._events: dict[str, Json] = {}
        self._events_changed = False
        self._wakeup = asyncio.Event()
        self._last_rv: str | None = None
        self._gone = False
        self._feeds: list[_Feed] = []
        self.closed = False

    @property
    def key(self) -> PodKey:
        return (self.namespace, self.name)

    @property
    def kube(self) -> AsyncKube:
        """The shared client, for the occasional direct call (last look, annotations)."""
        return self._conn.kube

    @property
    def events(self) -> list[Json]:
        return sorted(self._events.values(), key=_event_sort_key)

    def offer(self, change: PodChange) -> None:
        """Queue a change unless it is a duplicate, stale, or about another pod of the same name."""
        if self.closed:
            return
        pod = change.pod
        if pod is not None:
            uid = _meta(pod).get("uid")
            if self.uid and uid and uid != self.uid:
                # Same name, another pod: ours was deleted and replaced.
                if self._gone:
                    return
                change = PodChange(pod=None, deleted=True)
            elif self.uid is None and uid:
                self.uid = str(uid)
        if change.deleted:
            if self._gone:
                return
            self._gone = True
        else:
            if self._gone:
                return
            rv = change.resource_version
            if not _rv_newer(rv, self._last_rv):
                return
            self._last_rv = rv
        self._changes.append(change)
        self._wakeup.set()

    def revive(self, pod: Json) -> None:
        """The pod was reported gone but is still there (read directly): follow it again.

        A watch reports DELETED when a pod stops matching its label selector (a label edited off),
        and a re-list misses such a pod too; the pod itself lives on. Without this, every later
        change of the pod would be dropped as news about a gone pod.
        """
        self._gone = False
        self._last_rv = None
        self.offer(PodChange(pod=pod))

    def _offer_event(self, event: Json) -> None:
        if self.closed:
            return
        meta = _meta(event)
        key = str(meta.get("name") or meta.get("uid") or id(event))
        old = self._events.get(key)
        if old is not None and not _rv_newer(
            str(_meta(event).get("resourceVersion") or ""), str(_meta(old).get("resourceVersion") or "")
        ):
            return
        self._events[key] = event
        if len(self._events) > EVENTS_PER_POD:
            oldest = min(self._events, key=lambda k: _event_sort_key(self._events[k]))
            del self._events[oldest]
        self._events_changed = True
        self._wakeup.set()

    def drain(self) -> list[PodChange]:
        """The pod changes received since the last call, oldest first."""
        changes = list(self._changes)
        self._changes.clear()
        self._events_changed = False
        self._wakeup.clear()
        return changes

    @property
    def events_changed(self) -> bool:
        return self._events_changed

    @property
    def pending(self) -> bool:
        return bool(self._changes) or self._events_changed

    async def wait(self, within: float | None = None) -> bool:
        """Wait until something new arrived, at most ``within`` seconds; False when nothing did."""
        if self.pending:
            return True
        self._wakeup.clear()
        try:
            await asyncio.wait_for(self._wakeup.wait(), within)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        """Unsubscribe; idempotent. The last subscriber of a feed stops it."""
        if self.closed:
            return
        self.closed = True
        self._wakeup.set()
        await self.hub._unsubscribe(self)


class _Feed:
    """One LIST+WATCH (or its polling fallback) over one collection, fanning out to subscribers.

    ``namespace`` is None for a feed over every namespace.
    """

    kind = "objects"

    def __init__(self, hub: WatchHub, conn: _Connection, namespace: str | None, selector: str | None) -> None:
        self.hub = hub
        self.conn = conn
        self.namespace = namespace
        self.selector = selector
        self.subscribers: set[PodSubscription] = set()
        self.synced = asyncio.Event()
        self.mode = "watch"
        self.poll_interval = 10.0
        self.task: asyncio.Task[None] | None = None
        self.resource_version: str | None = None
        self.counts: dict[str, int] = {"list": 0, "watch": 0, "get": 0, "relist_410": 0, "errors": 0}
        self._backoff = Backoff(base=hub.backoff_base, cap=hub.backoff_cap)

    @property
    def where(self) -> str:
        return f"namespace {self.namespace}" if self.namespace is not None else "all namespaces"

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(
            self._run(), name=f"airflow-k8s-retry {self.kind} feed {self.where}"
        )

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
            self.task = None

    # -- subclass hooks -----------------------------------------------------------------------

    async def _list(self) -> Listing:
        raise NotImplementedError

    def _watch(self, resource_version: str) -> Any:
        raise NotImplementedError

    def _resync(self, items: list[Json]) -> None:
        raise NotImplementedError

    def _apply(self, event: WatchEvent) -> None:
        raise NotImplementedError

    def add(self, sub: PodSubscription) -> None:
        raise NotImplementedError

    def remove(self, sub: PodSubscription) -> None:
        raise NotImplementedError

    async def _poll_without_list(self) -> None:
        """Polling when even LIST is forbidden; the default gives up on this feed's data."""
        self.synced.set()

    def idle(self) -> bool:
        """True when nobody reads this feed any more (the last one out stops it)."""
        return not self.subscribers

    # -- the loop -----------------------------------------------------------------------------

    async def _run(self) -> None:
        step = "list"
        while True:
            try:
                if self.mode == "watch":
                    if self.resource_version is None:
                        step = "list"
                        await self._relist()
                    step = "watch"
                    await self._watch_once()
                elif self.mode == "poll-list":
                    step = "list"
                    await self._relist()
                    await asyncio.sleep(self.poll_interval)
                else:
                    step = "get"
                    await self._poll_without_list()
                    await asyncio.sleep(self.poll_interval)
            except asyncio.CancelledError:
                raise
            except Gone:
                self.counts["relist_410"] += 1
                log.info("%s watch in %s expired (410 Gone); re-listing", self.kind, self.where)
                self.resource_version = None
                if self._backoff.attempt:
                    # Gone again before anything came through: do not re-list in a tight loop.
                    await asyncio.sleep(self._backoff.next())
                else:
                    self._backoff.attempt = 1
            except Forbidden as exc:
                self.counts["errors"] += 1
                if self.namespace is None:
                    # The cluster scope is not granted (a namespaced Role only): a feed per namespace.
                    self.hub._demote(self, step, exc)
                    return
                if step == "watch" and self.mode == "watch":
                    log.error(
                        "RBAC: may not watch %s in %s, polling with LIST every %.0f s instead: %s",
                        self.kind, self.where, self.poll_interval, exc,
                    )
                    self.mode = "poll-list"
                elif step == "list" and self.mode != "poll-get":
                    instead = (
                        f"reading each pod every {self.poll_interval:.0f} s instead"
                        if self.kind == "pods"
                        else "classifying without Events"
                    )
                    log.error("RBAC: may not list %s in %s, %s: %s", self.kind, self.where, instead, exc)
                    self.mode = "poll-get"
                else:
                    await asyncio.sleep(max(self.poll_interval, self._backoff.next()))
            except Unauthorized as exc:
                self.counts["errors"] += 1
                log.warning("%s feed in %s: %s; reloading credentials", self.kind, self.where, exc)
                await asyncio.sleep(self._backoff.next())
                await self.conn.kube.reauthenticate()
            except KubeError as exc:
                self.counts["errors"] += 1
                delay = self._backoff.next()
                log.warning(
                    "%s %s in %s failed (%s); retrying in %.1f s", self.kind, step, self.where, exc, delay
                )
                await asyncio.sleep(delay)
            except Exception:
                # A bug here must not kill every trigger in the process silently.
                self.counts["errors"] += 1
                log.exception("%s feed in %s failed unexpectedly", self.kind, self.where)
                await asyncio.sleep(self._backoff.next())

    async def _relist(self) -> None:
        self.counts["list"] += 1
        listing = await self._list()
        self._resync(listing.items)
        # An API server always sends a collection version; without one, watch "from now" rather
        # than re-listing in a loop.
        self.resource_version = listing.resource_version
        self.synced.set()

    async def _watch_once(self) -> None:
        self.counts["watch"] += 1
        rv = self.resource_version or ""
        loop = asyncio.get_running_loop()
        opened = loop.time()
        received = 0
        stream = self._watch(rv)
        async with contextlib.aclosing(stream):
            async for event in stream:
                received += 1
                self._backoff.reset()
                if event.type != "BOOKMARK":
                    self._apply(event)
                if event.resource_version:
                    self.resource_version = event.resource_version
        if not received and loop.time() - opened < 1.0:
            # Closed at once with nothing in it (a proxy, an overloaded server): back off, or this
            # loop would hammer the API.
            await asyncio.sleep(self._backoff.next())

    def _key_of(self, obj: Mapping[str, Any], name: str) -> PodKey | None:
        namespace = _meta(obj).get("namespace") or self.namespace
        if not name or not namespace:
            return None
        return (str(namespace), name)


class _PodFeed(_Feed):
    kind = "pods"

    def __init__(self, hub: WatchHub, conn: _Connection, namespace: str | None, selector: str | None) -> None:
        super().__init__(hub, conn, namespace, selector)
        self.cache: dict[PodKey, Json] = {}
        self.by_key: dict[PodKey, set[PodSubscription]] = {}
        self.followers: set[CollectionSubscription] = set()
        self._confirming: set[asyncio.Task[None]] = set()

    async def _list(self) -> Listing:
        return await self.conn.kube.list_pods(self.namespace, label_selector=self.selector)

    def _watch(self, resource_version: str) -> Any:
        return self.conn.kube.watch_pods(
            self.namespace,
            resource_version=resource_version,
            label_selector=self.selector,
            timeout_seconds=random.randint(*self.hub.watch_timeout),
        )

    def _pod_key(self, pod: Mapping[str, Any]) -> PodKey | None:
        return self._key_of(pod, str(_meta(pod).get("name") or ""))

    def _deliver(self, key: PodKey, change: PodChange) -> None:
        for sub in list(self.by_key.get(key, ())):
            sub.offer(change)
        for follower in list(self.followers):
            follower.offer(key[1], change)

    def _resync(self, items: list[Json]) -> None:
        fresh: dict[PodKey, Json] = {}
        for pod in items:
            key = self._pod_key(pod)
            if key is not None:
                fresh[key] = pod
        for key, last in list(self.cache.items()):
            if key not in fresh:
                self._deliver(key, PodChange(pod=last, deleted=True))
        first = not self.synced.is_set()
        for key, pod in fresh.items():
            old = self.cache.get(key)
            if old is None or _rv_newer(_meta(pod).get("resourceVersion"), _meta(old).get("resourceVersion")):
                self._deliver(key, PodChange(pod=pod))
        self.cache = fresh
        if first:
            for key in list(self.by_key):
                if key not in fresh:
                    self._confirm_later(key)

    def _apply(self, event: WatchEvent) -> None:
        pod = event.object
        key = self._pod_key(pod)
        if key is None:
            return
        if event.type == "DELETED":
            self.cache.pop(key, None)
            self._deliver(key, PodChange(pod=pod, deleted=True))
            return
        old = self.cache.get(key)
        if old is not None and not _rv_newer(
            _meta(pod).get("resourceVersion"), _meta(old).get("resourceVersion")
        ):
            return
        self.cache[key] = pod
        self._deliver(key, PodChange(pod=pod))

    async def _poll_without_list(self) -> None:
        for key in list(self.by_key):
            await self._get_one(key)
        self.synced.set()

    async def _get_one(self, key: PodKey) -> None:
        self.counts["get"] += 1
        namespace, name = key
        try:
            pod = await self.conn.kube.read_pod(namespace, name)
        except NotFound:
            old = self.cache.pop(key, None)
            self._deliver(key, PodChange(pod=old, deleted=True))
            return
        old = self.cache.get(key)
        if old is None or _rv_newer(_meta(pod).get("resourceVersion"), _meta(old).get("resourceVersion")):
            self.cache[key] = pod
        self._deliver(key, PodChange(pod=pod))

    def add(self, sub: PodSubscription) -> None:
        self.subscribers.add(sub)
        self.by_key.setdefault(sub.key, set()).add(sub)
        self.poll_interval = min(self.poll_interval, sub.poll_interval)
        if not self.synced.is_set():
            return  # the first LIST delivers (or confirms) every subscriber's pod
        pod = self.cache.get(sub.key)
        if pod is not None:
            sub.offer(PodChange(pod=pod))
        elif self.mode != "poll-get":
            self._confirm_later(sub.key)

    def _confirm_later(self, key: PodKey) -> None:
        """A subscribed pod the feed has not seen: the watch may just be behind. Give it a moment,
        then GET the pod once, so a pod created a moment ago is not mistaken for a deleted one."""

        async def confirm() -> None:
            await asyncio.sleep(self.hub.confirm_delay)
            if key in self.cache or key not in self.by_key:
                return
            try:
                await self._get_one(key)
            except KubeError as exc:
                log.info("could not confirm pod %s/%s (%s); waiting for the watch", *key, exc)

        task = asyncio.get_running_loop().create_task(confirm())
        self._confirming.add(task)
        task.add_done_callback(self._confirming.discard)

    def follow(self, follower: CollectionSubscription) -> None:
        self.followers.add(follower)
        if self.synced.is_set():
            follower.seed({name: pod for (_, name), pod in self.cache.items()})

    def idle(self) -> bool:
        return not self.subscribers and not self.followers

    def remove(self, sub: PodSubscription | CollectionSubscription) -> None:
        if isinstance(sub, CollectionSubscription):
            self.followers.discard(sub)
            return
        self.subscribers.discard(sub)
        subs = self.by_key.get(sub.key)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self.by_key[sub.key]

    def cancel_confirmations(self) -> None:
        for task in list(self._confirming):
            task.cancel()

    async def stop(self) -> None:
        self.cancel_confirmations()
        await super().stop()


class _EventFeed(_Feed):
    """Pod Events, kept per pod (the newest :data:`EVENTS_PER_POD`) and indexed by subscriber.

    Deliveries look subscribers up by pod, so a re-list after a 410 costs O(events), not
    O(events x subscribers).
    """

    kind = "events"

    def __init__(self, hub: WatchHub, conn: _Connection, namespace: str | None) -> None:
        super().__init__(hub, conn, namespace, POD_EVENTS_SELECTOR)
        self.by_pod: dict[PodKey, dict[str, Json]] = {}
        self.by_key: dict[PodKey, set[PodSubscription]] = {}

    async def _list(self) -> Listing:
        return await self.conn.kube.list_events(self.namespace, field_selector=self.selector)

    def _watch(self, resource_version: str) -> Any:
        return self.conn.kube.watch_events(
            self.namespace,
            resource_version=resource_version,
            field_selector=self.selector,
            timeout_seconds=random.randint(*self.hub.watch_timeout),
        )

    def _pod_key(self, event: Mapping[str, Any]) -> PodKey | None:
        involved = event.get("involvedObject") or {}
        if involved.get("kind") not in (None, "Pod"):
            return None
        name = str(involved.get("name") or "")
        namespace = involved.get("namespace") or _meta(event).get("namespace") or self.namespace
        if not name or not namespace:
            return None
        return (str(namespace), name)

    def _keep(self, event: Json) -> PodKey | None:
        key = self._pod_key(event)
        if key is None:
            return None
        bucket = self.by_pod.pop(key, None) or {}
        self.by_pod[key] = bucket  # most recently changed last
        bucket[str(_meta(event).get("name") or id(event))] = event
        if len(bucket) > EVENTS_PER_POD:
            oldest = min(bucket, key=lambda k: _event_sort_key(bucket[k]))
            del bucket[oldest]
        if len(self.by_pod) > EVENT_PODS_KEPT:
            # Prune to 90% at once, so the scan is paid once per thousand pods, not per event.
            excess = len(self.by_pod) - int(EVENT_PODS_KEPT * 0.9)
            for stale in [k for k in self.by_pod if k not in self.by_key][:excess]:
                del self.by_pod[stale]
        return key

    def _deliver(self, key: PodKey, event: Json) -> None:
        for sub in list(self.by_key.get(key, ())):
            if _event_matches(event, sub.uid):
                sub._offer_event(event)

    def _resync(self, items: list[Json]) -> None:
        self.by_pod = {}
        for event in sorted(items, key=_event_sort_key):
            key = self._keep(event)
            if key is not None:
                self._deliver(key, event)

    def _apply(self, event: WatchEvent) -> None:
        if event.type == "DELETED":
            return  # Events expire; what a pod went through stays evidence.
        key = self._keep(event.object)
        if key is not None:
            self._deliver(key, event.object)

    def add(self, sub: PodSubscription) -> None:
        self.subscribers.add(sub)
        self.by_key.setdefault(sub.key, set()).add(sub)
        self.poll_interval = min(self.poll_interval, sub.poll_interval)
        for event in sorted(self.by_pod.get(sub.key, {}).values(), key=_event_sort_key):
            if _event_matches(event, sub.uid):
                sub._offer_event(event)

    def remove(self, sub: PodSubscription) -> None:
        self.subscribers.discard(sub)
        subs = self.by_key.get(sub.key)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self.by_key[sub.key]
                self.by_pod.pop(sub.key, None)


class CollectionSubscription:
    """Every object of one feed, whatever its name: the pods of a label selector, or the Jobs of a
    namespace. For a follower that does not know yet which object it waits for (a sensor waiting
    for a pod to appear, or following a Job's pods as they are replaced).

    Read with :meth:`wait` then :meth:`drain`; :attr:`objects` is the feed's view, by name.
    """

    def __init__(self, hub: WatchHub, conn: _Connection, feed: _PodFeed | _JobFeed) -> None:
        self.hub = hub
        self._conn = conn
        self._feed = feed
        self.objects: dict[str, Json] = {}
        self._changed = False
        self._wakeup = asyncio.Event()
        self.closed = False

    @property
    def kube(self) -> AsyncKube:
        return self._conn.kube

    @property
    def synced(self) -> bool:
        """True once the feed's first LIST is in: an empty :attr:`objects` then means "none yet"."""
        return self._feed.synced.is_set()

    def seed(self, cache: Mapping[str, Json]) -> None:
        for name, obj in cache.items():
            self.offer(name, PodChange(pod=obj))

    def offer(self, name: str, change: PodChange) -> None:
        if self.closed:
            return
        if change.deleted:
            if self.objects.pop(name, None) is None:
                return
        else:
            if change.pod is None:
                return
            old = self.objects.get(name)
            if old is not None and not _rv_newer(
                change.resource_version, str(_meta(old).get("resourceVersion") or "") or None
            ):
                return
            self.objects[name] = change.pod
        self._changed = True
        self._wakeup.set()

    @property
    def pending(self) -> bool:
        return self._changed

    def drain(self) -> bool:
        """Whether anything changed since the last call."""
        changed, self._changed = self._changed, False
        self._wakeup.clear()
        return changed

    async def wait(self) -> None:
        """Until something changes."""
        if self._changed:
            return
        self._wakeup.clear()
        await self._wakeup.wait()

    async def close(self) -> None:
        """Stop following; idempotent. The last reader of a feed stops it."""
        if self.closed:
            return
        self.closed = True
        self._wakeup.set()
        await self.hub._unfollow(self)


class _JobFeed(_Feed):
    """The ``batch/v1`` Jobs of one namespace, for followers only."""

    kind = "jobs"

    def __init__(self, hub: WatchHub, conn: _Connection, namespace: str) -> None:
        super().__init__(hub, conn, namespace, None)
        self.job_namespace = namespace
        self.cache: dict[str, Json] = {}
        self.followers: set[CollectionSubscription] = set()

    async def _list(self) -> Listing:
        return await self.conn.kube.list_jobs(self.job_namespace)

    def _watch(self, resource_version: str) -> Any:
        return self.conn.kube.watch_jobs(
            self.job_namespace,
            resource_version=resource_version,
            timeout_seconds=random.randint(*self.hub.watch_timeout),
        )

    def _deliver(self, name: str, change: PodChange) -> None:
        for follower in list(self.followers):
            follower.offer(name, change)

    def _resync(self, items: list[Json]) -> None:
        fresh = {str(_meta(j).get("name")): j for j in items if _meta(j).get("name")}
        for name, last in list(self.cache.items()):
            if name not in fresh:
                self._deliver(name, PodChange(pod=last, deleted=True))
        for name, job in fresh.items():
            self._deliver(name, PodChange(pod=job))
        self.cache = fresh

    def _apply(self, event: WatchEvent) -> None:
        name = str(_meta(event.object).get("name") or "")
        if not name:
            return
        if event.type == "DELETED":
            self.cache.pop(name, None)
            self._deliver(name, PodChange(pod=event.object, deleted=True))
            return
        self.cache[name] = event.object
        self._deliver(name, PodChange(pod=event.object))

    def follow(self, follower: CollectionSubscription) -> None:
        self.followers.add(follower)
        if self.synced.is_set():
            follower.seed(self.cache)

    def idle(self) -> bool:
        return not self.followers


def _event_matches(event: Mapping[str, Any], uid: str | None) -> bool:
    event_uid = (event.get("involvedObject") or {}).get("uid")
    return not uid or not event_uid or event_uid == uid


def _event_sort_key(event: Mapping[str, Any]) -> tuple[str, str]:
    stamp = (
        event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or _meta(event).get("creationTimestamp")
        or ""
    )
    return str(stamp), str(_meta(event).get("resourceVersion") or "")


@dataclass
class FeedStats:
    """What a feed has done, for tests and logs. ``namespace`` is None for a cluster-wide feed."""

    namespace: str | None
    selector: str | None
    kind: str
    mode: str
    subscribers: int
    counts: dict[str, int] = field(default_factory=dict)


#: Feed keys: (cluster key, namespace or None for all, label selector) for pods; events have none.
_FeedKey = tuple[str, str | None, str | None]


class WatchHub:
    """The feeds and clients of one event loop. Get it with :meth:`current`."""

    _hubs: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, WatchHub]] = (
        weakref.WeakKeyDictionary()
    )
    #: Reconnect backoff bounds, in seconds.
    backoff_base: ClassVar[float] = 0.5
    backoff_cap: ClassVar[float] = 30.0
    #: How long a subscribed pod may be missing from the watch before it is fetched once.
    confirm_delay: ClassVar[float] = 2.0
    #: Server-side watch timeout range, in seconds (a random value in it per watch request, so that
    #: watches of many namespaces do not reconnect in lockstep). The apiserver's own limit (its
    #: --min-request-timeout, 1800 s by default, randomised up to twice that) is the same range, so
    #: a watch is re-opened about once every 30 to 60 minutes; bookmarks keep it alive meanwhile,
    #: and a watch silent for longer than ``kube.aio.WATCH_IDLE_LIMIT`` is re-opened at once.
    watch_timeout: ClassVar[tuple[int, int]] = (1800, 3600)
    #: ``cluster``: one feed over all namespaces where RBAC allows (else one per namespace);
    #: ``namespace``: always one per namespace. The environment variable overrides it.
    watch_scope: ClassVar[str] = "cluster"

    def __init__(self) -> None:
        self._connections: dict[str, _Connection] = {}
        self._connecting: dict[str, asyncio.Future[AsyncKube]] = {}
        self._pod_feeds: dict[_FeedKey, _PodFeed] = {}
        self._event_feeds: dict[_FeedKey, _EventFeed] = {}
        self._job_feeds: dict[tuple[str, str], _JobFeed] = {}
        #: (cluster key, kind, selector) whose cluster-wide feed RBAC refused.
        self._cluster_denied: set[tuple[str, str, str | None]] = set()
        scope = os.environ.get(WATCH_SCOPE_ENV) or type(self).watch_scope
        if scope not in ("cluster", "namespace"):
            raise ValueError(f"{WATCH_SCOPE_ENV}={scope!r}: use 'cluster' or 'namespace'")
        self.scope = scope

    @classmethod
    def current(cls) -> WatchHub:
        """The hub of the running event loop (created on first use)."""
        loop = asyncio.get_running_loop()
        hub = cls._hubs.get(loop)
        if hub is None:
            hub = cls._hubs[loop] = cls()
        return hub

    async def subscribe(
        self,
        config: ClusterConfig,
        namespace: str,
        name: str,
        uid: str | None,
        *,
        label_selector: str | None,
        poll_interval: float = 10.0,
        events: bool = True,
    ) -> PodSubscription:
        """Follow one pod (and its Events) through the shared feeds of its cluster or namespace."""
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be a positive number of seconds, got {poll_interval!r}")
        conn = await self._acquire(config)
        # From here on nothing awaits: feeds are found or made atomically on the event loop.
        sub = PodSubscription(self, conn, namespace, name, uid, poll_interval=poll_interval)
        self._attach(sub, _PodFeed, label_selector)
        if events:
            self._attach(sub, _EventFeed, POD_EVENTS_SELECTOR)
        return sub

    def _cluster_wide(self, config: ClusterConfig, kind: str, selector: str | None) -> bool:
        if self.scope != "cluster" or (kind == "pods" and selector is None):
            return False
        return (config.key, kind, selector) not in self._cluster_denied

    def _attach(
        self, sub: PodSubscription, feed_type: type[_PodFeed] | type[_EventFeed], selector: str | None
    ) -> None:
        conn = sub._conn
        kind = feed_type.kind
        scope = None if self._cluster_wide(conn.config, kind, selector) else sub.namespace
        feeds: dict[_FeedKey, Any] = self._pod_feeds if feed_type is _PodFeed else self._event_feeds
        key: _FeedKey = (conn.config.key, scope, selector)
        feed = feeds.get(key)
        if feed is None:
            if feed_type is _PodFeed:
                feed = _PodFeed(self, conn, scope, selector)
            else:
                feed = _EventFeed(self, conn, scope)
            feed.poll_interval = sub.poll_interval
            feeds[key] = feed
            feed.start()
        feed.add(sub)
        sub._feeds.append(feed)

    def _demote(self, feed: _Feed, step: str, exc: KubeError) -> None:
        """RBAC refused a cluster-wide feed: move its subscribers to one feed per namespace.

        Called by the feed's own task, which ends right after.
        """
        config = feed.conn.config
        self._cluster_denied.add((config.key, feed.kind, feed.selector))
        log.info(
            "may not %s %s at the cluster scope (%s); one watch per namespace instead "
            "(the ClusterRole in deploy/rbac/ allows one watch for all namespaces)",
            step, feed.kind, exc,
        )
        feeds: dict[_FeedKey, Any] = self._pod_feeds if isinstance(feed, _PodFeed) else self._event_feeds
        for key, known in list(feeds.items()):
            if known is feed:
                del feeds[key]
        if isinstance(feed, _PodFeed):
            feed.cancel_confirmations()
        feed.task = None
        feed_type: type[_PodFeed] | type[_EventFeed] = _PodFeed if isinstance(feed, _PodFeed) else _EventFeed
        for sub in list(feed.subscribers):
            feed.remove(sub)
            if feed in sub._feeds:
                sub._feeds.remove(feed)
            if not sub.closed:
                self._attach(sub, feed_type, feed.selector)

    async def follow(
        self,
        config: ClusterConfig,
        namespace: str,
        *,
        jobs: bool = False,
        label_selector: str | None = None,
        poll_interval: float = 10.0,
    ) -> CollectionSubscription:
        """Follow every pod of ``label_selector`` (every pod of the namespace when None), or with
        ``jobs`` every Job of the namespace, through the same shared feeds as :meth:`subscribe`."""
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be a positive number of seconds, got {poll_interval!r}")
        conn = await self._acquire(config)
        # From here on nothing awaits: feeds are found or made atomically on the event loop.
        feed: _PodFeed | _JobFeed
        if jobs:
            job_key = (config.key, namespace)
            job_feed = self._job_feeds.get(job_key)
            if job_feed is None:
                job_feed = self._job_feeds[job_key] = _JobFeed(self, conn, namespace)
                job_feed.poll_interval = poll_interval
                job_feed.start()
            feed = job_feed
        else:
            pod_key: _FeedKey = (config.key, namespace, label_selector)
            pod_feed = self._pod_feeds.get(pod_key)
            if pod_feed is None:
                pod_feed = self._pod_feeds[pod_key] = _PodFeed(self, conn, namespace, label_selector)
                pod_feed.poll_interval = poll_interval
                pod_feed.start()
            feed = pod_feed
        feed.poll_interval = min(feed.poll_interval, poll_interval)
        follower = CollectionSubscription(self, conn, feed)
        feed.follow(follower)
        return follower

    async def _unfollow(self, follower: CollectionSubscription) -> None:
        feed = follower._feed
        if isinstance(feed, _PodFeed):
            feed.remove(follower)
        else:
            feed.followers.discard(follower)
        idle = feed.idle()
        if idle:
            self._pod_feeds = {k: f for k, f in self._pod_feeds.items() if f is not feed}
            self._job_feeds = {k: f for k, f in self._job_feeds.items() if f is not feed}
            await feed.stop()
        await self._release(follower._conn)

    async def _unsubscribe(self, sub: PodSubscription) -> None:
        stopping: list[_Feed] = []
        for feed in sub._feeds:
            feed.remove(sub)
            if feed.idle():
                stopping.append(feed)
                self._pod_feeds = {k: f for k, f in self._pod_feeds.items() if f is not feed}
                self._event_feeds = {k: f for k, f in self._event_feeds.items() if f is not feed}
        sub._feeds.clear()
        for feed in stopping:
            await feed.stop()
        await self._release(sub._conn)

    async def _acquire(self, config: ClusterConfig) -> _Connection:
        """The loop's connection to ``config``'s cluster, loading credentials on first use.

        Loading happens outside any lock, once per cluster however many callers wait for it, and
        is bounded in time (``AsyncKube.connect``): a credential plugin that hangs delays only the
        callers for its own cluster.
        """
        key = config.key
        while True:
            conn = self._connections.get(key)
            if conn is not None:
                conn.refs += 1
                return conn
            pending = self._connecting.get(key)
            if pending is None:
                pending = asyncio.ensure_future(AsyncKube.connect(config))
                self._connecting[key] = pending
                pending.add_done_callback(functools.partial(self._connected, config))
            await asyncio.shield(pending)
            # Awaiting a finished future does not yield to the loop, so its done callback may not
            # have run yet: record the connection here, or this loop would spin without end.
            self._connected(config, pending)

    def _connected(self, config: ClusterConfig, done: asyncio.Future[AsyncKube]) -> None:
        """Record a finished connect once (from its done callback or from the first waiter)."""
        if self._connecting.get(config.key) is not done:
            return
        del self._connecting[config.key]
        if done.cancelled() or done.exception() is not None:
            return
        self._connections[config.key] = _Connection(config, done.result())

    async def _release(self, conn: _Connection) -> None:
        conn.refs -= 1
        if conn.refs <= 0 and self._connections.get(conn.config.key) is conn:
            del self._connections[conn.config.key]
            await conn.kube.close()

    async def _reconnect(self, conn: _Connection) -> None:
        """Reload credentials in place (every feed and subscription shares ``conn``)."""
        await conn.kube.reauthenticate()

    @contextlib.asynccontextmanager
    async def client(self, config: ClusterConfig) -> Any:
        """Borrow the loop's shared client for ``config`` (for calls outside a subscription)."""
        conn = await self._acquire(config)
        try:
            yield conn.kube
        finally:
            await self._release(conn)

    def stats(self) -> list[FeedStats]:
        feeds: list[_Feed] = [
            *self._pod_feeds.values(), *self._event_feeds.values(), *self._job_feeds.values()
        ]
        return [
            FeedStats(
                namespace=f.namespace,
                selector=f.selector,
                kind=f.kind,
                mode=f.mode,
                subscribers=len(f.subscribers) + len(getattr(f, "followers", ())),
                counts=dict(f.counts),
            )
            for f in feeds
        ]
