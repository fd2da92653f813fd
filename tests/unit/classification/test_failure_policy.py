"""FailurePolicy: DAG authors' overrides work, and bad values fail at parse time with a clear message."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pytest

from airflow_k8s_retry.classification import (
    FailurePolicy,
    Outcome,
    PolicyError,
    Reason,
    classify,
    classify_seen_for,
)

T0 = 1_773_480_000.0


def pull_pod(message: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "uid": "u"},
        "spec": {"containers": [{"name": "base", "image": "acme/etl:1"}]},
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {"name": "base", "state": {"waiting": {"reason": "ErrImagePull", "message": message}}}
            ],
        },
    }


def failed_pod(code: int, reason: str = "Error") -> dict[str, Any]:
    return {
        "metadata": {"name": "p"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "base"}]},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {"name": "base", "state": {"terminated": {"exitCode": code, "reason": reason}}}
            ],
        },
    }


def evicted_pod() -> dict[str, Any]:
    return {
        "metadata": {"name": "p"},
        "status": {"phase": "Failed", "reason": "Evicted", "message": "low on memory"},
    }


def test_the_documented_example_builds() -> None:
    policy = FailurePolicy(
        grace={"image.not_found": 5},
        outcomes={"image.unauthorized": "fail"},
        fail_on_exit_codes=[3],
        skip_on_exit_codes=[100],
        relaunch_budget=3,
        startup_timeout=900,
        schedule_timeout=600,
    )
    assert policy.grace_for(Reason.IMAGE_NOT_FOUND) == 5.0
    assert policy.outcome_for(Reason.IMAGE_UNAUTHORIZED) is Outcome.FAIL
    assert policy.fail_on_exit_codes == (3,)
    assert policy.skip_on_exit_codes == (100,)


def test_grace_override_shortens_the_wait() -> None:
    policy = FailurePolicy(grace={Reason.IMAGE_NOT_FOUND: 5})
    verdict = classify(pull_pod("manifest unknown"), now=T0, policy=policy)
    assert (verdict.outcome, verdict.deadline) == (Outcome.WAIT, T0 + 5)
    assert (
        classify(pull_pod("manifest unknown"), now=T0 + 5, policy=policy, history=verdict.history).outcome
        is Outcome.RETRY
    )


def test_zero_grace_acts_at_once() -> None:
    verdict = classify(
        pull_pod("manifest unknown"), now=T0, policy=FailurePolicy(grace={"image.not_found": 0})
    )
    assert (verdict.outcome, verdict.reason) == (Outcome.RETRY, Reason.IMAGE_NOT_FOUND)


def test_outcome_override_applies_after_the_grace() -> None:
    policy = FailurePolicy(outcomes={"image.unauthorized": "fail"})
    message = "unauthorized: authentication required"
    assert classify_seen_for(pull_pod(message), elapsed=119, now=T0, policy=policy).outcome is Outcome.WAIT
    verdict = classify_seen_for(pull_pod(message), elapsed=120, now=T0, policy=policy)
    assert (verdict.outcome, verdict.reason) == (Outcome.FAIL, Reason.IMAGE_UNAUTHORIZED)


def test_exit_code_lists() -> None:
    policy = FailurePolicy(fail_on_exit_codes=[3], skip_on_exit_codes=100)
    assert classify(failed_pod(3), now=T0, policy=policy).outcome is Outcome.FAIL
    assert classify(failed_pod(100), now=T0, policy=policy).outcome is Outcome.SKIP
    assert classify(failed_pod(4), now=T0, policy=policy).outcome is Outcome.RETRY
    # An OOM kill is not an exit-code failure, even when 137 is listed.
    oom = classify(failed_pod(137, "OOMKilled"), now=T0, policy=FailurePolicy(fail_on_exit_codes=[137]))
    assert (oom.outcome, oom.reason) == (Outcome.RETRY, Reason.CONTAINER_OOM)


def test_exit_137_is_oom_only_when_the_reason_says_so() -> None:
    assert classify(failed_pod(137, "OOMKilled"), now=T0).reason is Reason.CONTAINER_OOM
    plain = classify(failed_pod(137, "Error"), now=T0)
    assert (plain.outcome, plain.reason) == (Outcome.RETRY, Reason.CONTAINER_EXIT_CODE)
    assert "not an out-of-memory kill" in plain.message


def test_relaunch_budget() -> None:
    assert classify(evicted_pod(), now=T0, relaunches=2).outcome is Outcome.RELAUNCH
    spent = classify(evicted_pod(), now=T0, relaunches=3)
    assert (spent.outcome, spent.reason) == (Outcome.RETRY, Reason.NODE_DISRUPTION)
    assert "relaunch budget is spent" in spent.message
    assert classify(evicted_pod(), now=T0, policy=FailurePolicy(relaunch_budget=0)).outcome is Outcome.RETRY


def test_timeouts_come_from_the_policy() -> None:
    pending = {"metadata": {"name": "p"}, "status": {"phase": "Pending"}}
    assert classify(pending, now=T0, policy=FailurePolicy(startup_timeout=42)).deadline == T0 + 42
    unschedulable = {
        "metadata": {"name": "p"},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]},
    }
    assert classify(unschedulable, now=T0, policy=FailurePolicy(schedule_timeout=7)).deadline == T0 + 7


def test_policy_survives_dataclasses_replace_and_payload_round_trip() -> None:
    policy = FailurePolicy(
        grace={"container.create_error": 30}, outcomes={"node.disruption": "retry"}, fail_on_exit_codes=[2, 1]
    )
    replaced = dataclasses.replace(policy, skip_on_exit_codes=[9], startup_timeout=60)
    payload = replaced.to_payload()
    assert json.loads(json.dumps(payload)) == payload
    assert payload["fail_on_exit_codes"] == [1, 2]
    assert payload["grace"] == {"container.create_error": 30.0}
    assert payload["outcomes"] == {"node.disruption": "retry"}
    assert FailurePolicy.from_payload(payload) == replaced
    assert FailurePolicy.from_payload(None) == FailurePolicy()


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"grace": {"image.notfound": 5}}, ["FailurePolicy.grace", "image.notfound", "image.not_found"]),
        ({"grace": {"pod.running": 5}}, ["FailurePolicy.grace", "pod.running", "cannot be set here"]),
        ({"grace": {"image.invalid_name": 5}}, ["FailurePolicy.grace", "image.invalid_name"]),
        ({"grace": {"image.not_found": -1}}, ["grace['image.not_found']", ">= 0"]),
        ({"grace": {"image.not_found": math.inf}}, ["grace['image.not_found']", "finite"]),
        ({"grace": {"image.not_found": math.nan}}, ["finite"]),
        ({"grace": {"image.not_found": "90"}}, ["finite number"]),
        ({"grace": [("image.not_found", 5)]}, ["FailurePolicy.grace must map"]),
        (
            {"outcomes": {"image.unauthorized": "explode"}},
            ["unknown outcome 'explode'", "fail, relaunch, retry, skip"],
        ),
        ({"outcomes": {"image.unauthorized": "wait"}}, ["'wait' is not allowed", "grace instead"]),
        ({"outcomes": {"container.oom": "succeed"}}, ["'succeed' is not allowed", "skip"]),
        ({"outcomes": {"pod.succeeded": "fail"}}, ["FailurePolicy.outcomes", "pod.succeeded"]),
        ({"outcomes": {42: "fail"}}, ["unknown reason code 42"]),
        ({"fail_on_exit_codes": [256]}, ["fail_on_exit_codes", "256", "1 to 255"]),
        ({"fail_on_exit_codes": [-1]}, ["fail_on_exit_codes", "-1"]),
        ({"fail_on_exit_codes": [0]}, ["fail_on_exit_codes", "0 means success"]),
        ({"skip_on_exit_codes": [256]}, ["skip_on_exit_codes", "0 to 255"]),
        ({"skip_on_exit_codes": [True]}, ["skip_on_exit_codes"]),
        ({"skip_on_exit_codes": "3"}, ["skip_on_exit_codes must be a list"]),
        (
            {"fail_on_exit_codes": [3, 4], "skip_on_exit_codes": [4]},
            ["[4]", "both fail_on_exit_codes and skip_on_exit_codes"],
        ),
        ({"relaunch_budget": -1}, ["relaunch_budget", ">= 0"]),
        ({"relaunch_budget": 1.5}, ["relaunch_budget"]),
        ({"startup_timeout": 0}, ["startup_timeout", "> 0"]),
        ({"schedule_timeout": -5}, ["schedule_timeout"]),
        ({"running_recheck": math.inf}, ["running_recheck", "finite"]),
        ({"grace": {"image.not_found": 1e12}}, ["grace['image.not_found']", "at most 30 days"]),
        ({"startup_timeout": 1e15}, ["startup_timeout", "at most 30 days"]),
    ],
)
def test_bad_values_name_the_field_and_the_fix(kwargs: dict[str, Any], names: list[str]) -> None:
    with pytest.raises(PolicyError) as caught:
        FailurePolicy(**kwargs)
    assert isinstance(caught.value, ValueError)
    for name in names:
        assert name in str(caught.value)


def test_payload_with_unknown_fields_is_rejected() -> None:
    with pytest.raises(PolicyError, match=r"unknown field\(s\) \['grace_period'\]"):
        FailurePolicy.from_payload({"grace_period": 3})
    with pytest.raises(PolicyError, match="must be a mapping"):
        FailurePolicy.from_payload([1, 2])  # type: ignore[arg-type]


def test_relaunch_message_counts_the_budget() -> None:
    verdict = classify(evicted_pod(), now=T0, relaunches=1)
    assert "a fresh pod will be started in the same try (relaunch 2 of 3)" in verdict.message
    assert "fresh pod" not in classify(evicted_pod(), now=T0, relaunches=3).message
