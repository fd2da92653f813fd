"""The rule table is data: ordered, named, explained, with a catch-all last."""

from __future__ import annotations

import re

import pytest

from airflow_k8s_retry.classification import (
    RULES,
    Outcome,
    PolicyField,
    Reason,
    Seconds,
    classify,
    keys,
    rule_grace,
    rule_named,
    trace,
)
from airflow_k8s_retry.classification.policy import DEFAULT_POLICY, FailurePolicy

T0 = 1_773_480_000.0


def test_rules_are_named_once_explained_and_end_with_a_catch_all() -> None:
    names = [r.name for r in RULES]
    assert len(names) == len(set(names))
    for rule in RULES:
        assert rule.why.strip()
        assert isinstance(rule.reason, Reason)
        assert isinstance(rule.outcome, Outcome)
        assert rule.grace is None or isinstance(rule.grace, Seconds | PolicyField)
        for field in (rule.grace, rule.extension):
            if isinstance(field, PolicyField):
                assert field.name in FailurePolicy.__dataclass_fields__
        assert rule.match.__doc__, f"{rule.name}: the matcher's docstring is the wording it matches"
    assert RULES[-1].name == "unrecognised"
    assert names[:3] == ["gone_after_disruption", "gone_after_node_lost", "pod_gone"]
    assert names.index("succeeded") < names.index("disruption_target") < names.index("exit_code")


def test_the_design_table_defaults() -> None:
    expected = {
        "invalid_image_name": (Outcome.FAIL, None),
        "image_never_pull": (Outcome.FAIL, None),
        "image_not_found": (Outcome.RETRY, 90.0),
        "image_unauthorized": (Outcome.RETRY, 120.0),
        "image_rate_limited": (Outcome.RETRY, 900.0),
        "image_registry_unavailable": (Outcome.RETRY, 900.0),
        "image_pull_backoff": (Outcome.RETRY, 300.0),
        "missing_secret": (Outcome.RETRY, 60.0),
        "container_error": (Outcome.RETRY, 180.0),
        "volume_mount_failed": (Outcome.RETRY, 300.0),
        "unschedulable": (Outcome.RETRY, 600.0),
        "starting": (Outcome.RETRY, 900.0),
        "phase_unknown": (Outcome.RELAUNCH, 300.0),
        "disruption_target": (Outcome.RELAUNCH, None),
        "oom_killed": (Outcome.RETRY, None),
        "exit_code": (Outcome.RETRY, None),
        "deadline_exceeded": (Outcome.RETRY, None),
        "running": (Outcome.WAIT, 600.0),
        "admission_rejected": (Outcome.RELAUNCH, None),
        "image_wrong_platform": (Outcome.FAIL, None),
        "image_short_name": (Outcome.FAIL, None),
        "image_tls_error": (Outcome.RETRY, 120.0),
    }
    for name, (outcome, grace) in expected.items():
        rule = rule_named(name)
        assert (rule.outcome, rule_grace(rule, DEFAULT_POLICY)) == (outcome, grace), name


def test_unknown_rule_name_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="image_not_found"):
        rule_named("nope")


def test_a_vanished_pod_is_an_external_deletion() -> None:
    verdict = classify(None, now=T0)
    assert (verdict.outcome, verdict.reason, verdict.rule) == (
        Outcome.RETRY,
        Reason.DELETED_EXTERNALLY,
        "pod_gone",
    )
    assert "deleted outside this task" in verdict.message


def test_a_pod_that_vanishes_after_a_disruption_is_relaunched_not_blamed_on_a_person() -> None:
    preempted = {
        "metadata": {"name": "p", "deletionTimestamp": "2026-03-14T09:41:00Z"},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}],
        },
    }
    seen = classify(preempted, now=T0)
    assert seen.outcome is Outcome.RELAUNCH
    gone = classify(None, history=seen.history, now=T0 + 1)
    assert (gone.outcome, gone.reason, gone.rule) == (
        Outcome.RELAUNCH,
        Reason.NODE_DISRUPTION,
        "gone_after_disruption",
    )
    assert classify(None, history=seen.history, now=T0 + 1, relaunches=3).outcome is Outcome.RETRY


