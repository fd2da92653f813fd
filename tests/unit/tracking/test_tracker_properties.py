"""Properties of the trigger's decisions (``PodTracker``), for any sequence of pod states.

The tracker is pure, so a small driver plays the trigger's part: a "world" holds the pod's state
over time (what a perfect watch delivers, what a direct read or the last look returns, and the
history annotation the trigger stamps), and the driver performs each step the tracker returns.

* exactly one emission: every run ends in one ``Emit``, in a bounded number of steps, and time
  moves forward between any two steps that wait (no busy loop);
* every wait is bounded: a ``SleepUntil`` is finite, in the future, never past the execution
  deadline, and its extra wake-ups come before it;
* the stamp keeps up: whenever the tracker waits, what it learned is on the pod, or it wakes to
  stamp it at most ``HISTORY_SETTLE`` seconds after the history first differed from the stamp (a
  pod's first seconds are written together), and never waits with a running grace timer (but a
  starting pod's or a generic pull back-off's) or a stronger pull cause unstamped;
* a restart from the history payload is equivalent to no restart: a tracker re-created in the
  middle of a run (from the trigger's kwargs, merging the stamped history off the pod) emits the
  same verdict at the same time. The restart comes while the tracker sleeps with its history
  stamped: a restart inside a settle window restarts a starting pod's (or a generic back-off's)
  timer at most ``HISTORY_SETTLE`` seconds late, which the property above bounds.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from airflow_k8s_retry.classification import FailurePolicy, Outcome
from airflow_k8s_retry.classification.rules import RULES
from airflow_k8s_retry.kube.naming import HISTORY_ANNOTATION
from airflow_k8s_retry.triggers.tracker import (
    HISTORY_SETTLE,
    SETTLING_RULES,
    Emit,
    FetchLogs,
    LookAgain,
    PodTracker,
    ReadDirectly,
    Revive,
    SleepUntil,
    Step,
)
from tests.support.pod_strategies import events, pods

T0 = 1_773_480_000.0
EXAMPLES = int(os.environ.get("HYPOTHESIS_EXAMPLES", "200"))
PROPERTY = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: Steps beyond the sleeps: reads, looks and revivals between two waits.
MAX_STEPS = 2_000


@dataclass(frozen=True)
class Change:
    pod: dict[str, Any] | None
    deleted: bool = False
    unseen: bool = False


@dataclass
class World:
    """The pod's states over time: ``timeline`` is (seconds after T0, pod or None for deleted)."""

    timeline: list[tuple[float, dict[str, Any] | None]]
    events: list[dict[str, Any]]
    stamp: str | None = None
    rv: int = 0
    delivered: int = 0  # how many timeline entries the watch has delivered

    def state_at(self, now: float) -> dict[str, Any] | None:
        current: dict[str, Any] | None = None
        for at, pod in self.timeline:
            if T0 + at <= now:
                current = pod
        return self._dressed(current)

    def _dressed(self, pod: dict[str, Any] | None) -> dict[str, Any] | None:
        if pod is None:
            return None
        pod = copy.deepcopy(pod)
        meta = pod.setdefault("metadata", {})
        if self.stamp is not None:
            meta.setdefault("annotations", {})[HISTORY_ANNOTATION] = self.stamp
        return pod

    def changed_since_sent(self, current: dict[str, Any] | None) -> bool:
        sent = self.timeline[self.delivered - 1][1] if self.delivered else None
        return self._dressed(sent) != current

    def next_at(self) -> float | None:
        if self.delivered < len(self.timeline):
            return T0 + self.timeline[self.delivered][0]
        return None

    def deliver(self) -> Change:
        _, pod = self.timeline[self.delivered]
        self.delivered += 1
        if pod is None:
            return Change(None, deleted=True)
        self.rv += 1
        dressed = self._dressed(pod)
        assert dressed is not None
        dressed["metadata"]["resourceVersion"] = str(self.rv)
        return Change(dressed)


@dataclass
class Trace:
    steps: list[Step] = field(default_factory=list)
    emitted: list[tuple[float, Emit]] = field(default_factory=list)
    #: Since when the tracker's history differs from the stamp on the pod (None: it does not).
    unsaved_since: float | None = None


