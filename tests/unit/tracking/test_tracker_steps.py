"""The tracker's steps in a few plain stories (numbers for the time, dicts for the pod)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_k8s_retry.classification import Outcome
from airflow_k8s_retry.triggers.tracker import (
    Emit,
    FetchLogs,
    LookAgain,
    PodTracker,
    ReadDirectly,
    Revive,
    SleepUntil,
)

T0 = 1_800_000_000.0


@dataclass(frozen=True)
class Change:
    pod: dict[str, Any] | None
    deleted: bool = False
    unseen: bool = False


def pod(rv: int, phase: str = "Running", state: dict[str, Any] | None = None) -> dict[str, Any]:
    state = state if state is not None else {"running": {"startedAt": "2027-01-15T08:00:00Z"}}
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": str(rv)},
        "spec": {"containers": [{"name": "base", "image": "etl:1"}], "restartPolicy": "Never"},
        "status": {"phase": phase, "containerStatuses": [{"name": "base", "state": state}]},
    }


def test_log_reads_do_not_move_a_running_pods_recheck() -> None:
    tracker = PodTracker(pod_uid="u-1", logging_interval=60, started=T0)
    assert tracker.apply([Change(pod(1))], [], T0) == SleepUntil(until=T0 + 600, wake=(T0 + 60,))
    assert tracker.apply([], [], T0 + 60) == FetchLogs(container="base")
    assert tracker.apply([], [], T0 + 60) == SleepUntil(until=T0 + 600, wake=(T0 + 120,))
    # The re-check itself: the feed was quiet for 10 minutes, so the pod is read directly.
    for at in range(120, 600, 60):
        assert isinstance(tracker.apply([], [], T0 + at), FetchLogs)
        assert tracker.apply([], [], T0 + at).until == T0 + 600  # type: ignore[union-attr]
    assert tracker.apply([], [], T0 + 600) == ReadDirectly()


def test_events_about_the_pod_do_not_stand_in_for_a_stuck_pods_feed() -> None:
    # The pods feed has said nothing for 10 minutes while the events feed still delivers: the
    # re-check reads the pod, whatever the events say (they are news about the pod, not its state).
    tracker = PodTracker(pod_uid="u-1", started=T0)
    assert tracker.apply([Change(pod(1))], [], T0) == SleepUntil(until=T0 + 600)
    event = {"reason": "Pulled", "message": "Pulled", "lastTimestamp": "2027-01-15T08:00:01Z"}
    assert tracker.apply([], [event], T0 + 600) == ReadDirectly()
    # A pod change at the re-check is the feed speaking: no direct read then.
    tracker = PodTracker(pod_uid="u-1", started=T0)
    tracker.apply([Change(pod(1))], [], T0)
    assert tracker.apply([Change(pod(2))], [], T0 + 600) == SleepUntil(until=T0 + 1200)


def test_no_log_reads_once_the_container_stopped() -> None:
    tracker = PodTracker(pod_uid="u-1", logging_interval=60, started=T0)
    tracker.apply([Change(pod(1))], [], T0)
    done = pod(2, "Succeeded", {"terminated": {"exitCode": 0, "reason": "Completed"}})
    step = tracker.apply([Change(done)], [], T0 + 30)
    assert isinstance(step, Emit) and step.verdict.outcome is Outcome.SUCCEED


def test_a_failure_gets_a_last_look_and_a_recovered_pod_withdraws_it() -> None:
    tracker = PodTracker(pod_uid="u-1", started=T0)
    failed = pod(1, "Failed", {"terminated": {"exitCode": 3, "reason": "Error"}})
    step = tracker.apply([Change(failed)], [], T0)
    assert isinstance(step, LookAgain) and step.verdict.outcome is Outcome.RETRY
    assert isinstance(tracker.looked(None, [], T0), Emit)  # gone since: the verdict stands

    again = PodTracker(pod_uid="u-1", started=T0)
    assert isinstance(again.apply([Change(failed)], [], T0), LookAgain)
    assert again.looked(pod(2), [], T0 + 1) == Revive(
        pod=pod(2), notes=("container.exit_code withdrawn, the pod is pod.running now (" + _running() + ")",)
    )


def _running() -> str:
    from airflow_k8s_retry.classification import classify

    return classify(pod(2), [], None, now=T0 + 1).message
