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

No change is lost and none is delivered twice: a feed resumes its watch, re-lists after ``410``,
backs off and falls back to polling as :mod:`~airflow_k8s_retry.kube.feeds` describes, and every
delivery is de-duplicated per subscriber by resourceVersion.

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

The parts: :mod:`~airflow_k8s_retry.kube.feeds` (the LIST+WATCH loop, its modes and backoff),
:mod:`~airflow_k8s_retry.kube.feed_types` (pods, pod Events, Jobs),
:mod:`~airflow_k8s_retry.kube.subscriptions` (what one reader sees) and this module, the registry
of one event loop: connections, feeds, readers. Timings and scope come from one frozen
:class:`~airflow_k8s_retry.kube.watch_settings.HubSettings`.

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
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import ClassVar

from airflow_k8s_retry.kube.aio import AsyncKube
from airflow_k8s_retry.kube.config import ClusterConfig
from airflow_k8s_retry.kube.errors import KubeError
from airflow_k8s_retry.kube.feed_types import POD_EVENTS_SELECTOR, EventFeed, JobFeed, PodFeed
from airflow_k8s_retry.kube.feeds import Feed, FeedStats, Step
from airflow_k8s_retry.kube.subscriptions import CollectionSubscription, PodChange, PodSubscription
from airflow_k8s_retry.kube.watch_settings import (
    WATCH_SCOPE_ENV,
    HubSettings,
    WatchScope,
    settings_for_new_hubs,
)

#: What callers import from here (the hub's readers and stats, with the names they need).
__all__ = [
    "POD_EVENTS_SELECTOR",
    "WATCH_SCOPE_ENV",
    "CollectionSubscription",
    "Connection",
    "Connections",
    "FeedStats",
    "PodChange",
    "PodSubscription",
    "WatchHub",
]

log = logging.getLogger(__name__)

#: Opens a client for a cluster (``AsyncKube.connect``; a test may hand in another).
Connect = Callable[[ClusterConfig], Awaitable[AsyncKube]]


@dataclass(eq=False)
class Connection:
    """The loop's client for one cluster, and how many readers hold it."""

    config: ClusterConfig
    kube: AsyncKube
    refs: int = 0


class Connections:
    """The clients of one event loop, one per cluster, shared and reference-counted.

    Concurrency: there is no lock, on purpose. Everything here runs on one event loop, so the
    loop itself is the lock for :attr:`_connections` and :attr:`_connecting`: no method awaits
    between reading those maps and writing them, and the only await, the connect itself, happens
    with nothing held. Connecting under a lock would make every caller wait for the slowest
    cluster (a credential plugin that hangs, up to ``kube.aio.CONNECT_TIMEOUT``); here the first
    caller for a cluster starts one connect, later callers for that cluster await the same future,
    and callers for other clusters are not delayed at all.
    """

    def __init__(self, connect: Connect = AsyncKube.connect) -> None:
        self._connect = connect
        #: cluster key -> its open connection.
        self._connections: dict[str, Connection] = {}
        #: cluster key -> the connect under way (removed once it finished, however it finished).
        self._connecting: dict[str, asyncio.Future[AsyncKube]] = {}

    async def acquire(self, config: ClusterConfig) -> Connection:
        """The connection to ``config``'s cluster, connecting on first use; pair with :meth:`release`."""
        key = config.key
        while True:
            conn = self._connections.get(key)
            if conn is not None:
                conn.refs += 1
                return conn
            pending = self._connecting.get(key)
            if pending is None:
                pending = asyncio.ensure_future(self._connect(config))
                self._connecting[key] = pending
                # Records the connection even when every waiter was cancelled meanwhile.
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
        self._connections[config.key] = Connection(config, done.result())

    async def release(self, conn: Connection) -> None:
        """Give back one reference; the last one out closes the client."""
        conn.refs -= 1
        if conn.refs <= 0 and self._connections.get(conn.config.key) is conn:
            # Forgotten before the await, so a caller arriving meanwhile connects afresh.
            del self._connections[conn.config.key]
            await conn.kube.close()


#: A feed's place in the registry: (kind, cluster key, namespace or None for all, selector).
FeedKey = tuple[str, str, str | None, str | None]
#: A reader of feeds: one pod (a trigger) or a whole collection (a follower).
Reader = PodSubscription | CollectionSubscription


@dataclass
class _Held:
    """What an open reader holds: its connection, the feeds it reads, and how to leave one."""

    conn: Connection
    feeds: list[Feed]
    detach: Callable[[Feed], None]


