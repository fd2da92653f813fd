"""Queued pods, nodes being provisioned, refusals no retry changes, and a running pod's lagging status.

The corpus holds each class in real wording; these tests pin the edges the corpus does not: when
``schedule_timeout`` starts after a gate is lifted, which provisioning Events extend the wait and
which end the extension, what ``exec format error`` is and is not, and the policy's queue deadline.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_k8s_retry.classification import FailurePolicy, Outcome, PolicyError, Reason, classify
from airflow_k8s_retry.classification.policy import DEFAULT_QUEUE_TIMEOUT, MAX_SECONDS
from airflow_k8s_retry.classification.registry_messages import pull_cause

T0 = 1_773_480_000.0
KUEUE = "kueue.x-k8s.io/admission"


def gated(*gates: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "uid": "u"},
        "spec": {"containers": [{"name": "base"}], "schedulingGates": [{"name": g} for g in gates]},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "SchedulingGated",
                    "message": "Scheduling is blocked due to non-empty scheduling gates",
                }
            ],
        },
    }


def unschedulable() -> dict[str, Any]:
    pod = gated()
    del pod["spec"]["schedulingGates"]
    pod["status"]["conditions"][0].update(
        reason="Unschedulable", message="0/3 nodes are available: 3 Insufficient cpu."
    )
    return pod


def event(reason: str, message: str, at: str) -> dict[str, Any]:
    return {
        "reason": reason,
        "message": message,
        "lastTimestamp": at,
        "count": 1,
        "involvedObject": {"uid": "u"},
    }


# -- scheduling gates ---------------------------------------------------------------------------


def test_a_gated_pod_waits_as_queued_and_names_its_gates() -> None:
    verdict = classify(gated(KUEUE, "example.com/quota"), now=T0)
    assert (verdict.outcome, verdict.reason, verdict.rule) == (
        Outcome.WAIT,
        Reason.SCHEDULE_GATED,
        "scheduling_gated",
    )
    assert "kueue.x-k8s.io/admission, example.com/quota" in verdict.message
    assert verdict.deadline == T0 + DEFAULT_QUEUE_TIMEOUT


def test_schedule_timeout_starts_only_when_the_last_gate_is_lifted() -> None:
    policy = FailurePolicy(schedule_timeout=600)
    history = classify(gated(KUEUE), now=T0, policy=policy).history
    # Two hours in the queue: still queued, whatever schedule_timeout says.
    later = classify(gated(KUEUE), history=history, now=T0 + 7200, policy=policy)
    assert (later.outcome, later.reason) == (Outcome.WAIT, Reason.SCHEDULE_GATED)
    # The gate is lifted and the scheduler finds no room: schedule_timeout counts from now on.
    lifted = classify(unschedulable(), history=later.history, now=T0 + 7200, policy=policy)
    assert (lifted.outcome, lifted.reason, lifted.deadline) == (Outcome.WAIT, Reason.UNSCHEDULABLE, T0 + 7800)
    timed_out = classify(unschedulable(), history=lifted.history, now=T0 + 7800, policy=policy)
    assert (timed_out.outcome, timed_out.reason) == (Outcome.RETRY, Reason.SCHEDULE_TIMEOUT)


def test_the_queue_deadline_is_the_policys_and_then_a_retry() -> None:
    policy = FailurePolicy(queue_timeout=3600)
    first = classify(gated(KUEUE), now=T0, policy=policy)
    assert first.deadline == T0 + 3600
    ended = classify(gated(KUEUE), history=first.history, now=T0 + 3600, policy=policy)
    assert (ended.outcome, ended.reason) == (Outcome.RETRY, Reason.SCHEDULE_QUEUE_TIMEOUT)


def test_an_unset_queue_timeout_leaves_a_task_with_execution_timeout_to_that_deadline() -> None:
    assert FailurePolicy().until_execution_timeout().timeout("queue_timeout") == MAX_SECONDS
    assert FailurePolicy(queue_timeout=60).until_execution_timeout().timeout("queue_timeout") == 60
    assert FailurePolicy().timeout("queue_timeout") == DEFAULT_QUEUE_TIMEOUT


@pytest.mark.parametrize("value", [0, -1, float("nan"), "1h", MAX_SECONDS + 1])
def test_a_bad_queue_timeout_fails_when_the_dag_is_parsed(value: object) -> None:
    with pytest.raises(PolicyError, match=r"FailurePolicy\.queue_timeout"):
        FailurePolicy(queue_timeout=value)  # type: ignore[arg-type]


def test_queue_timeout_travels_in_the_payload() -> None:
    assert FailurePolicy().to_payload()["queue_timeout"] is None
    assert FailurePolicy.from_payload(FailurePolicy(queue_timeout=120).to_payload()).queue_timeout == 120


def test_the_gated_condition_without_gates_in_the_spec_is_not_a_queue() -> None:
    # The spec is the truth: a gate just lifted leaves the condition for the scheduler to rewrite.
    pod = gated()
    assert classify(pod, now=T0).reason is Reason.UNSCHEDULABLE


# -- provisioning Events --------------------------------------------------------------------------


def test_an_eks_auto_mode_nomination_extends_the_wait() -> None:
    events = [event("Nominated", "Pod should schedule on: nodeclaim/gpu-pool-6csft", "2026-03-14T09:27:02Z")]
    first = classify(unschedulable(), events, now=T0)
    assert first.deadline == T0 + 900  # scale_up_timeout from the nomination, past schedule_timeout


def test_a_gke_failed_scale_up_ends_the_extension() -> None:
    events = [
        event("TriggeredScaleUp", "pod triggered scale-up: [{pool 0->1 (max: 3)}]", "2026-03-14T09:27:02Z"),
        event(
            "FailedScaleUp",
            "Node scale up in zones us-central1-c associated with this pod failed: GCE out of resources. "
            "Pod is at risk of not being scheduled.",
            "2026-03-14T09:29:02Z",
        ),
    ]
    verdict = classify(unschedulable(), events, now=T0)
    assert verdict.deadline == T0 + 600
    assert "cluster-autoscaler's scale-up failed" in verdict.message


def test_a_promise_after_a_refusal_extends_again() -> None:
    events = [
        event(
            "NotTriggerScaleUp",
            "pod didn't trigger scale-up: 1 in backoff after failed scale-up",
            "2026-03-14T09:27:02Z",
        ),
        event("TriggeredScaleUp", "pod triggered scale-up: [{pool 0->1 (max: 3)}]", "2026-03-14T09:37:02Z"),
    ]
    assert classify(unschedulable(), events, now=T0).deadline == T0 + 900


def test_the_schedulers_own_failed_scheduling_is_not_karpenters_refusal() -> None:
    events = [
        event("Nominated", "Pod should schedule on: nodeclaim/default-x", "2026-03-14T09:27:02Z"),
        event("FailedScheduling", "0/3 nodes are available: 3 Insufficient cpu.", "2026-03-14T09:28:02Z"),
    ]
    assert classify(unschedulable(), events, now=T0).deadline == T0 + 900


# -- refusals no retry changes --------------------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        "image verifier bindir blocked pull of docker.io/acme/etl:2 with digest sha256:0f3e for reason: "
        "no valid signature",
        "SignatureValidationFailed: Source image rejected: None of the signatures were accepted",
    ],
)
def test_node_image_policy_refusals_are_their_own_cause(message: str) -> None:
    assert pull_cause(message) is Reason.IMAGE_POLICY_REFUSED


def test_a_broken_verifier_on_the_node_is_not_a_refusal_of_the_image() -> None:
    assert pull_cause("checking signature of x: verifying signatures: Invalid crypto engine") is None


def crashed(message: str, *, log: str = "") -> tuple[dict[str, Any], dict[str, str]]:
    pod = {
        "metadata": {"name": "p"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "base"}]},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "base",
                    "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": message}},
                }
            ],
        },
    }
    return pod, ({"base": log} if log else {})


@pytest.mark.parametrize(
    "text",
    [
        "exec /usr/local/bin/entrypoint: exec format error",
        'exec user process caused "exec format error"',
        "exec container process `/usr/bin/zsh`: Exec format error",
        "/bin/sh: 1: exec: /node-problem-detector: Exec format error",
    ],
)
def test_the_runtimes_exec_format_error_is_the_wrong_platform(text: str) -> None:
    for pod, logs in (crashed(text), crashed("", log=f"{text}\n")):
        verdict = classify(pod, now=T0, logs=logs)
        assert (verdict.outcome, verdict.reason, verdict.rule) == (
            Outcome.FAIL,
            Reason.IMAGE_WRONG_PLATFORM,
            "exec_format_error",
        )


@pytest.mark.parametrize(
    "text",
    [
        "OSError: [Errno 8] Exec format error: './tool'",  # the task started a wrong binary itself
        "fork/exec /usr/bin/tool: exec format error",  # ... from Go
    ],
)
def test_a_programs_own_exec_format_error_is_its_exit_code(text: str) -> None:
    pod, logs = crashed("", log=text)
    assert classify(pod, now=T0, logs=logs).reason is Reason.CONTAINER_EXIT_CODE


def test_the_log_tail_only_speaks_for_a_container_that_failed() -> None:
    pod = {
        "metadata": {"name": "p"},
        "status": {"phase": "Running", "containerStatuses": [{"name": "base", "state": {"running": {}}}]},
    }
    assert classify(pod, now=T0, logs={"base": "exec /x: exec format error"}).reason is Reason.RUNNING


def test_only_the_runtimes_line_of_a_log_reaches_the_verdict() -> None:
    pod, logs = crashed("", log="password=hunter2\nexec /app: exec format error\n")
    verdict = classify(pod, now=T0, logs=logs)
    assert "hunter2" not in verdict.message
    assert [e.message for e in verdict.evidence] == ["exec /app: exec format error"]
    assert verdict.evidence[0].source == "log"


# -- a running pod's lagging status -----------------------------------------------------------------


def lagging(phase: str, state: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "generation": 3},
        "status": {
            "phase": phase,
            "observedGeneration": 2,
            "containerStatuses": [{"name": "base", "state": state}],
        },
    }


def test_a_running_pod_is_never_relaunched_on_a_lagging_generation_alone() -> None:
    pod = lagging("Running", {"running": {}})
    first = classify(pod, now=T0)
    day_later = classify(pod, history=first.history, now=T0 + 86400)
    assert (day_later.outcome, day_later.reason) == (Outcome.WAIT, Reason.STATUS_BEHIND_SPEC)


def test_a_lost_container_still_relaunches_a_lagging_pod() -> None:
    pod = lagging("Running", {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown"}})
    verdict = classify(pod, now=T0)
    assert (verdict.outcome, verdict.reason) == (Outcome.RELAUNCH, Reason.NODE_LOST)


def test_a_pod_whose_work_does_not_run_is_relaunched_after_five_minutes_of_lag() -> None:
    pod = lagging("Pending", {"waiting": {"reason": "ContainerCreating"}})
    first = classify(pod, now=T0)
    assert classify(pod, history=first.history, now=T0 + 300).outcome is Outcome.RELAUNCH
