"""The three collections a feed reads: pods, pod Events, and (for followers) Jobs.

Each says how to list and watch its collection, what it caches, and to whom an object goes:

* :class:`PodFeed` caches pods by (namespace, name) and delivers each to the subscribers of that
  pod and to every follower. A subscribed pod the feed has not seen is read once with a GET after
  ``confirm_delay`` (the watch may just be behind), so a new pod is not taken for a deleted one.
* :class:`EventFeed` keeps the newest :data:`EVENTS_PER_POD` Events per pod, also for pods nobody
  follows yet (up to :data:`EVENT_PODS_KEPT`), indexed by pod, so a re-list after a 410 costs
  O(events), not O(events x subscribers).
* :class:`JobFeed` caches the ``batch/v1`` Jobs of one namespace, for followers only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from airflow_k8s_retry.kube.errors import KubeError, NotFound
from airflow_k8s_retry.kube.feeds import ClusterRefused, Feed, FeedMode
from airflow_k8s_retry.kube.ordering import event_sort_key, is_newer, metadata
from airflow_k8s_retry.kube.subscriptions import (
    EVENTS_PER_POD,
    KubeHolder,
    PodChange,
    PodKey,
    PodSubscription,
    event_matches,
)
from airflow_k8s_retry.kube.watch_settings import HubSettings

if TYPE_CHECKING:
    from airflow_k8s_retry.kube.aio import Json, Listing, WatchEvent

log = logging.getLogger(__name__)

POD_EVENTS_SELECTOR = "involvedObject.kind=Pod"
#: How many pods' Events a feed keeps for pods nobody follows yet (a trigger may subscribe to a pod
#: a moment after it was created); the longest-unchanged go first.
EVENT_PODS_KEPT = 10_000


def _name(obj: Mapping[str, Any]) -> str:
    return str(metadata(obj).get("name") or "")


class PodFeed(Feed):
    kind = "pods"
    reads_one_by_one = True

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
        super().__init__(
            conn,
            namespace,
            selector,
            settings,
            poll_interval=poll_interval,
            on_cluster_refused=on_cluster_refused,
        )
        self.cache: dict[PodKey, Json] = {}
        self._confirming: set[asyncio.Task[None]] = set()

    async def _list(self) -> Listing:
        return await self.conn.kube.list_pods(self.namespace, label_selector=self.selector)

    def _watch(self, resource_version: str, timeout_seconds: int) -> AsyncIterator[WatchEvent]:
        return self.conn.kube.watch_pods(
            self.namespace,
            resource_version=resource_version,
            label_selector=self.selector,
            timeout_seconds=timeout_seconds,
        )

    def _pod_key(self, pod: Mapping[str, Any]) -> PodKey | None:
        name, namespace = _name(pod), metadata(pod).get("namespace") or self.namespace
        return (str(namespace), name) if name and namespace else None

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
                self._deliver(key, PodChange(pod=last, deleted=True, unseen=self.lost_sight))
        first = not self.synced.is_set()
        for key, pod in fresh.items():
            old = self.cache.get(key)
            if old is None or is_newer(pod, old):
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
        if old is not None and not is_newer(pod, old):
            return
        self.cache[key] = pod
        self._deliver(key, PodChange(pod=pod))

    async def _poll_without_list(self) -> None:
        for key in list(self.by_key):
            await self._get_one(key)
        self.synced.set()
        self.current.set()

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
        if old is None or is_newer(pod, old):
            self.cache[key] = pod
        self._deliver(key, PodChange(pod=pod))

    def add(self, sub: PodSubscription) -> None:
        super().add(sub)
        if not self.synced.is_set():
            return  # the first LIST delivers (or confirms) every subscriber's pod
        pod = self.cache.get(sub.key)
        if pod is not None:
            sub.offer(PodChange(pod=pod))
        elif self.mode is not FeedMode.POLL_GET:
            self._confirm_later(sub.key)

    def snapshot(self) -> dict[str, Json]:
        return {name: pod for (_, name), pod in self.cache.items()}

    def _confirm_later(self, key: PodKey) -> None:
        """A subscribed pod the feed has not seen: the watch may just be behind. Give it a moment,
        then GET the pod once, so a pod created a moment ago is not mistaken for a deleted one."""

        async def confirm() -> None:
            await self._sleep(self.settings.confirm_delay)
            if key in self.cache or key not in self.by_key:
                return
            try:
                await self._get_one(key)
            except KubeError as exc:
                log.info("could not confirm pod %s/%s (%s); waiting for the watch", *key, exc)

        task = asyncio.get_running_loop().create_task(confirm())
        self._confirming.add(task)
        task.add_done_callback(self._confirming.discard)

    def cancel_confirmations(self) -> None:
        for task in list(self._confirming):
            task.cancel()

    def retire(self) -> None:
        self.cancel_confirmations()
        super().retire()

    async def stop(self) -> None:
        self.cancel_confirmations()
        await super().stop()


class EventFeed(Feed):
    """Pod Events, kept per pod (the newest :data:`EVENTS_PER_POD`) and indexed by subscriber."""

    kind = "events"

    def __init__(
        self,
        conn: KubeHolder,
        namespace: str | None,
        settings: HubSettings,
        *,
        poll_interval: float = 10.0,
        on_cluster_refused: ClusterRefused | None = None,
    ) -> None:
        super().__init__(
            conn,
            namespace,
            POD_EVENTS_SELECTOR,
            settings,
            poll_interval=poll_interval,
            on_cluster_refused=on_cluster_refused,
        )
        self.by_pod: dict[PodKey, dict[str, Json]] = {}

    async def _list(self) -> Listing:
        return await self.conn.kube.list_events(self.namespace, field_selector=self.selector)

    def _watch(self, resource_version: str, timeout_seconds: int) -> AsyncIterator[WatchEvent]:
        return self.conn.kube.watch_events(
            self.namespace,
            resource_version=resource_version,
            field_selector=self.selector,
            timeout_seconds=timeout_seconds,
        )

    def _pod_key(self, event: Mapping[str, Any]) -> PodKey | None:
        involved = event.get("involvedObject") or {}
        if involved.get("kind") not in (None, "Pod"):
            return None
        name = str(involved.get("name") or "")
        namespace = involved.get("namespace") or metadata(event).get("namespace") or self.namespace
        if not name or not namespace:
            return None
        return (str(namespace), name)

    def _keep(self, event: Json) -> PodKey | None:
        key = self._pod_key(event)
        if key is None:
            return None
        bucket = self.by_pod.pop(key, None) or {}
        self.by_pod[key] = bucket  # most recently changed last
        bucket[_name(event) or str(id(event))] = event
        if len(bucket) > EVENTS_PER_POD:
            oldest = min(bucket, key=lambda k: event_sort_key(bucket[k]))
            del bucket[oldest]
        if len(self.by_pod) > EVENT_PODS_KEPT:
            # Prune to 90% at once, so the scan is paid once per thousand pods, not per event.
            excess = len(self.by_pod) - int(EVENT_PODS_KEPT * 0.9)
            for stale in [k for k in self.by_pod if k not in self.by_key][:excess]:
                del self.by_pod[stale]
        return key

    def _deliver(self, key: PodKey, event: Json) -> None:
        for sub in list(self.by_key.get(key, ())):
            if event_matches(event, sub.uid):
                sub.offer_event(event)

    def _resync(self, items: list[Json]) -> None:
        self.by_pod = {}
        for event in sorted(items, key=event_sort_key):
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
        super().add(sub)
        for event in sorted(self.by_pod.get(sub.key, {}).values(), key=event_sort_key):
            if event_matches(event, sub.uid):
                sub.offer_event(event)

    def remove(self, sub: PodSubscription) -> None:
        followed = sub.key in self.by_key
        super().remove(sub)
        if followed and sub.key not in self.by_key:
            self.by_pod.pop(sub.key, None)  # its last subscriber left


class JobFeed(Feed):
    """The ``batch/v1`` Jobs of one namespace, for followers only."""

    kind = "jobs"

    def __init__(
        self, conn: KubeHolder, namespace: str, settings: HubSettings, *, poll_interval: float = 10.0
    ) -> None:
        super().__init__(conn, namespace, None, settings, poll_interval=poll_interval)
        self.job_namespace = namespace
        self.cache: dict[str, Json] = {}

    async def _list(self) -> Listing:
        return await self.conn.kube.list_jobs(self.job_namespace)

    def _watch(self, resource_version: str, timeout_seconds: int) -> AsyncIterator[WatchEvent]:
        return self.conn.kube.watch_jobs(
            self.job_namespace, resource_version=resource_version, timeout_seconds=timeout_seconds
        )

    def _deliver(self, name: str, change: PodChange) -> None:
        for follower in list(self.followers):
            follower.offer(name, change)

    def _resync(self, items: list[Json]) -> None:
        fresh = {_name(j): j for j in items if _name(j)}
        for name, last in list(self.cache.items()):
            if name not in fresh:
                self._deliver(name, PodChange(pod=last, deleted=True))
        for name, job in fresh.items():
            self._deliver(name, PodChange(pod=job))
        self.cache = fresh

    def _apply(self, event: WatchEvent) -> None:
        name = _name(event.object)
        if not name:
            return
        if event.type == "DELETED":
            self.cache.pop(name, None)
            self._deliver(name, PodChange(pod=event.object, deleted=True))
            return
        self.cache[name] = event.object
        self._deliver(name, PodChange(pod=event.object))

    def snapshot(self) -> dict[str, Json]:
        return dict(self.cache)
