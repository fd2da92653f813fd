"""A pod that a re-list after an outage finds missing went while the feed could not see it.

Its deletion is delivered with ``unseen=True`` (the pod's last state is the one seen before the
outage, not its final one), so the tracker does not take Events the outage caused for news about
the pod. A deletion the watch delivers, or one a re-list after a plain 410 Gone finds, was in
sight: ``unseen=False``.

The client stands in for ``AsyncKube`` and answers from a script; the feed's loop and the
subscriptions are the real ones, and its pauses are recorded instead of slept.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from airflow_k8s_retry.kube.aio import Listing, WatchEvent
from airflow_k8s_retry.kube.config import ClusterConfig
from airflow_k8s_retry.kube.errors import Gone, KubeError
from airflow_k8s_retry.kube.feed_types import PodFeed
from airflow_k8s_retry.kube.subscriptions import PodChange, PodSubscription
from airflow_k8s_retry.kube.watch_settings import HubSettings
from tests.support.wire_failures import refused

#: A 410 right after another backs off on the real clock: for a millisecond here.
SETTINGS = HubSettings(backoff_base=0.001, backoff_cap=0.001)


def gone() -> Gone:
    return Gone("too old resource version: 7 (12)", status=410)


def pod(name: str, rv: int = 5) -> dict[str, Any]:
    meta = {"name": name, "namespace": "ns", "uid": f"u-{name}", "resourceVersion": str(rv)}
    return {"metadata": meta, "status": {"phase": "Running"}}


def bookmark(rv: int) -> WatchEvent:
    return WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": str(rv)}})


#: One LIST answer: the pods there, or the error it raises.
Answer = list[dict[str, Any]] | KubeError
#: One WATCH: the events it delivers, then (optionally) the error that ends it.
Stream = tuple[list[WatchEvent], KubeError | None]


class Client:
    """LISTs and WATCHes answered in turn from a script; past its end the feed's loop is ended."""

    def __init__(self, lists: list[Answer], watches: list[Stream]) -> None:
        self.lists = list(lists)
        self.watches = list(watches)

    async def list_pods(self, namespace: str | None, *, label_selector: str | None = None) -> Listing:
        if not self.lists:
            raise asyncio.CancelledError
        answer = self.lists.pop(0)
        if isinstance(answer, KubeError):
            raise answer
        return Listing(items=answer, resource_version="10")

    async def watch_pods(self, namespace: str | None, **kwargs: Any) -> AsyncIterator[WatchEvent]:
        if not self.watches:
            raise asyncio.CancelledError
        events, error = self.watches.pop(0)
        for event in events:
            yield event
        if error is not None:
            raise error


class Holder:
    def __init__(self, kube: Client) -> None:
        self.kube = kube
        self.config = ClusterConfig(kube_config_path="/nonexistent")


class RecordedFeed(PodFeed):
    """Its pauses between turns are not slept."""

    async def _pause(self, seconds: float) -> None:
        await asyncio.sleep(0)


async def received(client: Client, *names: str) -> dict[str, list[PodChange]]:
    """Run the feed through the script: what each named pod's subscriber got, oldest first."""
    holder = Holder(client)

    async def closed(_: PodSubscription) -> None:
        return None

    feed = RecordedFeed(holder, "ns", "app=x", SETTINGS)
    subs = {name: PodSubscription(holder, "ns", name, None, on_close=closed) for name in names}
    for sub in subs.values():
        feed.add(sub)
    with pytest.raises(asyncio.CancelledError):
        await feed._run()
    return {name: sub.drain() for name, sub in subs.items()}


def went(name: str, *, unseen: bool) -> list[PodChange]:
    """A pod listed, then found missing by a re-list (its last seen state is all it leaves)."""
    return [PodChange(pod=pod(name)), PodChange(pod=pod(name), deleted=True, unseen=unseen)]


async def test_a_relist_after_refused_connections_delivers_the_deletion_unseen() -> None:
    # The server went down under the watch; back, it had compacted the watch's resourceVersion.
    client = Client([[pod("p")], []], [([], refused()), ([], refused()), ([], gone())])
    assert await received(client, "p") == {"p": went("p", unseen=True)}


async def test_a_relist_refused_itself_counts_as_after_the_outage() -> None:
    client = Client([[pod("p")], refused(), []], [([], gone())])
    assert await received(client, "p") == {"p": went("p", unseen=True)}


@pytest.mark.parametrize("heard", [[], [bookmark(11)]], ids=["410-at-once", "410-after-an-event"])
async def test_the_relist_after_that_sees_clearly_again(heard: list[WatchEvent]) -> None:
    # p went during the outage; q later, after the re-list, when the next watch expired with a 410.
    client = Client(
        [[pod("p"), pod("q")], [pod("q")], []],
        [([], refused()), ([], gone()), (heard, gone())],
    )
    assert await received(client, "p", "q") == {"p": went("p", unseen=True), "q": went("q", unseen=False)}


@pytest.mark.parametrize(
    "before", [[], [([], refused()), ([bookmark(11)], None)]], ids=["watching", "resumed-after-an-outage"]
)
async def test_a_relist_after_a_410_gone_alone_is_seen(before: list[Stream]) -> None:
    # A watch that resumed after an outage and heard from the server again was back in sight.
    client = Client([[pod("p")], []], [*before, ([], gone())])
    assert await received(client, "p") == {"p": went("p", unseen=False)}


@pytest.mark.parametrize("outage", [[], [refused()]], ids=["watching", "resumed-after-an-outage"])
async def test_a_deletion_the_watch_delivers_is_seen(outage: list[KubeError]) -> None:
    # A watch resumed from its resourceVersion delivers the DELETED too, with the final state.
    final = pod("p", rv=8)
    client = Client(
        [[pod("p")]], [*(([], error) for error in outage), ([WatchEvent("DELETED", final)], None)]
    )
    assert await received(client, "p") == {"p": [PodChange(pod=pod("p")), PodChange(pod=final, deleted=True)]}