def _event(reason: str, message: str, component: str) -> dict[str, object]:
    return {
        "involvedObject": {"kind": "Pod", "name": "p"},
        "reason": reason,
        "message": message,
        "type": "Warning" if reason == "Evicted" else "Normal",
        "count": 1,
        "lastTimestamp": "2026-03-14T09:40:00Z",
        "source": {"component": component},
    }


@pytest.mark.parametrize(
    "event",
    [
        _event("Preempted", "Preempted by pod 5b1e4d0a-1 on node worker-3", "default-scheduler"),
        _event("Evicted", "The node was low on resource: memory. Threshold quantity: 100Mi.", "kubelet"),
    ],
    ids=["preempted", "evicted"],
)
def test_a_pod_first_seen_gone_is_relaunched_when_its_events_say_the_cluster_took_it(
    event: dict[str, object],
) -> None:
    # Nobody observed the pod disrupted (it vanished during a triggerer hand-over): the Event did.
    gone = classify(None, [event], now=T0)
    assert (gone.outcome, gone.reason, gone.rule) == (
        Outcome.RELAUNCH,
        Reason.NODE_DISRUPTION,
        "gone_after_disruption",
    )
    assert event["reason"] in gone.message
    assert classify(None, [event], now=T0, relaunches=3).outcome is Outcome.RETRY


def test_a_pod_first_seen_gone_after_its_node_was_not_ready_is_relaunched() -> None:
    event = _event("NodeNotReady", "Node is not ready", "node-controller")
    gone = classify(None, [event], now=T0)
    assert (gone.outcome, gone.reason, gone.rule) == (
        Outcome.RELAUNCH,
        Reason.NODE_LOST,
        "gone_after_node_lost",
    )


def test_a_pod_first_seen_gone_with_ordinary_events_is_an_external_deletion() -> None:
    killing = _event("Killing", "Stopping container base", "kubelet")
    assert classify(None, [killing], now=T0).rule == "pod_gone"


def test_a_pod_that_vanishes_while_its_node_is_unknown_is_relaunched() -> None:
    lost = {"metadata": {"name": "p"}, "status": {"phase": "Unknown"}}
    waiting = classify(lost, now=T0)
    assert (waiting.outcome, waiting.reason) == (Outcome.WAIT, Reason.NODE_LOST)
    gone = classify(None, history=waiting.history, now=T0 + 60)
    assert (gone.outcome, gone.reason, gone.rule) == (
        Outcome.RELAUNCH,
        Reason.NODE_LOST,
        "gone_after_node_lost",
    )


def test_a_pod_deleted_by_a_person_is_still_an_external_deletion() -> None:
    running = {
        "metadata": {"name": "p", "deletionTimestamp": "2026-03-14T09:41:00Z"},
        "status": {"phase": "Running"},
    }
    seen = classify(running, now=T0)
    assert seen.reason is Reason.DELETED_EXTERNALLY
    assert classify(None, history=seen.history, now=T0 + 1).rule == "pod_gone"


def test_an_unrecognised_state_waits_at_most_the_startup_timeout() -> None:
    odd = {"metadata": {"name": "p"}, "status": {"phase": "Terminating"}}
    first = classify(odd, now=T0)
    assert (first.outcome, first.reason, first.deadline) == (Outcome.WAIT, Reason.UNKNOWN, T0 + 900)
    final = classify(odd, history=first.history, now=T0 + 900)
    assert (final.outcome, final.reason) == (Outcome.RETRY, Reason.UNKNOWN)


