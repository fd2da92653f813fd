"""What one reader of the watch hub sees: one pod (a trigger) or a whole collection (a follower).

A feed hands every change of its collection to the subscriptions of the object it concerns; the
subscription decides what reaches its reader. For one pod that means: each state once, in
resourceVersion order; a pod of the same name but another UID is the old pod's deletion, not news
about it; after the pod is gone nothing more, until :meth:`PodSubscription.revive`. Events are
kept per subscription, the newest :data:`EVENTS_PER_POD`, sorted once per change rather than per
read.

The hub makes and closes subscriptions; a reader only waits, drains and closes.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Self

from airflow_k8s_retry.kube.clock import within
from airflow_k8s_retry.kube.ordering import event_sort_key, is_newer, metadata, resource_version, rv_newer

if TYPE_CHECKING:
    from airflow_k8s_retry.kube.aio import AsyncKube, Json
    from airflow_k8s_retry.kube.clock import Clock
    from airflow_k8s_retry.kube.config import ClusterConfig

#: How many Events are kept per pod (the newest win).
EVENTS_PER_POD = 64

#: How long :meth:`PodSubscription.listed_events` waits for the Events feed to catch up (its first
#: LIST, or its LIST after it lost its watch), as a rule one round trip away: a failure's snapshot
#: and a vanished pod's verdict (``triggers/pod.py``) wait so long for them.
EVENTS_LIST_WAIT = 5.0

#: A pod's place: (namespace, name).
PodKey = tuple[str, str]


class KubeHolder(Protocol):
    """What holds the loop's shared client for one cluster (the hub's connections)."""

    @property
    def config(self) -> ClusterConfig: ...

    @property
    def kube(self) -> AsyncKube: ...


@dataclass(frozen=True)
class PodChange:
    """A new state of the subscribed pod. ``pod`` is None when it is gone and its last state unknown.

    ``unseen``: deleted while the feed could not reach the API server, found missing by the re-list
    after it did (``pod`` is the last state it saw, not the final one).
    """

    pod: Json | None
    deleted: bool = False
    unseen: bool = False

    @property
    def resource_version(self) -> str | None:
        return resource_version(self.pod)


class _Reader:
    """What both kinds of reader share: the loop's client, and leaving the hub once."""

    def __init__(self, conn: KubeHolder, on_close: Callable[[Self], Awaitable[None]]) -> None:
        self._conn = conn
        self._on_close = on_close
        self._wakeup = asyncio.Event()
        self.closed = False

    @property
    def kube(self) -> AsyncKube:
        """The shared client, for the occasional direct call (last look, annotations)."""
        return self._conn.kube

    async def close(self: Self) -> None:
        """Stop reading; idempotent. The last reader of a feed stops it."""
        if self.closed:
            return
        self.closed = True
        self._wakeup.set()
        await self._on_close(self)


