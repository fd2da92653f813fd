"""A feed's modes, at the feed alone: RBAC refusals move it from WATCH to LIST polling to GET
polling (``kube.feeds.NEXT_MODE_ON_FORBIDDEN``), and its subscriber keeps getting the pod.

The client here stands in for ``AsyncKube`` (the feed's boundary): it answers from a dict and
refuses what the test says; the feed and the subscription are the real ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow_k8s_retry.kube.aio import Listing, WatchEvent
from airflow_k8s_retry.kube.config import ClusterConfig
from airflow_k8s_retry.kube.errors import Forbidden
from airflow_k8s_retry.kube.feed_types import PodFeed
from airflow_k8s_retry.kube.feeds import FeedMode
from airflow_k8s_retry.kube.subscriptions import PodSubscription
from airflow_k8s_retry.kube.watch_settings import HubSettings

FAST = HubSettings(backoff_base=0.01, backoff_cap=0.02, confirm_delay=0.01, watch_timeout=(1, 1))


def pod(rv: int, phase: str = "Running") -> dict[str, Any]:
    meta = {"name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": str(rv)}
    return {"metadata": meta, "status": {"phase": phase}}


class Client:
    """Answers LIST/GET from ``self.pod``; refuses the verbs in ``self.refused``."""

    def __init__(self) -> None:
        self.pod = pod(1)
        self.refused: set[str] = set()
        self.calls: list[str] = []

    def _check(self, verb: str) -> None:
        self.calls.append(verb)
        if verb in self.refused:
            raise Forbidden(f'pods is forbidden: cannot {verb} resource "pods"', status=403)

    async def list_pods(self, namespace: str | None, *, label_selector: str | None = None) -> Listing:
        self._check("list")
        return Listing(items=[self.pod], resource_version=self.pod["metadata"]["resourceVersion"])

    async def watch_pods(self, namespace: str | None, **kwargs: Any) -> AsyncIterator[WatchEvent]:
        self._check("watch")
        yield WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": kwargs["resource_version"]}})

    async def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        self._check("get")
        return self.pod


class Holder:
    def __init__(self, kube: Client) -> None:
        self.kube = kube
        self.config = ClusterConfig(kube_config_path="/nonexistent")


async def next_phase(sub: PodSubscription) -> str:
    assert await sub.wait(within=10), "nothing arrived"
    changes = sub.drain()
    assert changes and changes[-1].pod is not None
    return str(changes[-1].pod["status"]["phase"])


async def test_a_refused_watch_polls_with_list_and_a_refused_list_with_get() -> None:
    client = Client()
    holder = Holder(client)
    client.refused = {"watch"}

    async def closed(_: PodSubscription) -> None:
        return None

    feed = PodFeed(holder, "ns", "app=x", FAST, poll_interval=0.01)
    sub = PodSubscription(holder, "ns", "p", "u-1", poll_interval=0.01, on_close=closed)
    feed.add(sub)
    feed.start()
    try:
        assert await next_phase(sub) == "Running"  # the first LIST
        client.pod = pod(2, "Pending")
        assert await next_phase(sub) == "Pending"  # a later LIST: the watch was refused
        assert feed.mode is FeedMode.POLL_LIST
        client.refused = {"watch", "list"}
        client.pod = pod(3, "Succeeded")
        assert await next_phase(sub) == "Succeeded"  # a GET: the LIST was refused too
        assert feed.mode is FeedMode.POLL_GET
        assert feed.stats().mode == "poll-get"
        # Never back up the list: no more LISTs or WATCHes once polling by GET.
        seen = len(client.calls)
        client.pod = pod(4, "Succeeded")
        await next_phase(sub)
        assert set(client.calls[seen:]) == {"get"}
    finally:
        await feed.stop()
        await asyncio.sleep(0)


class WaitingClient(Client):
    """Its watch waits as a server's does (until its timeout) instead of ending at once."""

    async def watch_pods(self, namespace: str | None, **kwargs: Any) -> AsyncIterator[WatchEvent]:
        self._check("watch")
        await asyncio.sleep(0.05)
        yield WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": kwargs["resource_version"]}})


async def test_a_momentary_refusal_does_not_cost_the_watch_for_good() -> None:
    # An authorizer that denied for a moment (a webhook's timeout): after rbac_recheck of polling
    # the feed lists and watches again, and a denial that lasts steps it down again.
    client = WaitingClient()
    holder = Holder(client)
    client.refused = {"watch", "list"}

    async def closed(_: PodSubscription) -> None:
        return None

    settings = HubSettings(
        backoff_base=0.01, backoff_cap=0.02, confirm_delay=0.01, watch_timeout=(1, 1), rbac_recheck=0.2
    )
    feed = PodFeed(holder, "ns", "app=x", settings, poll_interval=0.01)
    sub = PodSubscription(holder, "ns", "p", "u-1", poll_interval=0.01, on_close=closed)
    feed.add(sub)
    feed.start()
    try:
        assert await next_phase(sub) == "Running"  # read with GET: LIST and WATCH are refused
        assert feed.mode is FeedMode.POLL_GET
        client.refused = set()  # the authorizer answers again
        for _ in range(200):
            if feed.mode is FeedMode.WATCH and "watch" in client.calls[-3:]:
                break
            await asyncio.sleep(0.01)
        assert feed.mode is FeedMode.WATCH
        assert client.calls.count("list") >= 2 and "watch" in client.calls  # a LIST, then the WATCH
        client.refused = {"watch"}  # a lasting denial of the watch alone
        for _ in range(200):
            if feed.mode is FeedMode.POLL_LIST:
                break
            await asyncio.sleep(0.01)
        assert feed.mode is FeedMode.POLL_LIST
    finally:
        await feed.stop()
        await asyncio.sleep(0)
