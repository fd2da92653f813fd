"""The simulated clock of the chaos runs: discrete events, so a seed gives one answer on any machine.

Simulated time moves only when every actor of a run is idle: the harness's thread (the worker runs
on it) waits on this clock, each watched event loop (the triggerers', the simulator's) sits in its
selector with nothing ready, nothing arrived on its sockets, no work out in a thread pool and no
real-time timer about to fire, and each watched thread (the api-server's listener) has ended or
waits on this clock. Then the clock jumps to the earliest deadline (a simulator step of
``FakeCluster(clock="manual")``, a sleeper on this clock) and wakes that one alone; the actors run
it out, and the next turn starts once all of them are idle again. A machine's load changes how long
a turn takes in real seconds, never what happens in it or when, in simulated seconds.

The harness's thread drives: its own waits (:meth:`SimClock.sleep`, :meth:`SimClock.turn`) are what
moves the clock. Any other thread's :meth:`SimClock.sleep` parks it until the driver wakes it.
It satisfies the package's ``Clock`` protocol (``now``, ``sleep_until``): the trigger's clock, the
watch hub's (``HubSettings.clock``), the worker's backoff and the listener's pauses all wait on it.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: A real-time timer of an event loop due within this many real seconds keeps the loop busy (the
#: ``slow`` fault's delay, up to 0.2 s); later ones (client timeouts, keep-alive) do not.
REAL_TIMER_HORIZON = 0.3
#: A turn that has not gone quiet after this many real seconds goes on anyway (an actor spinning).
SETTLE_LIMIT = 60.0


@dataclass(order=True)
class _Sleeper:
    deadline: float
    seq: int
    wake: Callable[[], None] = field(compare=False)
    #: The loop an async sleeper waits on (None for a parked thread).
    loop: asyncio.AbstractEventLoop | None = field(default=None, compare=False)
    woken: bool = field(default=False, compare=False)


class _LoopWatch:
    """What an event loop is doing, seen from another thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.in_select = False
        self.turns = 0
        self.in_executor = 0
        self.thread: int | None = None
        selector = loop._selector  # type: ignore[attr-defined]
        self._poller = getattr(selector, "_selector", None)  # the epoll object (level-triggered)
        select = selector.select

        def watched_select(timeout: float | None = None) -> Any:
            self.thread = threading.get_ident()
            self.in_select = True
            try:
                return select(timeout)
            finally:
                self.in_select = False
                self.turns += 1

        selector.select = watched_select
        run_in_executor = loop.run_in_executor

        def counted(executor: Any, func: Any, *args: Any) -> asyncio.Future[Any]:
            future = run_in_executor(executor, func, *args)
            self.in_executor += 1

            def done(_: Any) -> None:
                self.in_executor -= 1

            future.add_done_callback(done)
            return future

        loop.run_in_executor = counted  # type: ignore[method-assign,assignment]

    def idle(self, parked: set[int]) -> bool:
        loop = self.loop
        if self.thread in parked:
            return True
        if not self.in_select or self.in_executor or loop._ready:  # type: ignore[attr-defined]
            return False
        try:
            if self._poller is not None and self._poller.poll(0):
                return False
            soon = loop.time() + REAL_TIMER_HORIZON
            return not any(
                not handle.cancelled() and handle.when() < soon
                for handle in list(loop._scheduled)  # type: ignore[attr-defined]
            )
        except (RuntimeError, ValueError, OSError):
            return False


