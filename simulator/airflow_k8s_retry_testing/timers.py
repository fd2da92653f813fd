"""Simulated time on the event loop's timer heap, or on a manual clock.

Each step of a pod's life is a timer (never a task or a loop per pod), so thousands of pods cost
only their pending timers. Durations are in simulated seconds and multiplied by ``scale`` (real
seconds per simulated second). Not to be confused with ``simclock.py``, the clock the
*watching* side uses to run at the cluster's pace.

:class:`TimerHeap` schedules on a *timebase*: the event loop itself (``scale`` real seconds per
simulated second), or a :class:`ManualTime` (``scale`` 1), whose timers fire only when
:meth:`ManualTime.advance` moves its time. ``ManualTime`` offers the loop methods the simulator
uses for time (``time``, ``call_at``, ``call_later``, ``call_soon``), so the controllers and the
watch streams read and schedule time the same way in both modes.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol


class Handle(Protocol):
    """A scheduled call: an :class:`asyncio.TimerHandle` or a :class:`ManualHandle`."""

    def cancel(self) -> None: ...

    def cancelled(self) -> bool: ...

    def when(self) -> float: ...


class Timebase(Protocol):
    """What the simulator needs of a clock: the event loop, or a :class:`ManualTime`."""

    def time(self) -> float: ...

    def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> Handle: ...

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> Handle: ...

    def call_soon(self, callback: Callable[..., object], *args: Any) -> object: ...


class TimerHeap:
    """Schedules callbacks in simulated seconds; records how late each one fired."""

    def __init__(self, loop: Timebase, scale: float) -> None:
        self.loop = loop
        self.scale = scale
        self.lags: deque[float] = deque(maxlen=200_000)

    def later(self, sim_seconds: float, fn: Callable[..., None], *args: Any) -> Handle:
        due = self.loop.time() + max(0.0, sim_seconds) * self.scale
        return self.loop.call_at(due, self._fire, due, fn, args)

    def _fire(self, due: float, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        self.lags.append(self.loop.time() - due)
        fn(*args)


class ManualHandle:
    """A call scheduled on a :class:`ManualTime`."""

    def __init__(self, when: float, callback: Callable[..., object], args: tuple[Any, ...]) -> None:
        self._when = when
        self._callback = callback
        self._args = args
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True

    def cancelled(self) -> bool:
        return self._cancelled

    def when(self) -> float:
        return self._when

    def run(self) -> None:
        self._callback(*self._args)


class ManualTime:
    """Simulated seconds that pass only when :meth:`advance` is called (on the loop's thread).

    Time starts at 0. A call scheduled for a time already reached (a delay of 0) runs within the
    advance that is running, else on the event loop's next turn, as ``call_soon`` would; every
    later one waits for an :meth:`advance` that reaches it. A callback that raises is reported to
    the loop's exception handler, as an asyncio timer's would be, and the others still run.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._now = 0.0
        self._heap: list[tuple[float, int, ManualHandle]] = []
        self._order = itertools.count()
        self._advancing = False
        self._soon: asyncio.Handle | None = None
        self._prune_at = 256  # heap size at which cancelled calls are swept out

    def time(self) -> float:
        return self._now

    def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> ManualHandle:
        handle = ManualHandle(float(when), callback, args)
        heapq.heappush(self._heap, (handle.when(), next(self._order), handle))
        if len(self._heap) >= self._prune_at:  # a watch cancels a timer per change it streams
            self._heap = [entry for entry in self._heap if not entry[2].cancelled()]
            heapq.heapify(self._heap)
            self._prune_at = max(256, 2 * len(self._heap))
        if handle.when() <= self._now and not self._advancing and self._soon is None:
            self._soon = self.loop.call_soon(self._run_due)
        return handle

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> ManualHandle:
        return self.call_at(self._now + max(0.0, delay), callback, *args)

    def call_soon(self, callback: Callable[..., object], *args: Any) -> ManualHandle:
        """Due now: within the running :meth:`advance` (after the call running now), else on the
        loop's next turn."""
        return self.call_at(self._now, callback, *args)

    def pending(self) -> list[float]:
        """When the calls not yet run are due, soonest first (cancelled ones left out)."""
        return sorted(when for when, _, handle in self._heap if not handle.cancelled())

    def advance(self, seconds: float) -> int:
        """Move time forward by ``seconds``, running every call due meanwhile in due order (ties in
        the order they were scheduled), those the calls schedule within the window included; time
        reads as each call's due time while it runs. Returns how many calls ran."""
        if not seconds >= 0:
            raise ValueError(f"advance: time only moves forward, got {seconds!r} seconds")
        if self._advancing:
            raise RuntimeError("advance: called from a call it is running")
        return self._run_until(self._now + seconds)

    def _run_due(self) -> None:
        self._soon = None
        self._run_until(self._now)

    def _run_until(self, target: float) -> int:
        ran = 0
        self._advancing = True
        try:
            while self._heap and self._heap[0][0] <= target:
                when, _, handle = heapq.heappop(self._heap)
                if handle.cancelled():
                    continue
                self._now = max(self._now, when)
                ran += 1
                try:
                    handle.run()
                except Exception as exc:
                    self.loop.call_exception_handler(
                        {"message": "Exception in a ManualTime callback", "exception": exc, "handle": handle}
                    )
            self._now = max(self._now, target)
        finally:
            self._advancing = False
        return ran