def saved(world: World, track: PodTracker) -> bool:
    """Whether the pod carries what the tracker knows (an empty history is never stamped)."""
    if not track.history.first_seen:
        return True
    return world.stamp == json.dumps(track.history.to_payload(), sort_keys=True)


def check_stamp_keeps_up(world: World, track: PodTracker, step: SleepUntil, now: float, trace: Trace) -> None:
    if saved(world, track) or track.relaunch_seen is not None:
        # (A RELAUNCH waiting for the old containers is a final verdict: nothing is stamped for it,
        # and a restart starts that wait again.)
        trace.unsaved_since = None
        return
    if trace.unsaved_since is None:
        trace.unsaved_since = now
    assert min((step.until, *step.wake)) <= trace.unsaved_since + HISTORY_SETTLE, (step, trace.unsaved_since)
    waiting = track.waiting
    if waiting is None or waiting.outcome is not Outcome.WAIT or waiting.rule in SETTLING_RULES:
        return  # nothing runs on the unstamped part but a starting pod's or a generic back-off's timer
    assert waiting.rule not in GRACE_RULES, f"the timer of {waiting.rule} runs unstamped"
    stamped = json.loads(world.stamp) if world.stamp else {}
    assert track.history.to_payload()["strongest"] == stamped.get("strongest"), "a pull cause unstamped"


GRACE_RULES = frozenset(r.name for r in RULES if r.outcome is not Outcome.WAIT and r.grace)


def tracker(policy: FailurePolicy, deadline: float, now: float) -> PodTracker:
    return PodTracker(
        pod_uid="u-1", policy=policy, execution_deadline=deadline, started=now, logging_interval=30
    )


def drive(
    world: World, track: PodTracker, now: float, trace: Trace, *, stop_at: float | None = None
) -> float:
    """Perform the tracker's steps against ``world`` until it emits (or ``stop_at`` is reached)."""
    step = track.apply([], world.events, now)
    same_time = 0
    # No knob drawn here is under a second, so a run waits at most about once a second until its
    # deadline (a deleting pod is re-checked every running_recheck): the limit grows with the budget.
    assert track.execution_deadline is not None
    for _ in range(MAX_STEPS + 2 * int(track.execution_deadline - now)):
        trace.steps.append(step)
        if step.remember is not None:
            world.stamp = json.dumps(step.remember.to_payload(), sort_keys=True)
            track.stamped_on_pod(step.remember)
        if isinstance(step, Emit):
            trace.emitted.append((now, step))
            return now
        if isinstance(step, LookAgain):
            step = track.looked(world.state_at(now), world.events, now)
            continue
        if isinstance(step, Revive):
            step = track.apply([Change(step.pod)], world.events, now)
        elif isinstance(step, ReadDirectly):
            # As the hub's subscription: a read that shows nothing new is no change at all.
            current = world.state_at(now)
            news = [Change(current, deleted=current is None)] if world.changed_since_sent(current) else []
            step = track.apply(news, world.events, now)
        elif isinstance(step, FetchLogs):
            step = track.apply([], world.events, now)
        else:
            assert isinstance(step, SleepUntil)
            check_bounded(step, now, track)
            check_stamp_keeps_up(world, track, step, now, trace)
            wake = min((step.until, *step.wake))
            arrival = world.next_at()
            # A restart is taken where the pod carries what the tracker knows (see the docstring).
            if stop_at is not None and min(wake, arrival or wake) >= stop_at and saved(world, track):
                return now
            # A change that arrives as a timer falls due is seen first, in every run alike: the order
            # of two things at one instant must not depend on when the tracker last woke.
            if arrival is not None and arrival <= wake:
                now = max(now, arrival)
                step = track.apply([world.deliver()], world.events, now)
            else:
                now = wake
                step = track.apply([], world.events, now)
            same_time = 0
            continue
        same_time += 1
        assert same_time < 10, f"no time passes between steps: {trace.steps[-10:]}"
    raise AssertionError(f"no emission after {len(trace.steps)} steps: {trace.steps[-5:]}")


