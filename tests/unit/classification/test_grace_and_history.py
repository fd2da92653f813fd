"""Grace timers run on our clock from first sight, survive restarts, and evidence is sticky."""

from __future__ import annotations

from typing import Any

from airflow_k8s_retry.classification import (
    FailurePolicy,
    History,
    Outcome,
    Reason,
    classify,
    classify_seen_for,
)

T0 = 1_773_480_000.0


def pod(
    phase: str = "Pending",
    waiting: tuple[str, str] | None = None,
    *,
    conditions: list[dict[str, Any]] | None = None,
    created: str = "2020-01-01T00:00:00Z",
    container: str = "base",
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "conditions": conditions or []}
    if waiting is not None:
        reason, message = waiting
        status["containerStatuses"] = [
            {
                "name": container,
                "image": "acme/etl:1",
                "state": {"waiting": {"reason": reason, "message": message}},
            }
        ]
    return {
        "metadata": {"name": "etl-1", "namespace": "jobs", "uid": "u-1", "creationTimestamp": created},
        "spec": {"restartPolicy": "Never", "containers": [{"name": container, "image": "acme/etl:1"}]},
        "status": status,
    }


NOT_FOUND = ("ErrImagePull", 'failed to resolve reference "acme/etl:1": docker.io/acme/etl:1: not found')
DECAYED = ("ImagePullBackOff", 'Back-off pulling image "acme/etl:1"')
RATE_LIMITED = (
    "ErrImagePull",
    "429 Too Many Requests - Server message: toomanyrequests: You have reached your pull rate limit.",
)


def test_grace_starts_at_first_sight_on_our_clock_not_at_pod_creation() -> None:
    # The pod was created years ago; the signal is new to us, so the full grace applies.
    verdict = classify(pod(waiting=NOT_FOUND), now=T0)
    assert (verdict.outcome, verdict.reason, verdict.deadline) == (
        Outcome.WAIT,
        Reason.IMAGE_NOT_FOUND,
        T0 + 90,
    )
    assert verdict.history.since("image.not_found:base") == T0


def test_message_decay_keeps_the_strongest_cause_until_the_deadline() -> None:
    first = classify(pod(waiting=NOT_FOUND), now=T0)
    decayed = classify(pod(waiting=DECAYED), history=first.history, now=T0 + 40)
    assert (decayed.outcome, decayed.reason, decayed.deadline) == (
        Outcome.WAIT,
        Reason.IMAGE_NOT_FOUND,
        T0 + 90,
    )
    assert "strongest cause seen earlier" in decayed.message
    assert decayed.history.strongest is not None
    assert decayed.history.strongest.seen_at == T0
    final = classify(pod(waiting=DECAYED), history=decayed.history, now=T0 + 90)
    assert (final.outcome, final.reason) == (Outcome.RETRY, Reason.IMAGE_NOT_FOUND)


def test_without_history_the_decayed_text_is_only_a_generic_backoff() -> None:
    verdict = classify(pod(waiting=DECAYED), now=T0)
    assert (verdict.outcome, verdict.reason, verdict.deadline) == (
        Outcome.WAIT,
        Reason.IMAGE_PULL_BACKOFF,
        T0 + 300,
    )


def test_a_restart_resumes_the_timer_from_the_history_payload() -> None:
    first = classify(pod(waiting=RATE_LIMITED), now=T0)
    stored = first.history.to_payload()  # what a trigger keeps in its kwargs or on the pod
    resumed = classify(pod(waiting=DECAYED), history=History.from_payload(stored), now=T0 + 600)
    assert (resumed.outcome, resumed.reason, resumed.deadline) == (
        Outcome.WAIT,
        Reason.IMAGE_RATE_LIMITED,
        T0 + 900,
    )


def test_a_weaker_cause_does_not_replace_a_stronger_one() -> None:
    first = classify(pod(waiting=NOT_FOUND), now=T0)
    later = classify(
        pod(waiting=DECAYED),
        history=first.history,
        now=T0 + 10,
        events=[
            {
                "reason": "Failed",
                "message": 'Failed to pull image "acme/etl:1": dial tcp: i/o timeout',
                "involvedObject": {"uid": "u-1", "fieldPath": "spec.containers{base}"},
            },
        ],
    )
    assert later.reason is Reason.IMAGE_NOT_FOUND
    assert later.history.strongest == first.history.strongest


def test_a_specific_current_message_wins_over_the_remembered_one() -> None:
    first = classify(pod(waiting=NOT_FOUND), now=T0)
    now_limited = classify(pod(waiting=RATE_LIMITED), history=first.history, now=T0 + 10)
    assert (now_limited.outcome, now_limited.reason) == (Outcome.WAIT, Reason.IMAGE_RATE_LIMITED)
    assert now_limited.deadline == T0 + 10 + 900