def test_init_containers_are_read_before_main_containers() -> None:
    pod = {
        "metadata": {"name": "p"},
        "spec": {"initContainers": [{"name": "init"}], "containers": [{"name": "base"}]},
        "status": {
            "phase": "Pending",
            "containerStatuses": [{"name": "base", "state": {"waiting": {"reason": "RunContainerError"}}}],
            "initContainerStatuses": [
                {"name": "init", "state": {"waiting": {"reason": "CreateContainerError"}}}
            ],
        },
    }
    verdict = classify(pod, now=T0)
    assert verdict.rule == "container_error"
    assert "init container 'init'" in verdict.message


def test_history_passed_as_events_is_a_type_error() -> None:
    first = classify(None, now=T0)
    with pytest.raises(TypeError, match="history="):
        classify(None, first.history, now=T0)  # type: ignore[arg-type]


@pytest.mark.parametrize("now", [float("nan"), float("inf"), "1700000000", True])
def test_now_must_be_finite_epoch_seconds(now: object) -> None:
    with pytest.raises(ValueError, match="finite epoch seconds"):
        classify(None, now=now)  # type: ignore[arg-type]


KUBELET_WAITING_REASONS = {
    "ErrImagePull": "image_pull_backoff",
    "ImagePullBackOff": "image_pull_backoff",
    "RegistryUnavailable": "image_pull_backoff",
    "InvalidImageName": "invalid_image_name",
    "ErrImageNeverPull": "image_never_pull",
    "ImageInspectError": "container_error",
    "SignatureValidationFailed": "image_policy_refused",
    "CreateContainerConfigError": "config_error",
    "CreateContainerError": "container_error",
    "PreCreateHookError": "container_error",
    "PreStartHookError": "container_error",
    "PostStartHookError": "container_error",
    "RunContainerError": "container_error",
    "KillContainerError": "container_error",
    "VerifyNonRootError": "container_error",
    "CreatePodSandboxError": "container_error",
    "CrashLoopBackOff": "crash_loop",
    "ContainerCreating": "starting",
    "PodInitializing": "starting",
}


@pytest.mark.parametrize(("waiting", "rule"), sorted(KUBELET_WAITING_REASONS.items()))
def test_every_kubelet_waiting_reason_has_a_rule(waiting: str, rule: str) -> None:
    pod = {
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "base"}], "restartPolicy": "OnFailure"},
        "status": {
            "phase": "Pending",
            "containerStatuses": [{"name": "base", "state": {"waiting": {"reason": waiting, "message": ""}}}],
        },
    }
    verdict = classify(pod, now=T0)
    assert verdict.rule == rule
    assert verdict.outcome is (
        Outcome.FAIL
        if rule in ("invalid_image_name", "image_never_pull", "image_policy_refused")
        else Outcome.WAIT
    )


def test_a_native_sidecar_killed_at_pod_exit_does_not_hide_the_main_failure() -> None:
    pod = {
        "metadata": {"name": "p"},
        "spec": {
            "restartPolicy": "Never",
            "initContainers": [{"name": "proxy", "restartPolicy": "Always"}],
            "containers": [{"name": "base"}],
        },
        "status": {
            "phase": "Failed",
            "initContainerStatuses": [
                {"name": "proxy", "state": {"terminated": {"exitCode": 137, "reason": "Error"}}}
            ],
            "containerStatuses": [
                {"name": "base", "state": {"terminated": {"exitCode": 2, "reason": "Error"}}}
            ],
        },
    }
    verdict = classify(pod, now=T0)
    assert (verdict.reason, verdict.evidence[0].container) == (Reason.CONTAINER_EXIT_CODE, "base")
    assert "exit code 2" in verdict.message


REJECTED = {
    "metadata": {"name": "p"},
    "status": {
        "phase": "Failed",
        "reason": "TaintToleration",
        "message": "Pod was rejected: Predicate TaintToleration failed",
    },
}


