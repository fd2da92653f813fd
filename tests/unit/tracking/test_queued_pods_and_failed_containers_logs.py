"""The tracker and a queued pod (gate notes, Kueue's word, the queue's deadline), and the last look
that reads a failed container's log."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from airflow_k8s_retry.classification import FailurePolicy, Outcome, Reason
from airflow_k8s_retry.triggers.tracker import (
    Emit,
    LogTail,
    LookAgain,
    PodTracker,
    ReadDirectly,
    ReadWorkload,
    SleepUntil,
    Step,
)

T0 = 1_800_000_000.0
KUEUE = "kueue.x-k8s.io/admission"


@dataclass(frozen=True)
class Change:
    pod: dict[str, Any] | None
    deleted: bool = False
    unseen: bool = False


def gated(rv: int, *gates: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": str(rv)},
        "spec": {"containers": [{"name": "base"}], "schedulingGates": [{"name": g} for g in gates]},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}],
        },
    }


WORKLOAD = {
    "metadata": {"name": "pod-p-3f2a1", "labels": {"kueue.x-k8s.io/job-uid": "u-1"}},
    "status": {
        "conditions": [
            {
                "type": "QuotaReserved",
                "status": "False",
                "reason": "Pending",
                "message": "couldn't assign flavors to pod set main: insufficient unused quota for cpu in "
                "flavor default-flavor, 3 more needed",
            }
        ]
    },
}


def clock(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def sleep(step: Step) -> SleepUntil:
    assert isinstance(step, SleepUntil), step
    return step


def test_a_kueue_queued_pod_gets_a_note_every_five_minutes_with_its_workloads_word() -> None:
    tracker = PodTracker(pod_uid="u-1", started=T0)
    first = sleep(tracker.apply([Change(gated(1, KUEUE))], [], T0))
    assert (first.until, first.wake, first.notes) == (T0 + 86400, (T0 + 30,), ())
    # Half a minute in: the note wants Kueue's word first.
    assert tracker.apply([], [], T0 + 30) == ReadWorkload()
    tracker.workload_read(WORKLOAD)
    noted = sleep(tracker.apply([], [], T0 + 30))
    assert noted.notes == (
        f"schedule.gated: held by scheduling gate {KUEUE} since {clock(T0)}; waiting until "
        f"{clock(T0 + 86400)} (queue_timeout); Kueue Workload pod-p-3f2a1: QuotaReserved=False (Pending): "
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor "
        "default-flavor, 3 more needed",
    )
    assert (noted.until, noted.wake) == (T0 + 86400, (T0 + 330,))
    # Nothing in between, then the next note five minutes later, with a fresh read.
    assert sleep(tracker.apply([], [], T0 + 200)).notes == ()
    assert tracker.apply([], [], T0 + 330) == ReadWorkload()


def test_a_workload_read_that_is_refused_is_never_asked_again() -> None:
    tracker = PodTracker(pod_uid="u-1", started=T0)
    tracker.apply([Change(gated(1, KUEUE))], [], T0)
    assert tracker.apply([], [], T0 + 30) == ReadWorkload()
    tracker.workload_read(None, readable=False)  # a 403, or no Kueue here
    assert sleep(tracker.apply([], [], T0 + 30)).notes == (
        f"schedule.gated: held by scheduling gate {KUEUE} since {clock(T0)}; waiting until "
        f"{clock(T0 + 86400)} (queue_timeout)",
    )
    assert len(sleep(tracker.apply([], [], T0 + 330)).notes) == 1  # a note, and no read


def test_another_queues_gate_gets_notes_without_reads() -> None:
    tracker = PodTracker(pod_uid="u-1", started=T0)
    tracker.apply([Change(gated(1, "example.com/quota", "example.com/license"))], [], T0)
    notes = sleep(tracker.apply([], [], T0 + 30)).notes
    assert notes[0].startswith(
        "schedule.gated: held by scheduling gates example.com/quota, example.com/license"
    )


def test_with_an_execution_timeout_the_queue_waits_until_that_deadline() -> None:
    tracker = PodTracker(pod_uid="u-1", started=T0, execution_deadline=T0 + 7200)
    assert sleep(tracker.apply([Change(gated(1, "example.com/quota"))], [], T0)).until == T0 + 7200
    assert "(execution_timeout)" in sleep(tracker.apply([], [], T0 + 30)).notes[0]
    # The feed was quiet for long: the tracker reads the pod itself, and judges what it read.
    assert isinstance(tracker.apply([], [], T0 + 7200), ReadDirectly)
    ended = tracker.apply([Change(gated(2, "example.com/quota"))], [], T0 + 7200)
    assert isinstance(ended, Emit)
    assert (ended.verdict.reason, ended.verdict.outcome) == (Reason.EXECUTION_TIMEOUT, Outcome.RETRY)
    assert "the pod was schedule.gated" in ended.verdict.message


def test_a_queue_timeout_the_dag_sets_comes_before_a_later_execution_deadline() -> None:
    policy = FailurePolicy(queue_timeout=600)
    tracker = PodTracker(pod_uid="u-1", started=T0, policy=policy, execution_deadline=T0 + 7200)
    assert sleep(tracker.apply([Change(gated(1, "example.com/quota"))], [], T0)).until == T0 + 600
    assert isinstance(tracker.apply([], [], T0 + 600), ReadDirectly)
    step = tracker.apply([Change(gated(2, "example.com/quota"))], [], T0 + 600)
    assert isinstance(step, LookAgain) and step.verdict.reason is Reason.SCHEDULE_QUEUE_TIMEOUT
    assert step.log_tail is None


def test_the_schedule_wait_starts_when_the_last_gate_is_lifted() -> None:
    tracker = PodTracker(pod_uid="u-1", started=T0)
    tracker.apply([Change(gated(1, "example.com/quota"))], [], T0)
    lifted = gated(2)
    lifted["status"]["conditions"][0].update(reason="Unschedulable", message="0/1 nodes are available")
    assert sleep(tracker.apply([Change(lifted)], [], T0 + 5000)).until == T0 + 5600


def failed(rv: int, message: str = "") -> dict[str, Any]:
    terminated = {"exitCode": 1, "reason": "Error", "message": message}
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": str(rv)},
        "spec": {"containers": [{"name": "base", "image": "etl:1"}], "restartPolicy": "Never"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"name": "base", "state": {"terminated": terminated}}],
        },
    }


def test_the_last_look_reads_the_failed_containers_log_and_its_exec_format_error_fails_at_once() -> None:
    tracker = PodTracker(pod_uid="u-1", started=T0)
    step = tracker.apply([Change(failed(1))], [], T0)
    assert isinstance(step, LookAgain)
    assert (step.verdict.reason, step.log_tail) == (
        Reason.CONTAINER_EXIT_CODE,
        LogTail("base", previous=False),
    )
    emitted = tracker.looked(failed(1), [], T0 + 1, "exec /app: exec format error\n")
    assert isinstance(emitted, Emit)
    assert (emitted.verdict.outcome, emitted.verdict.reason) == (Outcome.FAIL, Reason.IMAGE_WRONG_PLATFORM)


def test_a_log_that_says_nothing_of_the_kind_leaves_the_exit_code() -> None:
    tracker = PodTracker(pod_uid="u-1", started=T0)
    tracker.apply([Change(failed(1))], [], T0)
    emitted = tracker.looked(failed(1), [], T0 + 1, "Traceback (most recent call last):\nValueError: x\n")
    assert isinstance(emitted, Emit) and emitted.verdict.reason is Reason.CONTAINER_EXIT_CODE
    # An unreadable log (None) leaves it too.
    again = PodTracker(pod_uid="u-1", started=T0)
    again.apply([Change(failed(1))], [], T0)
    assert again.looked(failed(1), [], T0 + 1, None).verdict.reason is Reason.CONTAINER_EXIT_CODE  # type: ignore[attr-defined]


def test_a_crash_loop_reads_the_log_of_the_run_before() -> None:
    looping = failed(1)
    status = looping["status"]
    looping["spec"]["restartPolicy"] = "Always"
    status["phase"] = "Running"
    status["containerStatuses"][0].update(
        state={"waiting": {"reason": "CrashLoopBackOff"}},
        lastState={"terminated": {"exitCode": 1, "reason": "Error"}},
    )
    tracker = PodTracker(pod_uid="u-1", started=T0)
    sleep(tracker.apply([Change(looping)], [], T0))
    step = tracker.apply([], [], T0 + 180)
    assert isinstance(step, LookAgain) and step.log_tail == LogTail("base", previous=True)


def test_a_failure_that_does_not_rest_on_an_exit_reads_no_log() -> None:
    pod = failed(1)
    pod["status"]["containerStatuses"][0]["state"] = {
        "waiting": {"reason": "InvalidImageName", "message": 'Failed to apply default image tag "Etl:1"'}
    }
    pod["status"]["phase"] = "Pending"
    step = PodTracker(pod_uid="u-1", started=T0).apply([Change(pod)], [], T0)
    assert isinstance(step, LookAgain) and step.log_tail is None


def test_a_container_that_never_ran_has_no_log_to_read() -> None:
    pod = failed(1)
    pod["status"]["phase"] = "Pending"
    pod["status"]["containerStatuses"][0]["state"] = {
        "waiting": {"reason": "RunContainerError", "message": "failed to start container"}
    }
    tracker = PodTracker(pod_uid="u-1", started=T0)
    sleep(tracker.apply([Change(pod)], [], T0))
    step = tracker.apply([Change(pod)], [], T0 + 180)
    assert isinstance(step, LookAgain) and step.verdict.reason is Reason.CONTAINER_CREATE_ERROR
    assert step.log_tail is None
