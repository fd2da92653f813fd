"""When the tracker asks for its history to be stamped on the pod (a step's ``remember``).

A change that bears on a running grace timer, or a stronger pull cause, is stamped with the step
that follows it; a starting pod's first-seen time waits up to ``HISTORY_SETTLE`` seconds of the
trigger's clock for the signal that usually follows, so the classic failure (pending, then the
registry's "not found") is stamped once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_k8s_retry.triggers.tracker import HISTORY_SETTLE, PodTracker, SleepUntil, Step

T0 = 1_800_000_000.0
NOT_FOUND = (
    'Failed to pull image "notavalidimage": rpc error: code = NotFound desc = failed to pull and unpack '
    'image "docker.io/library/notavalidimage:latest": failed to resolve reference '
    '"docker.io/library/notavalidimage:latest": docker.io/library/notavalidimage:latest: not found'
)


@dataclass(frozen=True)
class Change:
    pod: dict[str, Any] | None
    deleted: bool = False
    unseen: bool = False


def pod(rv: int, waiting: dict[str, Any] | None = None) -> dict[str, Any]:
    statuses = [{"name": "base", "state": {"waiting": waiting}}] if waiting else []
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": str(rv)},
        "spec": {"containers": [{"name": "base", "image": "notavalidimage"}], "restartPolicy": "Never"},
        "status": {"phase": "Pending", "containerStatuses": statuses},
    }


PENDING = pod(1)
PULL_FAILED = pod(2, {"reason": "ErrImagePull", "message": NOT_FOUND})


def stamp(tracker: PodTracker, step: Step) -> Step:
    """Perform the step's ``remember`` as the trigger does after a successful PATCH."""
    if step.remember is not None:
        tracker.stamped_on_pod(step.remember)
    return step


def test_a_starting_pods_history_waits_for_the_signal_that_follows() -> None:
    tracker = PodTracker(pod_uid="u-1", started=T0)
    first = stamp(tracker, tracker.apply([Change(PENDING)], [], T0))
    assert isinstance(first, SleepUntil) and first.remember is None
    assert T0 + HISTORY_SETTLE in first.wake  # it is not left unstamped for longer
    # The pull error's grace timer runs: stamped at once, with the pending pod's first-seen time.
    second = stamp(tracker, tracker.apply([Change(PULL_FAILED)], [], T0 + 1))
    assert isinstance(second, SleepUntil) and second.remember is not None
    assert set(second.remember.first_seen) == {"pod.pending", "image.not_found:base"}
    assert second.remember.first_seen["pod.pending"] == T0
    # Nothing new: nothing more to stamp, and no extra wake-up for it.
    third = tracker.apply([Change(pod(3, {"reason": "ImagePullBackOff", "message": "Back-off"}))], [], T0 + 2)
    assert isinstance(third, SleepUntil) and third.remember is None
    assert all(at > T0 + 2 + HISTORY_SETTLE for at in (third.until, *third.wake))


def test_a_pod_that_stays_pending_is_stamped_once_the_settle_time_is_over() -> None:
    tracker = PodTracker(pod_uid="u-1", started=T0)
    assert stamp(tracker, tracker.apply([Change(PENDING)], [], T0)).remember is None
    assert stamp(tracker, tracker.apply([], [], T0 + 2)).remember is None  # another wake-up, early
    due = stamp(tracker, tracker.apply([], [], T0 + HISTORY_SETTLE))
    assert isinstance(due, SleepUntil) and due.remember is not None
    assert due.remember.first_seen == {"pod.pending": T0}
    assert T0 + HISTORY_SETTLE not in due.wake


def test_a_failed_write_is_tried_again_at_the_next_step() -> None:
    tracker = PodTracker(pod_uid="u-1", started=T0)
    failed = tracker.apply([Change(PULL_FAILED)], [], T0)
    assert failed.remember is not None  # ... and the PATCH failed: stamped_on_pod is not called
    again = tracker.apply([], [], T0 + 1)
    assert again.remember == failed.remember


def test_without_a_settle_time_every_change_is_stamped_at_once() -> None:
    tracker = PodTracker(pod_uid="u-1", started=T0, history_settle=0)
    first = stamp(tracker, tracker.apply([Change(PENDING)], [], T0))
    assert first.remember is not None and first.remember.first_seen == {"pod.pending": T0}


def test_a_generic_back_off_waits_for_the_event_that_names_its_cause() -> None:
    # A trigger that starts on a pod already backing off lists the pods before the Events.
    tracker = PodTracker(pod_uid="u-1", started=T0)
    backing_off = pod(3, {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "notavalidimage"'})
    first = stamp(tracker, tracker.apply([Change(backing_off)], [], T0))
    assert isinstance(first, SleepUntil) and first.remember is None
    event = {
        "type": "Warning",
        "reason": "Failed",
        "message": NOT_FOUND,
        "count": 1,
        "involvedObject": {"kind": "Pod", "name": "p", "uid": "u-1", "fieldPath": "spec.containers{base}"},
        "lastTimestamp": "2027-01-15T08:00:00Z",
    }
    second = stamp(tracker, tracker.apply([], [event], T0 + 0.1))
    assert isinstance(second, SleepUntil) and second.remember is not None
    assert second.remember.strongest is not None and "image.not_found:base" in second.remember.first_seen