def test_evidence_names_the_container_and_when_it_was_seen() -> None:
    verdict = classify(pod(waiting=NOT_FOUND, container="loader"), now=T0)
    [evidence] = verdict.evidence
    assert (evidence.reason, evidence.source, evidence.container, evidence.seen_at) == (
        Reason.IMAGE_NOT_FOUND,
        "status",
        "loader",
        T0,
    )
    assert "not found" in evidence.message


def test_running_pod_gets_a_recheck_deadline_from_the_policy() -> None:
    running = pod("Running")
    assert classify(running, now=T0).deadline == T0 + 600
    verdict = classify(running, now=T0, policy=FailurePolicy(running_recheck=30))
    assert (verdict.outcome, verdict.reason, verdict.deadline) == (Outcome.WAIT, Reason.RUNNING, T0 + 30)


UNSCHEDULABLE = [
    {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/3 nodes are available",
    }
]


def scale_up(stamp: str) -> dict[str, Any]:
    return {
        "reason": "TriggeredScaleUp",
        "message": "pod triggered scale-up: [{ng 1->2 (max: 5)}]",
        "lastTimestamp": stamp,
        "count": 1,
        "involvedObject": {"uid": "u-1"},
    }


def test_a_fresh_scale_up_extends_the_schedule_wait_but_never_without_bound() -> None:
    p = pod(conditions=UNSCHEDULABLE)
    first = classify(p, now=T0)
    assert (first.reason, first.deadline) == (Reason.UNSCHEDULABLE, T0 + 600)
    # The autoscaler reacts 500 s later: the pod gets scale_up_timeout (900 s) from then ...
    extended = classify(p, [scale_up("2026-03-14T09:30:00Z")], history=first.history, now=T0 + 500)
    assert (extended.outcome, extended.deadline) == (Outcome.WAIT, T0 + 1400)
    # ... a later scale-up cannot push past schedule_timeout + scale_up_timeout ...
    events = [scale_up("2026-03-14T09:30:00Z"), scale_up("2026-03-14T09:50:00Z")]
    again = classify(p, events, history=extended.history, now=T0 + 1300)
    assert (again.outcome, again.deadline) == (Outcome.WAIT, T0 + 1500)
    # ... and then it is over.
    final = classify(p, events, history=again.history, now=T0 + 1500)
    assert (final.outcome, final.reason) == (Outcome.RETRY, Reason.SCHEDULE_TIMEOUT)
    assert "cluster-autoscaler is adding a node" in final.message


def test_not_trigger_scale_up_is_reported_but_does_not_extend() -> None:
    refusal = {
        "reason": "NotTriggerScaleUp",
        "message": "pod didn't trigger scale-up: 1 max node group size reached",
        "involvedObject": {"uid": "u-1"},
    }
    verdict = classify(pod(conditions=UNSCHEDULABLE), [refusal], now=T0)
    assert verdict.deadline == T0 + 600
    assert "will not add a node" in verdict.message
    assert "max node group size reached" in verdict.message


def test_classify_seen_for_backdates_every_timer() -> None:
    assert classify_seen_for(pod(waiting=NOT_FOUND), elapsed=89, now=T0).outcome is Outcome.WAIT
    assert classify_seen_for(pod(waiting=NOT_FOUND), elapsed=90, now=T0).outcome is Outcome.RETRY


def test_the_first_seen_key_of_one_container_does_not_time_another() -> None:
    first = classify(pod(waiting=NOT_FOUND, container="a"), now=T0)
    other = classify(pod(waiting=NOT_FOUND, container="b"), history=first.history, now=T0 + 80)
    assert other.deadline == T0 + 80 + 90


def test_a_config_error_event_is_not_read_as_a_registry_answer() -> None:
    events = [
        {
            "reason": "Failed",
            "message": 'Error: secret "db" not found',
            "involvedObject": {"uid": "u-1", "fieldPath": "spec.containers{base}"},
        },
    ]
    verdict = classify(pod(waiting=DECAYED), events, now=T0)
    assert verdict.reason is Reason.IMAGE_PULL_BACKOFF
    assert verdict.history.strongest is None


def test_an_event_without_field_path_is_matched_by_the_image_the_spec_names() -> None:
    p = pod(waiting=DECAYED)
    p["status"]["containerStatuses"][0]["image"] = "docker.io/acme/etl:1"  # resolved by the runtime
    events = [
        {
            "reason": "Failed",
            "message": 'Failed to pull image "acme/etl:1": manifest unknown',
            "involvedObject": {},
        },
    ]
    verdict = classify(p, events, now=T0)
    assert verdict.reason is Reason.IMAGE_NOT_FOUND
    assert verdict.evidence[0].container == "base"
