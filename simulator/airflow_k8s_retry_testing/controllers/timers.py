"""Simulated time on the event loop's timer heap.

Each step of a pod's life is a timer (never a task or a loop per pod), so thousands of pods cost
only their pending timers. Durations are in simulated seconds and multiplied by ``scale`` (real
seconds per simulated second). Not to be confused with ``testing/simclock.py``, the clock the
*watching* side uses to run at the cluster's pace.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any


class TimerHeap:
    """Schedules callbacks in simulated seconds; records how late each one fired."""

    def __init__(self, loop: asyncio.AbstractEventLoop, scale: float) -> None:
        self.loop = loop
        self.scale = scale
        self.lags: deque[float] = deque(maxlen=200_000)

    def later(self, sim_seconds: float, fn: Callable[..., None], *args: Any) -> asyncio.TimerHandle:
        due = self.loop.time() + max(0.0, sim_seconds) * self.scale
        return self.loop.call_at(due, self._fire, due, fn, args)

    def _fire(self, due: float, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        self.lags.append(self.loop.time() - due)
        fn(*args)
