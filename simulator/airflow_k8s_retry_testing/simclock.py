"""Simulated epoch time at a cluster's ``time_scale``, for the code that watches the cluster.

The kubelet runs its scripted steps on the event loop's clock, scaled: at ``time_scale=0.001`` a
simulated minute passes in 60 real milliseconds. Grace timers in the trigger must run at the same
pace, or a 15-minute grace would take 15 real minutes against a cluster that moves 1,000 times
faster. :class:`SimClock` satisfies the trigger's ``Clock`` protocol
(``airflow_k8s_retry.kube.clock``) with that pace: epoch seconds that start at the real time when
the clock is made and then advance ``1 / time_scale`` times faster.

Example::

    clock = SimClock(0.001)
    PodStateTrigger.clock = clock     # the trigger's injectable clock
    start = clock.now()
    await clock.sleep_until(start + 60)   # about 60 real milliseconds
"""

from __future__ import annotations

import asyncio
import time


class SimClock:
    """Epoch seconds advancing ``1 / time_scale`` times faster than real time."""

    def __init__(self, time_scale: float, start: float | None = None) -> None:
        if not time_scale > 0:
            raise ValueError(f"SimClock: time_scale must be greater than 0, got {time_scale!r}")
        self.time_scale = float(time_scale)
        self._epoch = time.time() if start is None else float(start)
        self._mono = time.monotonic()

    def now(self) -> float:
        return self._epoch + (time.monotonic() - self._mono) / self.time_scale

    def real_seconds(self, sim_seconds: float) -> float:
        """How many real seconds ``sim_seconds`` of simulated time take."""
        return sim_seconds * self.time_scale

    async def sleep_until(self, deadline: float) -> None:
        while (left := deadline - self.now()) > 0:  # noqa: ASYNC110 - a timer, not a state wait
            await asyncio.sleep(left * self.time_scale)
