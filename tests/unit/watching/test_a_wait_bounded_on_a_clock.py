"""``kube.clock.within``: ``asyncio.wait_for`` on an injectable clock (the trigger's state lookup
in ``on_kill`` is bounded with it), tested on a ``ManualClock`` that moves only when told."""

from __future__ import annotations

import asyncio

import pytest

from airflow_k8s_retry.kube.clock import ManualClock, within


async def test_an_answer_before_the_bound_is_returned_and_leaves_no_timer() -> None:
    clock = ManualClock()
    answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    waiting = asyncio.ensure_future(within(clock, answer, 25))
    await clock.wait_for_sleeper(clock.now() + 25)
    clock.advance(24)
    answer.set_result("failed")
    assert await waiting == "failed"
    assert clock.deadlines == []


async def test_no_answer_by_the_bound_is_a_timeout_and_the_work_is_cancelled() -> None:
    clock = ManualClock()
    never: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    waiting = asyncio.ensure_future(within(clock, never, 25))
    await clock.wait_for_sleeper(clock.now() + 25)
    clock.advance(25)
    with pytest.raises(TimeoutError, match="no answer within 25 s"):
        await waiting
    assert never.cancelled()
    assert clock.deadlines == []


async def test_an_error_of_the_work_is_raised_as_it_is() -> None:
    async def fails() -> str:
        raise LookupError("gone")

    with pytest.raises(LookupError, match="gone"):
        await within(ManualClock(), fails(), 25)


async def test_a_cancelled_caller_cancels_the_work_and_the_timer() -> None:
    clock = ManualClock()
    never: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    waiting = asyncio.ensure_future(within(clock, never, 25))
    await clock.wait_for_sleeper(clock.now() + 25)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert never.cancelled()
    assert clock.deadlines == []
