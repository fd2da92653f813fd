"""What the watch hub's feeds asked of a FakeCluster, and what a subscription was given.

The watching tests run the cluster, the hub's feeds and the trigger on manual clocks, so each step
has one outcome whatever the machine's load; they assert exactly which requests were made (read
from the simulator's audit, in the order it answered them) and exactly which versions of a pod a
subscription delivered, never a count that depends on how fast anything ran.

Example::

    first = mark(cluster)
    ...                                   # the step under test
    assert requests(cluster, first) == [("get", "pods", "default", 200)]
    assert feed_requests(cluster, "pods") == [("list", "cluster", 200, None), ("watch", "cluster", 200, "7")]
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.config import ClusterConfig
from airflow_k8s_retry.kube.feeds import REFUSALS_FOR_RBAC
from airflow_k8s_retry.kube.hub import POD_EVENTS_SELECTOR, PodSubscription, WatchHub
from airflow_k8s_retry.kube.naming import MANAGED_SELECTOR
from airflow_k8s_retry.kube.watch_settings import HubSettings
from airflow_k8s_retry_testing import FakeCluster
from tests.support.lab import cluster_reaches

#: A server-side watch timeout no test advances its cluster to: a watch ends only when a test
#: cuts it (or the feed stops), so no re-watch depends on how far a test moved the cluster.
WATCH_TIMEOUT = 3600
#: How a feed's LIST and WATCH select what it reads, by kind (the test's own reads select nothing).
FEED_SELECTORS = {
    "pods": ("labelSelector", MANAGED_SELECTOR),
    "events": ("fieldSelector", POD_EVENTS_SELECTOR),
}

#: A request: (verb, resource, namespace or "cluster", the injected fault or else the status).
Request = tuple[str, str, str, int | str]
#: A feed's request: (verb, namespace or "cluster", fault or status, the resourceVersion asked for).
FeedRequest = tuple[str, str, int | str, str | None]


def hold_hub(hub_settings: Callable[..., HubSettings], **knobs: Any) -> ManualClock:
    """Make every hub of the test wait (backoff, polling, the confirming GET's delay) on a clock
    that moves only when the test advances it, with watches that never time out; return it."""
    clock = ManualClock(1_000.0)
    hub_settings(**{"clock": clock, "watch_timeout": (WATCH_TIMEOUT, WATCH_TIMEOUT), **knobs})
    return clock


def mark(cluster: FakeCluster) -> int:
    """Where the audit stands now (for :func:`requests` and :func:`feed_requests` ``since``)."""
    return len(cluster.audit_records())


def requests(
    cluster: FakeCluster, since: int = 0, until: int | None = None, *, verbs: tuple[str, ...] | None = None
) -> list[Request]:
    """Every request answered from the ``since``-th audit record on (up to the ``until``-th, if
    given; of ``verbs``, if given)."""
    found = []
    for record in cluster.audit_records()[since:until]:
        if record.get("kind") != "request" or (verbs is not None and record["verb"] not in verbs):
            continue
        found.append(
            (
                record["verb"],
                record["resource"],
                record["namespace"] or "cluster",
                record.get("fault", record["status"]),
            )
        )
    return found


def feed_requests(
    cluster: FakeCluster,
    kind: str = "pods",
    since: int = 0,
    *,
    selector: str | None = None,
    verbs: tuple[str, ...] = ("list", "watch", "get"),
) -> list[FeedRequest]:
    """The LISTs and WATCHes of the feeds of ``kind`` (and every GET of a pod: a feed's and a
    trigger's look alike), in order; only those of ``verbs``.

    ``selector``: what the feed's LISTs and WATCHes select; None: the managed pods, or the pod
    Events; "": nothing (the feed of every pod of a namespace, for a pod this package did not create).
    """
    param, wanted = FEED_SELECTORS[kind]
    if selector is not None:
        wanted = selector
    found = []
    for record in cluster.audit_records()[since:]:
        if record.get("kind") != "request" or record["resource"] != kind:
            continue
        verb = record["verb"]
        if verb not in verbs:
            continue
        query = parse_qs(urlsplit(record["request_uri"]).query)
        if verb in ("list", "watch"):
            if (query.get(param) or [""])[0] != wanted:
                continue
        elif not (kind == "pods" and verb == "get"):
            continue
        version = (query.get("resourceVersion") or [None])[0]
        found.append((verb, record["namespace"] or "cluster", record.get("fault", record["status"]), version))
    return found


def feed_counts(kind: str = "pods") -> dict[str, int]:
    """What the running loop's one feed of ``kind`` has done: its requests (counted as it sends
    them, so an advance that woke it is reflected once it ran on, see :func:`woken`) and relists."""
    (stats,) = [s for s in WatchHub.current().stats() if s.kind == kind]
    return stats.counts


async def until_watching(
    cluster: FakeCluster,
    kinds: tuple[str, ...] = ("pods", "events"),
    since: int = 0,
    within: float = 30,
    *,
    selector: str | None = None,
) -> None:
    """Until a feed of each of ``kinds`` has a watch answered (from the ``since``-th record on);
    ``selector``: the pods feed's, as :func:`feed_requests` takes it."""

    def watching(c: FakeCluster) -> bool:
        return all(
            any(
                outcome == 200
                for _, _, outcome, _ in feed_requests(
                    c, kind, since, selector=selector if kind == "pods" else None, verbs=("watch",)
                )
            )
            for kind in kinds
        )

    await cluster_reaches(cluster, watching, within)


async def through_refusals(
    clock: ManualClock,
    cluster: FakeCluster,
    longest_backoff: float,
    kind: str = "events",
    where: str = "default",
) -> None:
    """Until the feed of ``kind`` in ``where`` has had its LIST refused ``REFUSALS_FOR_RBAC`` times
    in a row (and so stepped down): after each refusal short of that, ``clock`` is set to the end of
    the feed's backoff, the one sleeper due within ``longest_backoff`` (no poll is due that soon)."""

    def refused(times: int) -> Callable[[FakeCluster], bool]:
        def enough(c: FakeCluster) -> bool:
            listed = feed_requests(c, kind, verbs=("list",))
            return sum(1 for _, at, status, _ in listed if (at, status) == (where, 403)) >= times

        return enough

    loop = asyncio.get_running_loop()
    for times in range(1, REFUSALS_FOR_RBAC):
        await cluster_reaches(cluster, refused(times), 30)
        give_up = loop.time() + 30
        while not (due := [at for at in clock.deadlines if 0 < at - clock.now() <= longest_backoff]):
            assert loop.time() < give_up, f"no backoff after refusal {times}: sleepers {clock.deadlines}"
            await asyncio.sleep(0)
        clock.set(min(due))
    await cluster_reaches(cluster, refused(REFUSALS_FOR_RBAC), 30)


async def woken(clock: ManualClock, within: float = 30) -> None:
    """Until every task an advance of ``clock`` woke has run on (no sleeper due by now is left)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while any(at <= clock.now() for at in clock.deadlines):
        assert loop.time() < deadline, f"sleepers due by {clock.now()} still asleep: {clock.deadlines}"
        await asyncio.sleep(0)


class Recorder:
    """Drains a subscription into the list of pod versions it was given."""

    def __init__(self, sub: PodSubscription) -> None:
        self.sub = sub
        self.versions: list[int] = []
        self._taken = 0

    def _drain(self) -> None:
        for change in self.sub.drain():
            assert change.pod is not None, f"the pod was reported gone: {change}"
            self.versions.append(int(change.pod["metadata"]["resourceVersion"]))

    async def until(self, version: int, within: float = 30) -> list[int]:
        """Wait until the subscription has given ``version``; return what it gave since the last
        call (of this or :meth:`take`)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        self._drain()
        while version not in self.versions:
            assert await self.sub.wait(within=max(0.0, deadline - loop.time())), (
                f"version {version} not delivered within {within} s; delivered: {self.versions}"
            )
            self._drain()
        return self.take()

    def take(self) -> list[int]:
        """What the subscription has given since the last call, without waiting."""
        self._drain()
        taken, self._taken = self.versions[self._taken :], len(self.versions)
        return taken


async def probe(cluster: FakeCluster, pod: Mapping[str, Any]) -> Recorder:
    """A subscription to ``pod`` on the running loop's shared feed of managed pods (no Events), as
    a trigger's: the feed hands each change to every subscriber of the pod at once, so once this one
    has a version, the trigger's subscription has it too. It adds no request."""
    meta = pod["metadata"]
    config = ClusterConfig(kube_config_path=str(cluster.kubeconfig))
    sub = await WatchHub.current().subscribe(
        config,
        meta.get("namespace", "default"),
        meta["name"],
        meta["uid"],
        label_selector=MANAGED_SELECTOR,
        events=False,
    )
    return Recorder(sub)


def version(cluster: FakeCluster, name: str, namespace: str = "default") -> int:
    """The pod's resourceVersion now."""
    pod = cluster.pod(name, namespace)
    assert pod is not None, f"no live pod {namespace}/{name}"
    return int(pod["metadata"]["resourceVersion"])