def test_an_admission_rejection_then_a_vanished_pod_is_still_a_disruption() -> None:
    seen = classify(REJECTED, now=T0)
    assert (seen.outcome, seen.rule) == (Outcome.RELAUNCH, "admission_rejected")
    assert seen.history.since(keys.NODE_DISRUPTION) == T0  # the key the gone rule reads
    gone = classify(None, history=seen.history, now=T0 + 1)
    assert (gone.rule, gone.history.since(keys.gone_after(Reason.NODE_DISRUPTION))) == (
        "gone_after_disruption",
        T0 + 1,
    )


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("NodeAffinity", "Pod was rejected: Predicate NodeAffinity failed"),
        ("PodFitsHostPorts", "Pod Predicate PodFitsHostPorts failed"),
        ("InterPodAffinity", "Pod was rejected: Predicate InterPodAffinity failed"),
        ("OutOfnvidia.com/gpu", "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu"),
        ("OutOfpods", "Pod Node didn't have enough resource: pods, requested: 1, used: 110, capacity: 110"),
        ("", "Pod was rejected: Predicate SomeFuturePredicate failed"),
        ("TopologyAffinityError", "Pod was rejected: Resources cannot be allocated with Topology locality"),
    ],
)
def test_any_admission_predicate_in_either_wording_is_relaunched(reason: str, message: str) -> None:
    pod = {"metadata": {"name": "p"}, "status": {"phase": "Failed", "reason": reason, "message": message}}
    verdict = classify(pod, now=T0)
    assert (verdict.outcome, verdict.reason, verdict.rule) == (
        Outcome.RELAUNCH,
        Reason.NODE_DISRUPTION,
        "admission_rejected",
    )
    assert "none of the task's code ran" in verdict.message


def test_a_failed_pod_that_mentions_rejection_elsewhere_is_not_an_admission() -> None:
    pod = {
        "metadata": {"name": "p"},
        "status": {"phase": "Failed", "message": "the job said: Pod was rejected: x"},
    }
    assert classify(pod, now=T0).rule == "pod_failed"


def test_trace_lists_every_rule_up_to_the_match_in_table_order() -> None:
    checks = trace(REJECTED, now=T0)
    names = [c.rule.name for c in checks]
    assert names == [r.name for r in RULES][: len(names)]
    assert names[-1] == "admission_rejected"
    assert [c.matched for c in checks] == [False] * (len(checks) - 1) + [True]
    assert checks[-1].rule.name == classify(REJECTED, now=T0).rule


def test_the_matchers_are_defined_in_table_order() -> None:
    from pathlib import Path

    from airflow_k8s_retry.classification import matchers, waiting

    # The table's matchers are in matchers.py, then waiting.py: read as one file, in that order.
    source = [
        line for module in (matchers, waiting) for line in Path(module.__file__).read_text().splitlines()
    ]
    names = {
        id(v): k
        for module in (waiting, matchers)
        for k, v in vars(module).items()
        if callable(v) and not k.startswith("_")
    }
    lines = []
    for rule in RULES:
        name = names[id(rule.match)]
        lines.append(next(i for i, line in enumerate(source) if re.match(rf"^(def )?{name}\b", line)))
    assert lines == sorted(lines), [r.name for r in RULES]


def test_trace_with_a_remembered_cause_ends_at_the_rule_classify_picks() -> None:
    def pulling(reason: str, message: str) -> dict[str, object]:
        waiting = {"waiting": {"reason": reason, "message": message}}
        return {
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "base", "image": "acme/etl:1"}]},
            "status": {"phase": "Pending", "containerStatuses": [{"name": "base", "state": waiting}]},
        }

    first = classify(pulling("ErrImagePull", "manifest unknown"), now=T0)
    decayed = pulling("ImagePullBackOff", 'Back-off pulling image "acme/etl:1"')
    verdict = classify(decayed, history=first.history, now=T0 + 10)
    assert verdict.rule == "image_not_found"
    assert trace(decayed, (), first.history, now=T0 + 10)[-1].rule.name == verdict.rule
    assert trace(decayed, now=T0 + 10)[-1].rule.name == "image_pull_backoff"  # without the memory