class PodSubscription(_Reader):
    """One trigger's view of one pod: its changes in order, and its Events.

    Read with :meth:`wait` then :meth:`drain`; :attr:`events` always holds the Events seen so far,
    oldest first.
    """

    def __init__(
        self,
        conn: KubeHolder,
        namespace: str,
        name: str,
        uid: str | None,
        *,
        poll_interval: float = 10.0,
        on_close: Callable[[PodSubscription], Awaitable[None]],
    ) -> None:
        super().__init__(conn, on_close)
        self.namespace = namespace
        self.name = name
        self.uid = uid
        self.poll_interval = poll_interval
        self._changes: deque[PodChange] = deque()
        self._events: dict[str, Json] = {}
        self._sorted_events: list[Json] | None = []
        self._events_changed = False
        self._last_rv: str | None = None
        self._gone = False
        self._events_listed: asyncio.Event | None = None  # set while the Events feed is current

    @property
    def key(self) -> PodKey:
        return (self.namespace, self.name)

    @property
    def events(self) -> list[Json]:
        """The Events seen so far, oldest first (sorted once per change, not per read)."""
        if self._sorted_events is None:
            self._sorted_events = sorted(self._events.values(), key=event_sort_key)
        return list(self._sorted_events)

    def offer(self, change: PodChange) -> None:
        """Queue a change unless it is a duplicate, stale, or about another pod of the same name."""
        if self.closed:
            return
        ours = self._as_ours(change)
        if ours is None or self._gone:
            return
        if ours.deleted:
            self._gone = True
        else:
            rv = ours.resource_version
            if not rv_newer(rv, self._last_rv):
                return
            self._last_rv = rv
        self._changes.append(ours)
        self._wakeup.set()

    def _as_ours(self, change: PodChange) -> PodChange | None:
        """The change as news about *our* pod: another UID under our name means ours was deleted
        and replaced (None when we already know it is gone); the first UID seen becomes ours."""
        uid = metadata(change.pod).get("uid") if change.pod is not None else None
        if not uid:
            return change
        if self.uid and uid != self.uid:
            return None if self._gone else PodChange(pod=None, deleted=True)
        if self.uid is None:
            self.uid = str(uid)
        return change

    def revive(self, pod: Json) -> None:
        """The pod was reported gone but is still there (read directly): follow it again.

        A watch reports DELETED when a pod stops matching its label selector (a label edited off),
        and a re-list misses such a pod too; the pod itself lives on. Without this, every later
        change of the pod would be dropped as news about a gone pod.
        """
        self._gone = False
        self._last_rv = None
        self.offer(PodChange(pod=pod))

    def offer_event(self, event: Json) -> None:
        """Keep an Event about the pod unless an equal or newer copy of it is already kept."""
        if self.closed:
            return
        meta = metadata(event)
        key = str(meta.get("name") or meta.get("uid") or id(event))
        old = self._events.get(key)
        if old is not None and not is_newer(event, old):
            return
        self._events[key] = event
        if len(self._events) > EVENTS_PER_POD:
            oldest = min(self._events, key=lambda k: event_sort_key(self._events[k]))
            del self._events[oldest]
        self._sorted_events = None
        self._events_changed = True
        self._wakeup.set()

    def reads_events_from(self, current: asyncio.Event) -> None:
        """The Events feed this subscription reads; ``current`` is set while that feed holds what
        the API server held at its last answer (its first LIST, or its LIST after it lost its watch,
        is in and delivered). The hub calls it when it attaches the subscription (again, after a
        demotion)."""
        self._events_listed = current

    @property
    def events_pending(self) -> bool:
        """True while the attached Events feed is behind (its first LIST is not in, or it lost its
        watch and has not heard from the API server since): :attr:`events` may then lack Events
        the API server already holds."""
        return self._events_listed is not None and not self._events_listed.is_set()

    async def listed_events(self, clock: Clock, seconds: float = EVENTS_LIST_WAIT) -> list[Json] | None:
        """:attr:`events` once the Events feed has caught up, waited for at most ``seconds`` on
        ``clock`` (a pod that failed or vanished meanwhile would lack Events the API server holds);
        None while it is still behind."""
        if self.events_pending:
            try:
                await within(clock, self._events_listed_wait(), seconds)
            except TimeoutError:
                return None
        return self.events

    async def _events_listed_wait(self) -> None:
        while self._events_listed is not None and not self._events_listed.is_set():
            done = asyncio.ensure_future(self._events_listed.wait())
            try:
                # Re-check every second: a demotion hands the subscription a new feed to wait for.
                await asyncio.wait({done}, timeout=1.0)
            finally:
                done.cancel()

    def drain(self) -> list[PodChange]:
        """The pod changes received since the last call, oldest first."""
        changes = list(self._changes)
        self._changes.clear()
        self._events_changed = False
        self._wakeup.clear()
        return changes

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


class CollectionSubscription(_Reader):
    """Every object of one feed, whatever its name: the pods of a label selector, or the Jobs of a
    namespace. For a follower that does not know yet which object it waits for (a sensor waiting
    for a pod to appear, or following a Job's pods as they are replaced).

    Read with :meth:`wait` then :meth:`drain`; :attr:`objects` is the feed's view, by name.
    """

    def __init__(
        self,
        conn: KubeHolder,
        synced: asyncio.Event,
        *,
        on_close: Callable[[CollectionSubscription], Awaitable[None]],
    ) -> None:
        super().__init__(conn, on_close)
        self._synced = synced
        self.objects: dict[str, Json] = {}
        self._changed = False

    @property
    def synced(self) -> bool:
        """True once the feed's first LIST is in: an empty :attr:`objects` then means "none yet"."""
        return self._synced.is_set()

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
            if old is not None and not rv_newer(change.resource_version, resource_version(old)):
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


def event_matches(event: Mapping[str, Any], uid: str | None) -> bool:
    """Whether an Event about a pod of this name is about the pod with ``uid`` (or may be)."""
    event_uid = (event.get("involvedObject") or {}).get("uid")
    return not uid or not event_uid or event_uid == uid