def check_bounded(step: SleepUntil, now: float, track: PodTracker) -> None:
    assert step.until == step.until and step.until != float("inf"), step
    assert step.until > now, f"a wait that is already over: {step.until} <= {now}"
    assert track.execution_deadline is not None and step.until <= track.execution_deadline
    assert all(now < t < step.until for t in step.wake), step


@st.composite
def worlds(draw: st.DrawFn) -> World:
    """A pod through a few states at increasing times, maybe deleted at the end. The pod exists
    when the run starts (the operator creates it before deferring)."""
    states = draw(st.lists(pods(), min_size=1, max_size=5))
    later = draw(
        st.lists(st.floats(min_value=0, max_value=1200), min_size=len(states) - 1, max_size=len(states) - 1)
    )
    gaps = [0.0, *later]
    timeline: list[tuple[float, dict[str, Any] | None]] = []
    at = 0.0
    for pod, gap in zip(states, gaps, strict=True):
        at += gap
        timeline.append((at, pod))
    if draw(st.booleans()):
        timeline.append((at + draw(st.floats(min_value=0, max_value=600)), None))
    return World(timeline=timeline, events=draw(events()))


@st.composite
def policies(draw: st.DrawFn) -> FailurePolicy:
    return FailurePolicy(
        relaunch_budget=draw(st.integers(0, 3)),
        startup_timeout=draw(st.floats(min_value=1, max_value=3600)),
        schedule_timeout=draw(st.floats(min_value=1, max_value=3600)),
        running_recheck=draw(st.floats(min_value=1, max_value=3600)),
    )


budgets = st.floats(min_value=60, max_value=6 * 3600)


@PROPERTY
@given(world=worlds(), policy=policies(), budget=budgets)
def test_every_run_emits_exactly_once_and_every_wait_is_bounded(
    world: World, policy: FailurePolicy, budget: float
) -> None:
    trace = Trace()
    end = drive(world, tracker(policy, T0 + budget, T0), T0, trace)
    assert len(trace.emitted) == 1
    assert [s for s in trace.steps if isinstance(s, Emit)] == [trace.emitted[0][1]]
    assert end <= T0 + budget
    event(f"emitted {trace.emitted[0][1].verdict.outcome.value}")


@PROPERTY
@given(world=worlds(), policy=policies(), budget=budgets, split=st.floats(min_value=0.01, max_value=0.99))
def test_a_restart_from_the_history_payload_changes_nothing(
    world: World, policy: FailurePolicy, budget: float, split: float
) -> None:
    deadline = T0 + budget
    whole = Trace()
    drive(copy.deepcopy(world), tracker(policy, deadline, T0), T0, whole)

    first, second = Trace(), Trace()
    before = tracker(policy, deadline, T0)
    halted = drive(world, before, T0, first, stop_at=T0 + split * budget)
    if first.emitted:
        assert first.emitted == whole.emitted
        return
    last = first.steps[-1]
    assert isinstance(last, SleepUntil)
    if before.relaunch_seen is not None:
        return  # RELAUNCH's wait for the old containers to stop is not carried over a restart
    # Whatever the tracker learned is on the pod while it sleeps: a restart loses nothing.
    if before.history.first_seen:
        assert world.stamp == json.dumps(before.history.to_payload(), sort_keys=True)
    restart = max(halted, min(T0 + split * budget, last.until, *last.wake))
    after = tracker(policy, deadline, restart)
    # A new subscription delivers the pod as it is now (with the stamp), then what follows.
    current = world.state_at(restart)
    now = [(restart - T0, current)] if world.delivered else []  # a deleted pod ends the run at once
    resumed = World(
        timeline=now + world.timeline[world.delivered :],
        events=world.events,
        stamp=world.stamp,
        rv=world.rv,
    )
    drive(resumed, after, restart, second)
    event("restarted")
    (at_whole, emit_whole), (at_second, emit_second) = whole.emitted[0], second.emitted[0]
    assert (emit_second.verdict.outcome, emit_second.verdict.reason) == (
        emit_whole.verdict.outcome,
        emit_whole.verdict.reason,
    )
    assert at_second == at_whole