class WatchHub:
    """The feeds and clients of one event loop. Get it with :meth:`current`.

    Concurrency: as in :class:`Connections`, the event loop is the lock. :attr:`_feeds`,
    :attr:`_readers` and :attr:`_cluster_denied` change only in synchronous stretches (after the
    one await of :meth:`subscribe` and :meth:`follow`, the connection; before the awaits of
    closing, which stop feeds already removed from the maps), so a reader arriving during any await
    finds either a running feed or none, never a feed being stopped. The one state shared across
    threads is the class-wide map from event loop to hub, guarded by :attr:`_hubs_lock`.
    """

    _hubs: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, WatchHub]] = (
        weakref.WeakKeyDictionary()
    )
    #: Guards :attr:`_hubs` (event loops of several threads look up their hubs at once).
    _hubs_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, settings: HubSettings | None = None, *, connect: Connect | None = None) -> None:
        self.settings = settings if settings is not None else settings_for_new_hubs()
        self.connections = Connections(connect or AsyncKube.connect)
        self._feeds: dict[FeedKey, Feed] = {}
        self._keys: dict[Feed, FeedKey] = {}
        #: Each open reader: its connection and the feeds it reads.
        self._readers: dict[Reader, _Held] = {}
        #: (cluster key, kind, selector) whose cluster-wide feed RBAC refused.
        self._cluster_denied: set[tuple[str, str, str | None]] = set()

    @classmethod
    def current(cls) -> WatchHub:
        """The hub of the running event loop, made on first use with the process's settings
        (:func:`~airflow_k8s_retry.kube.watch_settings.use_settings`)."""
        loop = asyncio.get_running_loop()
        with cls._hubs_lock:
            hub = cls._hubs.get(loop)
            if hub is None:
                hub = cls._hubs[loop] = cls()
        return hub

    # -- readers ------------------------------------------------------------------------------

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
        _check_poll_interval(poll_interval)
        conn = await self.connections.acquire(config)
        # From here on nothing awaits: feeds are found or made atomically on the event loop.
        sub = PodSubscription(
            conn, namespace, name, uid, poll_interval=poll_interval, on_close=self._close_reader
        )
        self._readers[sub] = _Held(conn, [], lambda feed: feed.remove(sub))
        self._attach(sub, conn, PodFeed.kind, label_selector)
        if events:
            self._attach(sub, conn, EventFeed.kind, POD_EVENTS_SELECTOR)
        return sub

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
        ``jobs`` every Job of the namespace, through the same shared feeds as :meth:`subscribe`.
        Followers always read a feed of their own namespace."""
        _check_poll_interval(poll_interval)
        conn = await self.connections.acquire(config)
        # From here on nothing awaits: feeds are found or made atomically on the event loop.
        if jobs:
            key: FeedKey = (JobFeed.kind, config.key, namespace, None)
        else:
            key = (PodFeed.kind, config.key, namespace, label_selector)
        feed = self._feeds.get(key) or self._start(key, conn, poll_interval)
        follower = CollectionSubscription(conn, feed.synced, on_close=self._close_reader)
        self._readers[follower] = _Held(conn, [feed], lambda feed: feed.unfollow(follower))
        feed.follow(follower, poll_interval)
        return follower

    @contextlib.asynccontextmanager
    async def client(self, config: ClusterConfig) -> AsyncIterator[AsyncKube]:
        """Borrow the loop's shared client for ``config`` (for calls outside a subscription)."""
        conn = await self.connections.acquire(config)
        try:
            yield conn.kube
        finally:
            await self.connections.release(conn)

    def stats(self) -> list[FeedStats]:
        return [feed.stats() for feed in self._feeds.values()]

    # -- feeds --------------------------------------------------------------------------------

    def _cluster_wide(self, config: ClusterConfig, kind: str, selector: str | None) -> bool:
        if self.settings.scope is not WatchScope.CLUSTER or (kind == PodFeed.kind and selector is None):
            return False
        return (config.key, kind, selector) not in self._cluster_denied

    def _attach(self, sub: PodSubscription, conn: Connection, kind: str, selector: str | None) -> None:
        scope = None if self._cluster_wide(conn.config, kind, selector) else sub.namespace
        key: FeedKey = (kind, conn.config.key, scope, selector)
        feed = self._feeds.get(key) or self._start(key, conn, sub.poll_interval)
        if kind == EventFeed.kind:
            sub.reads_events_from(feed.current)
        feed.add(sub)
        self._readers[sub].feeds.append(feed)

    def _start(self, key: FeedKey, conn: Connection, poll_interval: float) -> Feed:
        kind, _, namespace, selector = key
        feed: Feed
        if kind == JobFeed.kind and namespace is not None:
            feed = JobFeed(conn, namespace, self.settings, poll_interval=poll_interval)
        elif kind == EventFeed.kind:
            feed = EventFeed(
                conn, namespace, self.settings, poll_interval=poll_interval, on_cluster_refused=self._demote
            )
        else:
            feed = PodFeed(
                conn,
                namespace,
                selector,
                self.settings,
                poll_interval=poll_interval,
                on_cluster_refused=self._demote,
            )
        self._feeds[key] = feed
        self._keys[feed] = key
        feed.start()
        return feed

    def _forget(self, feed: Feed) -> None:
        key = self._keys.pop(feed, None)
        if key is not None and self._feeds.get(key) is feed:
            del self._feeds[key]

    def _demote(self, feed: Feed, step: Step, exc: KubeError) -> None:
        """RBAC refused a cluster-wide feed: move its subscribers to one feed per namespace.

        Called by the feed's own task, which ends right after.
        """
        config = feed.conn.config
        self._cluster_denied.add((config.key, feed.kind, feed.selector))
        log.info(
            "may not %s %s at the cluster scope (%s); one watch per namespace instead "
            "(the ClusterRole in deploy/rbac/ allows one watch for all namespaces)",
            step,
            feed.kind,
            exc,
        )
        self._forget(feed)
        feed.retire()
        for sub in list(feed.subscribers):
            feed.remove(sub)
            held = self._readers.get(sub)
            if held is None or sub.closed:
                continue
            held.feeds.remove(feed)
            self._attach(sub, held.conn, feed.kind, feed.selector)

    async def _close_reader(self, reader: Reader) -> None:
        held = self._readers.pop(reader, None)
        if held is None:
            return
        stopping: list[Feed] = []
        for feed in held.feeds:
            held.detach(feed)
            if feed.idle():
                self._forget(feed)
                stopping.append(feed)
        for feed in stopping:
            await feed.stop()
        await self.connections.release(held.conn)


def _check_poll_interval(poll_interval: float) -> None:
    if poll_interval <= 0:
        raise ValueError(f"poll_interval must be a positive number of seconds, got {poll_interval!r}")
