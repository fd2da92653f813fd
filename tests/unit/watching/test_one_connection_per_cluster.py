"""The hub's connection registry: one client per cluster and event loop, shared and ref-counted.

These tests drive :class:`~airflow_k8s_retry.kube.hub.Connections` with a connect function of
their own (the registry's seam), so the interleavings they need happen deterministically.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from airflow_k8s_retry.kube.config import ClusterConfig
from airflow_k8s_retry.kube.hub import Connection, Connections

CONFIG = ClusterConfig(kube_config_path="/nonexistent/kubeconfig")


class Client:
    """Stands in for ``AsyncKube``: the registry only ever closes it."""

    def __init__(self) -> None:
        self.closed = 0

    async def close(self) -> None:
        self.closed += 1


def run_in_a_thread(scenario: Any, within: float) -> list[Any]:
    """Run ``scenario()`` in a loop of its own; an empty list when it did not finish in time (a
    loop that spins without yielding cannot be stopped from inside by any timeout)."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(asyncio.run(scenario())), daemon=True)
    thread.start()
    thread.join(within)
    return result


def test_a_caller_arriving_after_the_connect_but_before_its_callback_gets_the_connection() -> None:
    # The second caller starts while the connect is finishing: its first step runs after the
    # connect's result is set but before the future's done callbacks (scheduled after it) run.
    # It then finds the connect done but not yet recorded; awaiting a finished future does not
    # yield, so unless the caller records the connection itself it loops for ever.
    async def scenario() -> tuple[Connection, Connection, int, int]:
        client = Client()
        late: list[asyncio.Future[Connection]] = []
        registry: Connections

        async def connect(config: ClusterConfig) -> Any:
            late.append(asyncio.ensure_future(registry.acquire(config)))
            return client

        registry = Connections(connect)
        first = await registry.acquire(CONFIG)
        second = await late[0]
        refs = first.refs
        await registry.release(first)
        await registry.release(second)
        return first, second, refs, client.closed

    result = run_in_a_thread(scenario, within=10)
    assert result, "the late caller never got its connection (the event loop spun)"
    first, second, refs, closed = result[0]
    assert first is second
    assert refs == 2
    assert closed == 1  # the last release closed the one client


async def test_callers_for_one_cluster_share_one_connect_and_the_last_release_closes_it() -> None:
    clients: list[Client] = []
    started = asyncio.Event()
    release_connect = asyncio.Event()

    async def connect(config: ClusterConfig) -> Any:
        started.set()
        await release_connect.wait()
        clients.append(Client())
        return clients[-1]

    registry = Connections(connect)
    waiters = [asyncio.ensure_future(registry.acquire(CONFIG)) for _ in range(5)]
    await started.wait()
    release_connect.set()
    conns = await asyncio.gather(*waiters)
    assert len(clients) == 1 and all(c is conns[0] for c in conns) and conns[0].refs == 5
    for conn in conns[:-1]:
        await registry.release(conn)
    assert clients[0].closed == 0
    await registry.release(conns[-1])
    assert clients[0].closed == 1
    # The next caller connects afresh.
    again = await registry.acquire(CONFIG)
    assert len(clients) == 2 and again is not conns[0]
    await registry.release(again)


async def test_a_failed_connect_is_forgotten_so_the_next_caller_tries_again() -> None:
    attempts: list[int] = []

    async def connect(config: ClusterConfig) -> Any:
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("credential plugin failed")
        return Client()

    registry = Connections(connect)
    with pytest.raises(OSError, match="credential plugin failed"):
        await registry.acquire(CONFIG)
    await asyncio.sleep(0)  # the done callback forgets the failed connect
    conn = await registry.acquire(CONFIG)
    assert len(attempts) == 2 and conn.refs == 1
    await registry.release(conn)
