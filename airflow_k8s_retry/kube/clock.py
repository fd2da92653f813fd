"""The one clock grace timers run on, injectable so tests can move time by hand.

Grace timers are compared with first-seen times that are persisted on pods and in trigger kwargs,
so they are epoch seconds, not event-loop time. Everything that needs "now" or "wake me at T" in
the trigger goes through a :class:`Clock`; production uses :class:`WallClock`, tests use
:class:`ManualClock` and advance it explicitly instead of sleeping.

Example::

    clock = ManualClock(1_000.0)
    waiter = asyncio.create_task(clock.sleep_until(1_060.0))
    clock.advance(60)      # waiter finishes
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Clock(Protocol):
    def now(self) -> float:
        """Epoch seconds."""
        ...

    async def sleep_until(self, deadline: float) -> None:
        """Return once :meth:`now` has reached ``deadline``."""
        ...


class WallClock:
    """The system clock. Sleeps in slices so a clock step (NTP) is noticed within a minute."""

    max_slice = 60.0

    def now(self) -> float:
        return time.time()

    async def sleep_until(self, deadline: float) -> None:
        while (left := deadline - time.time()) > 0:  # noqa: ASYNC110 - a timer, not a state wait
            await asyncio.sleep(min(left, self.max_slice))


class ManualClock:
    """A clock that moves only when told to; sleepers wake when it passes their deadline."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = float(start)
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []
        self._arrivals: list[asyncio.Future[None]] = []

    def now(self) -> float:
        return self._now

    async def sleep_until(self, deadline: float) -> None:
        if self._now >= deadline:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (deadline, waiter)
        self._sleepers.append(entry)
        for arrival in self._arrivals:
            if not arrival.done():
                arrival.set_result(None)
        try:
            await waiter
        finally:
            self._sleepers.remove(entry)

    @property
    def deadlines(self) -> list[float]:
        """When the current sleepers want to wake up, soonest first."""
        return sorted(deadline for deadline, _ in self._sleepers)

    async def wait_for_sleeper(
        self,
        deadline: float | None = None,
        *,
        count: int = 1,
        within: float = 10.0,
        later_than: float | None = None,
    ) -> float:
        """Wait until ``count`` tasks sleep on this clock (until ``deadline``, if given; until after
        ``later_than``, if given: ``later_than=clock.now()`` leaves out sleepers an advance has just
        woken that have not run yet); return the soonest matching deadline. Lets a test check a
        timer's exact deadline instead of sleeping."""

        def found() -> float | None:
            matching = [
                at
                for at in self.deadlines
                if (deadline is None or abs(at - deadline) < 1e-6) and (later_than is None or at > later_than)
            ]
            return matching[0] if len(matching) >= count else None

        loop = asyncio.get_running_loop()
        give_up = loop.time() + within
        while (at := found()) is None:
            arrival: asyncio.Future[None] = loop.create_future()
            self._arrivals.append(arrival)
            try:
                await asyncio.wait_for(arrival, max(0.0, give_up - loop.time()))
            except TimeoutError:
                raise TimeoutError(
                    f"{count} sleeper(s) until {deadline} expected on the clock within {within} s; "
                    f"sleepers: {self.deadlines}"
                ) from None
            finally:
                self._arrivals.remove(arrival)
        return at

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (from any thread)."""
        if seconds < 0:
            raise ValueError(f"ManualClock.advance: time only moves forward, got {seconds}")
        self.set(self._now + seconds)

    def set(self, now: float) -> None:
        """Move time forward to ``now`` (from any thread)."""
        if now < self._now:
            raise ValueError(f"ManualClock.set: time only moves forward ({now} < {self._now})")
        self._now = float(now)
        self._wake()

    def _wake(self) -> None:
        for deadline, waiter in list(self._sleepers):
            if self._now >= deadline and not waiter.done():
                loop = waiter.get_loop()
                if not loop.is_closed():
                    loop.call_soon_threadsafe(_resolve, waiter)


async def within(clock: Clock, work: Awaitable[T], seconds: float) -> T:
    """``work``'s result, or :class:`TimeoutError` once ``seconds`` have passed on ``clock``:
    ``asyncio.wait_for`` on the clock the caller's other timers run on. ``work`` is cancelled (and
    awaited) when the time is up or the caller is cancelled."""
    started: list[asyncio.Future[Any]] = []
    try:
        started.append(task := asyncio.ensure_future(work))
        started.append(asyncio.ensure_future(clock.sleep_until(clock.now() + seconds)))
        done, _ = await asyncio.wait(started, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for future in started:
            future.cancel()
        if started:
            await asyncio.wait(started)  # both off the clock's sleepers before returning
    if task not in done:
        raise TimeoutError(f"no answer within {seconds:g} s")
    return task.result()


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