class SimClock:
    """Epoch seconds that pass only between the turns of a run (see the module's docstring)."""

    def __init__(self, start: float) -> None:
        self._now = float(start)
        self._lock = threading.Lock()
        self._seq = itertools.count()
        self._sleepers: list[_Sleeper] = []
        self._loops: list[_LoopWatch] = []
        self._threads: list[threading.Thread] = []
        self._parked: set[int] = set()
        self._parks = 0
        self.driver = threading.get_ident()
        self.cluster: Any = None
        self._base = 0.0  # epoch seconds at the cluster's time 0
        #: (real time a turn began, simulated time during it): reads the audit log's wall clock.
        self.history: list[tuple[float, float]] = [(time.time(), self._now)]
        self.turns = 0
        #: A parked thread's early wake-up: its event, and its entry.
        self._early: dict[int, tuple[threading.Event, _Sleeper]] = {}
        #: Loops whose process is gone: a sleep on one ends the task that waits (it is cancelled).
        self._gone: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()

    # -- the package's Clock protocol ------------------------------------------------------------

    def now(self) -> float:
        return self._now

    async def sleep_until(self, deadline: float) -> None:
        if self._now >= deadline:
            return
        loop = asyncio.get_running_loop()
        if loop in self._gone:
            raise asyncio.CancelledError("the process is gone")
        waiter: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            loop.call_soon_threadsafe(_resolve, waiter)

        entry = _Sleeper(deadline, next(self._seq), wake, loop)
        with self._lock:
            self._sleepers.append(entry)
        try:
            await waiter
        finally:
            with self._lock:
                if entry in self._sleepers:
                    self._sleepers.remove(entry)

    # -- what it watches --------------------------------------------------------------------------

    def use_cluster(self, cluster: Any) -> None:
        """Drive ``cluster`` (``clock="manual"``), its time 0 being now, and watch its loop."""
        self.cluster = cluster
        self._base = self._now - cluster.sim_time
        self.watch_loop(cluster._loop)

    def watch_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loops.append(_LoopWatch(loop))

    def forget_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop's process is gone: nothing on it waits any more."""
        with self._lock:
            self._gone.add(loop)
            self._loops = [w for w in self._loops if w.loop is not loop]
            self._sleepers = [s for s in self._sleepers if s.loop is not loop]

    def watch_thread(self, thread: threading.Thread) -> None:
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)

    # -- waiting ------------------------------------------------------------------------------------

    def sleep(self, seconds: float) -> None:
        self.sleep_until_sync(self._now + max(0.0, seconds))

    def sleep_until_sync(self, deadline: float, wake: threading.Event | None = None) -> None:
        """Wait until ``deadline`` (or until ``wake`` is set, for a parked thread). The driver moves
        the clock meanwhile; any other thread parks until the driver wakes it."""
        if threading.get_ident() == self.driver:
            while self._now < deadline:
                self.turn(deadline)
            return
        event = threading.Event()
        ident = threading.get_ident()

        def wake_me() -> None:
            self._parked.discard(ident)
            event.set()

        entry = _Sleeper(deadline, next(self._seq), wake_me)
        with self._lock:
            self._sleepers.append(entry)
            self._parked.add(ident)
            self._parks += 1
        if wake is not None:
            self._early[id(wake)] = (wake, entry)
        event.wait()
        with self._lock:
            if entry in self._sleepers:
                self._sleepers.remove(entry)

    def wait_for(self, ready: Callable[[], bool], within: float) -> bool:
        """The driver's wait: turns until ``ready()`` (checked at quiet points) or ``within`` passed."""
        deadline = self._now + within
        while True:
            self.settle()
            if ready():
                return True
            if self._now >= deadline:
                return False
            self._step(deadline)

    def turn(self, deadline: float) -> None:
        """One turn of the driver: once all is quiet, wake what is due first, or reach ``deadline``
        when nothing is due by then; returns once all is quiet again."""
        self.settle()
        self._step(deadline)
        self.settle()

    def _step(self, deadline: float) -> None:
        self.turns += 1
        for key, (event, entry) in list(self._early.items()):
            if event.is_set():
                del self._early[key]
                with self._lock:
                    if entry in self._sleepers and not entry.woken:
                        entry.deadline = min(entry.deadline, self._now)
        cluster_next = None
        if self.cluster is not None:
            pending = self.cluster.pending_timers()
            if pending:
                cluster_next = self._base + pending[0]
        with self._lock:
            waiting = [s for s in self._sleepers if not s.woken]
            first = min(waiting) if waiting else None
        cluster_first = cluster_next is not None and (first is None or cluster_next <= first.deadline)
        if cluster_next is not None and cluster_first and cluster_next <= deadline:
            self._set(cluster_next)
            return
        if first is not None and first.deadline <= deadline:
            self._set(first.deadline)
            with self._lock:
                first.woken = True
            first.wake()
            return
        self._set(deadline)

    def _set(self, at: float) -> None:
        if at > self._now:
            self._now = at
        self.history.append((time.time(), self._now))
        if self.cluster is not None:
            target = self._now - self._base
            behind = target - self.cluster.sim_time
            if behind > -1e-6:
                self.cluster.advance(max(0.0, behind) + 1e-7)

    def settle(self) -> None:
        """Return once every watched actor is idle, seen twice in a row with nothing done between."""
        began = time.monotonic()
        last = None
        while True:
            seen = self._quiet()
            if seen is not None and seen == last:
                return
            last = seen
            if time.monotonic() - began > SETTLE_LIMIT:
                return
            time.sleep(0.0002 if seen is not None else 0.0005)

    def _quiet(self) -> tuple[Any, ...] | None:
        parked = set(self._parked)
        for thread in list(self._threads):
            if thread.is_alive() and thread.ident not in parked:
                return None
        for watch in list(self._loops):
            if not watch.idle(parked):
                return None
        return (self._parks, tuple(w.turns for w in self._loops), len(self._sleepers))

    def sim_at(self, real: float) -> float:
        """The simulated time at wall-clock time ``real`` (a time the audit log wrote)."""
        import bisect

        index = bisect.bisect_right(self.history, (real, float("inf"))) - 1
        return self.history[max(index, 0)][1]


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
