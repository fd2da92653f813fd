"""While the API server refuses connections (down, restarting), a feed tries again at a short fixed
interval, so its watch resumes about a second after the server is back instead of when a grown
backoff runs out; answers the server does give (429, 5xx) still back off exponentially.

The feed's loop runs for real, on errors translated from the client library's own exceptions; only
its pause between turns is recorded instead of slept, so the delays are checked exactly.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from airflow_k8s_retry.kube.aio import Listing
from airflow_k8s_retry.kube.errors import KubeError, connection_refused, error_for_status
from airflow_k8s_retry.kube.feeds import Feed
from airflow_k8s_retry.kube.watch_settings import HubSettings
from tests.support.wire_failures import dropped, refused, timed_out, unavailable

SETTINGS = HubSettings(backoff_base=0.5, backoff_cap=30.0)


class ScriptedFeed(Feed):
    """A feed whose LISTs fail as scripted, then succeed; its pauses are recorded, not slept."""

    kind = "pods"

    def __init__(self, failures: list[KubeError]) -> None:
        super().__init__(None, "default", None, SETTINGS)  # type: ignore[arg-type]
        self.failures = list(failures)
        self.pauses: list[float] = []

    async def _pause(self, seconds: float) -> None:
        self.pauses.append(seconds)
        await asyncio.sleep(0)

    async def _list(self) -> Listing:
        if self.failures:
            raise self.failures.pop(0)
        raise asyncio.CancelledError  # the script is done: end the loop here

    def _resync(self, items: list[Any]) -> None:
        pass


async def pauses_after(failures: list[KubeError]) -> list[float]:
    feed = ScriptedFeed(failures)
    with pytest.raises(asyncio.CancelledError):
        await feed._run()
    return feed.pauses


def test_a_refused_connection_is_told_apart_from_an_answer_and_a_timeout() -> None:
    assert connection_refused(refused()) and connection_refused(dropped())
    assert not connection_refused(timed_out())
    assert not connection_refused(unavailable())
    assert not connection_refused(error_for_status(429, "Too many requests"))


async def test_while_connections_are_refused_the_feed_retries_every_second() -> None:
    # An outage of a minute: the next try is never more than a second away, however long it lasts.
    assert await pauses_after([refused()] * 60) == [1.0] * 60


async def test_answers_still_back_off_and_a_refusal_in_between_does_not_wait_for_the_cap() -> None:
    pauses = await pauses_after([unavailable()] * 8 + [dropped(), refused(), refused()])
    grown, steady = pauses[:8], pauses[8:]
    ceilings = [min(30.0, 0.5 * 2**attempt) for attempt in range(8)]
    assert all(c / 2 <= p <= c for p, c in zip(grown, ceilings, strict=True)), grown
    assert grown[-1] >= 15.0  # the 503s grew the backoff to its cap's range
    assert steady == [1.0, 1.0, 1.0]


async def test_the_reconnect_interval_never_exceeds_the_backoff_cap() -> None:
    feed = ScriptedFeed([refused()] * 3)
    feed.settings = HubSettings(backoff_base=0.05, backoff_cap=0.2)
    with pytest.raises(asyncio.CancelledError):
        await feed._run()
    assert feed.pauses == [0.2] * 3
