"""A feed: one LIST+WATCH (or its polling fallback) over one collection, fanning out to readers.

The loop, in the order it tries things:

* :attr:`FeedMode.WATCH`: LIST once, then WATCH from the collection's resourceVersion, resuming
  from the last one seen (bookmarks included) each time the server ends the watch;
* ``410 Gone``: the version is too old; LIST again and diff against the cache (changed objects are
  delivered, vanished ones delivered as deleted);
* ``5xx``, ``429`` and dropped connections: reconnect after a capped, jittered :class:`Backoff`;
* ``401``: reload the cluster credentials (short-lived tokens) before reconnecting;
* ``403``: see :data:`NEXT_MODE_ON_FORBIDDEN`; the first move is logged as an error naming verb and
  resource. A move that gives up the feed's data (a refused LIST of a collection that cannot be
  read one object at a time: Events) waits until the LIST is refused :data:`REFUSALS_FOR_RBAC`
  times in a row, as an authorizer webhook that timed out denies for a moment. After
  ``HubSettings.rbac_recheck`` of polling the feed tries its LIST+WATCH again (a denial that was
  momentary ends there; a lasting one steps down again, logged at INFO).
  At the cluster scope a ``403`` ends the feed instead: the hub moves its readers to one feed per
  namespace (a namespaced Role is enough for those).

What a collection is (pods, pod Events, Jobs) and how its objects reach readers is in
:mod:`~airflow_k8s_retry.kube.feed_types`; this module knows only the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from airflow_k8s_retry.kube.errors import Forbidden, Gone, KubeError, Unauthorized, connection_refused
from airflow_k8s_retry.kube.subscriptions import CollectionSubscription, KubeHolder, PodKey, PodSubscription
from airflow_k8s_retry.kube.watch_settings import HubSettings

if TYPE_CHECKING:
    from airflow_k8s_retry.kube.aio import Json, Listing, WatchEvent

log = logging.getLogger(__name__)


class FeedMode(StrEnum):
    """How a feed reads its collection; RBAC refusals move it down this list, never up."""

    #: LIST once, then WATCH.
    WATCH = "watch"
    #: WATCH is refused: LIST every ``poll_interval``.
    POLL_LIST = "poll-list"
    #: LIST is refused too: GET each subscribed object every ``poll_interval`` (pods only).
    POLL_GET = "poll-get"


class Step(StrEnum):
    """The request a feed was making, which decides what a refusal of it means."""

    LIST = "list"
    WATCH = "watch"
    GET = "get"


#: Refusals in a row of a LIST that make its ``403`` a lasting denial (RBAC), where stepping down
#: gives up the feed's data: about 3 s of the default backoff, within the trigger's wait for the
#: Events of a pod that failed or vanished (``kube.subscriptions.EVENTS_LIST_WAIT``), so that a
#: pod preempted meanwhile is not judged deleted.
REFUSALS_FOR_RBAC = 4

#: Where a ``403`` moves a feed: (its mode, the refused request) -> its next mode. A refusal not in
#: the table (a GET while polling by GET) leaves the mode alone and waits ``poll_interval``.
NEXT_MODE_ON_FORBIDDEN: Mapping[tuple[FeedMode, Step], FeedMode] = {
    (FeedMode.WATCH, Step.WATCH): FeedMode.POLL_LIST,
    (FeedMode.WATCH, Step.LIST): FeedMode.POLL_GET,
    (FeedMode.POLL_LIST, Step.LIST): FeedMode.POLL_GET,
}


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
class FeedStats:
    """What a feed has done, for tests and logs. ``namespace`` is None for a cluster-wide feed."""

    namespace: str | None
    selector: str | None
    kind: str
    mode: str
    subscribers: int
    counts: dict[str, int] = field(default_factory=dict)


#: Called when the cluster scope is refused: (the feed, what was refused, the error). The feed's
#: task ends right after.
ClusterRefused = Callable[["Feed", Step, KubeError], None]


class Feed:
    """One collection (``namespace`` None: every namespace), read by subscribers and followers.

    A subscriber (:class:`PodSubscription`) reads one object; a follower
    (:class:`CollectionSubscription`) reads them all. Subclasses say how to list, watch and
    deliver; every feed accepts both kinds of reader through :meth:`add`, :meth:`remove`,
    :meth:`follow` and :meth:`unfollow`, so the hub never asks which kind of feed it holds.
    """

    kind = "objects"
    #: Whether :meth:`_poll_without_list` still reads the feed's objects (one GET each).
    reads_one_by_one = False

    def __init__(
        self,
        conn: KubeHolder,
        namespace: str | None,
        selector: str | None,
        settings: HubSettings,
        *,
        poll_interval: float = 10.0,
        on_cluster_refused: ClusterRefused | None = None,
    ) -> None:
        self.conn = conn
        self.namespace = namespace
        self.selector = selector
        self.settings = settings
        self.subscribers: set[PodSubscription] = set()
        self.by_key: dict[PodKey, set[PodSubscription]] = {}
        self.followers: set[CollectionSubscription] = set()
        self.synced = asyncio.Event()
        #: Set while the feed holds what the API server held at its last answer (a LIST, a watch
        #: event); cleared from the moment it loses its watch (410, an error) until it hears again.
        self.current = asyncio.Event()
        self.mode = FeedMode.WATCH
        #: A turn failed since the feed last heard from the API server: what the next re-list finds
        #: missing went while the feed could not see it (``PodChange.unseen``).
        self.lost_sight = False
        #: The shortest poll interval any reader asked for (used only while polling).
        self.poll_interval = poll_interval
        self.task: asyncio.Task[None] | None = None
        self.resource_version: str | None = None
        self.counts: dict[str, int] = {"list": 0, "watch": 0, "get": 0, "relist_410": 0, "errors": 0}
        self._step = Step.LIST
        self._on_cluster_refused = on_cluster_refused
        self._backoff = Backoff(base=settings.backoff_base, cap=settings.backoff_cap)
        #: Failed turns in a row whose connection the API server refused (only the first is a warning).
        self._refusals = 0
        #: Refused LISTs in a row that would give up the feed's data (see :data:`REFUSALS_FOR_RBAC`).
        self._forbidden = 0
        #: When a 403 first moved this feed off WATCH (:meth:`_now`), and whether that was logged.
        self._stepped_down_at: float | None = None
        self._refusal_logged = False

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

    def retire(self) -> None:
        """The feed's task is ending on its own (its readers moved to other feeds)."""
        self.task = None

    def stats(self) -> FeedStats:
        return FeedStats(
            namespace=self.namespace,
            selector=self.selector,
            kind=self.kind,
            mode=self.mode,
            subscribers=len(self.subscribers) + len(self.followers),
            counts=dict(self.counts),
        )

    def _asked_for(self, poll_interval: float) -> None:
        self.poll_interval = min(self.poll_interval, poll_interval)

    # -- readers (subclasses deliver to them) -----------------------------------------------

    def add(self, sub: PodSubscription) -> None:
        """A subscriber for one object; it gets the object's known state at once, if any."""
        self.subscribers.add(sub)
        self.by_key.setdefault(sub.key, set()).add(sub)
        self._asked_for(sub.poll_interval)

    def remove(self, sub: PodSubscription) -> None:
        self.subscribers.discard(sub)
        subs = self.by_key.get(sub.key)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self.by_key[sub.key]

    def follow(self, follower: CollectionSubscription, poll_interval: float) -> None:
        """A follower of every object; once the first LIST is in it is seeded with all of them."""
        self.followers.add(follower)
        self._asked_for(poll_interval)
        if self.synced.is_set():
            follower.seed(self.snapshot())

    def unfollow(self, follower: CollectionSubscription) -> None:
        self.followers.discard(follower)

    def snapshot(self) -> dict[str, Json]:
        """The objects known now, by name (what a new follower starts from)."""
        return {}

    def idle(self) -> bool:
        """True when nobody reads this feed any more (the last one out stops it)."""
        return not self.subscribers and not self.followers

    # -- what subclasses provide ------------------------------------------------------------

    async def _list(self) -> Listing:
        raise NotImplementedError

    def _watch(self, resource_version: str, timeout_seconds: int) -> AsyncIterator[WatchEvent]:
        raise NotImplementedError

    def _resync(self, items: list[Json]) -> None:
        """A fresh LIST: deliver what changed since the cache, and what vanished as deleted."""
        raise NotImplementedError

    def _apply(self, event: WatchEvent) -> None:
        raise NotImplementedError

    async def _poll_without_list(self) -> None:
        """Polling when even LIST is forbidden; the default gives up on this feed's data."""
        self.synced.set()
        self.current.set()  # nothing more will come

    # -- the loop -----------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                await self._once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not await self._recover(exc):
                    return

    async def _once(self) -> None:
        """One turn of the loop in the current mode."""
        self._maybe_step_up()
        if self.mode is FeedMode.WATCH:
            if self.resource_version is None:
                self._step = Step.LIST
                await self._relist()
            self._step = Step.WATCH
            await self._watch_once()
        elif self.mode is FeedMode.POLL_LIST:
            self._step = Step.LIST
            await self._relist()
            await self._sleep(self.poll_interval)
        else:
            self._step = Step.GET
            await self._poll_without_list()
            await self._sleep(self.poll_interval)

    async def _pause(self, seconds: float) -> None:
        """Wait before the next try after a failed turn."""
        await self._sleep(seconds)

    async def _sleep(self, seconds: float) -> None:
        """Every wait of the feed: on the event loop, or on ``settings.clock`` when one is given."""
        clock = self.settings.clock
        if clock is None:
            await asyncio.sleep(seconds)
        else:
            await clock.sleep_until(clock.now() + seconds)

    def _now(self) -> float:
        """Seconds on what :meth:`_sleep` waits on (only differences between two readings count)."""
        clock = self.settings.clock
        return asyncio.get_running_loop().time() if clock is None else clock.now()

    async def _recover(self, exc: Exception) -> bool:
        """Handle a failed turn; False when this feed ends (its readers moved elsewhere)."""
        self.current.clear()
        if not connection_refused(exc):
            self._refusals = 0
        if isinstance(exc, Gone):
            await self._after_gone()
            return True
        self.counts["errors"] += 1
        self.lost_sight = True
        if isinstance(exc, Forbidden):
            return await self._after_forbidden(exc)
        if isinstance(exc, Unauthorized):
            log.warning("%s feed in %s: %s; reloading credentials", self.kind, self.where, exc)
            await self._sleep(self._backoff.next())
            await self.conn.kube.reauthenticate()
        elif connection_refused(exc):
            # The API server is down or restarting: try again soon and at a steady pace, so the
            # watch resumes within a second or so of its return, not after a grown backoff.
            self._refusals += 1
            delay = min(self.settings.reconnect_interval, self.settings.backoff_cap)
            log.log(
                logging.WARNING if self._refusals == 1 else logging.DEBUG,
                "%s %s in %s failed (%s); retrying every %.1f s while connections are refused",
                self.kind,
                self._step,
                self.where,
                exc,
                delay,
            )
            await self._pause(delay)
            return True
        elif isinstance(exc, KubeError):
            delay = self._backoff.next()
            log.warning(
                "%s %s in %s failed (%s); retrying in %.1f s", self.kind, self._step, self.where, exc, delay
            )
            await self._pause(delay)
        else:
            # A bug here must not kill every trigger in the process silently.
            log.error("%s feed in %s failed unexpectedly", self.kind, self.where, exc_info=exc)
            await self._sleep(self._backoff.next())
        return True

    async def _after_gone(self) -> None:
        self.counts["relist_410"] += 1
        log.info("%s watch in %s expired (410 Gone); re-listing", self.kind, self.where)
        self.resource_version = None
        if self._backoff.attempt:
            # Gone again before anything came through: do not re-list in a tight loop.
            await self._sleep(self._backoff.next())
        else:
            self._backoff.attempt = 1

    def _maybe_step_up(self) -> None:
        """After ``rbac_recheck`` of polling, try the LIST+WATCH again (see the module docstring)."""
        if self._stepped_down_at is None or self.mode is FeedMode.WATCH:
            return
        polled = self._now() - self._stepped_down_at
        if polled < self.settings.rbac_recheck:
            return
        log.info("%s feed in %s: trying LIST+WATCH again after %.0f s polling", self.kind, self.where, polled)
        self.mode = FeedMode.WATCH
        self.resource_version = None
        self._stepped_down_at = None

    async def _after_forbidden(self, exc: Forbidden) -> bool:
        if self.namespace is None and self._on_cluster_refused is not None:
            # The cluster scope is not granted (a namespaced Role only): a feed per namespace.
            self._on_cluster_refused(self, self._step, exc)
            return False
        after = NEXT_MODE_ON_FORBIDDEN.get((self.mode, self._step))
        if after is None:
            await self._sleep(max(self.poll_interval, self._backoff.next()))
            return True
        if after is FeedMode.POLL_GET and not self.reads_one_by_one:
            self._forbidden += 1
            if self._forbidden < REFUSALS_FOR_RBAC:
                delay = self._backoff.next()
                log.info(
                    "%s %s in %s refused (%s); asking again in %.1f s",
                    self.kind,
                    self._step,
                    self.where,
                    exc,
                    delay,
                )
                await self._sleep(delay)
                return True
        self._forbidden = 0
        level = logging.INFO if self._refusal_logged else logging.ERROR
        self._refusal_logged = True
        if after is FeedMode.POLL_LIST:
            log.log(
                level,
                "RBAC: may not watch %s in %s, polling with LIST every %.0f s instead: %s",
                self.kind,
                self.where,
                self.poll_interval,
                exc,
            )
        else:
            instead = (
                f"reading each pod every {self.poll_interval:.0f} s instead"
                if self.kind == "pods"
                else "classifying without Events"
            )
            log.log(level, "RBAC: may not list %s in %s, %s: %s", self.kind, self.where, instead, exc)
        if self._stepped_down_at is None:
            self._stepped_down_at = self._now()
        self.mode = after
        return True

    async def _relist(self) -> None:
        self.counts["list"] += 1
        listing = await self._list()
        self._resync(listing.items)
        self.lost_sight = False
        # An API server always sends a collection version; without one, watch "from now" rather
        # than re-listing in a loop.
        self.resource_version = listing.resource_version
        self._refusals = self._forbidden = 0
        self.synced.set()
        self.current.set()

    async def _watch_once(self) -> None:
        self.counts["watch"] += 1
        opened = self._now()
        received = 0
        stream = self._watch(self.resource_version or "", random.randint(*self.settings.watch_timeout))
        async with contextlib.aclosing(stream):  # type: ignore[type-var]
            async for event in stream:
                received += 1
                self._backoff.reset()
                self._refusals = 0
                self.lost_sight = False  # a resumed watch delivers deletions with their final state
                self.current.set()
                if event.type != "BOOKMARK":
                    self._apply(event)
                if event.resource_version:
                    self.resource_version = event.resource_version
        if not received and self._now() - opened < 1.0:
            # Closed at once with nothing in it (a proxy, an overloaded server): back off, or this
            # loop would hammer the API.
            await self._sleep(self._backoff.next())
