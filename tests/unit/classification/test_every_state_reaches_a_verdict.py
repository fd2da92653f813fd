"""Properties: for any pod, one verdict, no exception, a finite deadline, and no endless wait."""

from __future__ import annotations

import math
import os
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from airflow_k8s_retry.classification import (
    FailurePolicy,
    History,
    Outcome,
    Reason,
    Verdict,
    classify,
)
from airflow_k8s_retry.classification.policy import OVERRIDE_OUTCOMES
from airflow_k8s_retry.classification.rules import graceable_reasons, overridable_reasons, rule_named
from tests.support.pod_strategies import JSON, events, garbage_pods, pods

T0 = 1_773_480_000.0
times = st.floats(min_value=0, max_value=4_000_000_000, allow_nan=False)
# HYPOTHESIS_EXAMPLES=5000 searches longer (about four minutes); the default keeps the suite fast.
EXAMPLES = int(os.environ.get("HYPOTHESIS_EXAMPLES", "300"))
PROPERTY = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def policies(draw: st.DrawFn) -> FailurePolicy:
    graceable = sorted(graceable_reasons())
    overridable = sorted(overridable_reasons())
    fail = draw(st.lists(st.integers(1, 255), max_size=3, unique=True))
    skip = draw(st.lists(st.integers(1, 255).filter(lambda c: c not in fail), max_size=3, unique=True))
    seconds = st.floats(min_value=0, max_value=7200, allow_nan=False)
    return FailurePolicy(
        grace=draw(st.dictionaries(st.sampled_from(graceable), seconds, max_size=4)),
        outcomes=draw(
            st.dictionaries(
                st.sampled_from(overridable), st.sampled_from(sorted(OVERRIDE_OUTCOMES)), max_size=4
            )
        ),
        fail_on_exit_codes=fail,
        skip_on_exit_codes=skip,
        relaunch_budget=draw(st.integers(0, 5)),
        startup_timeout=draw(st.floats(min_value=1, max_value=7200)),
        schedule_timeout=draw(st.floats(min_value=1, max_value=7200)),
        running_recheck=draw(st.floats(min_value=1, max_value=7200)),
        scale_up_timeout=draw(st.floats(min_value=1, max_value=7200)),
    )


def check_shape(verdict: Verdict, now: float) -> None:
    assert isinstance(verdict, Verdict)
    assert isinstance(verdict.outcome, Outcome)
    assert isinstance(verdict.reason, Reason)
    assert verdict.message.strip()
    if verdict.outcome is Outcome.WAIT:
        assert verdict.deadline is not None
        assert math.isfinite(verdict.deadline)
        assert verdict.deadline > now
    else:
        assert verdict.deadline is None


@PROPERTY
@given(
    pod=pods(), evs=events(), now=times, policy=st.one_of(st.none(), policies()), relaunches=st.integers(0, 6)
)
def test_any_pod_gets_exactly_one_well_formed_verdict(
    pod: dict[str, Any], evs: list[dict[str, Any]], now: float, policy: FailurePolicy | None, relaunches: int
) -> None:
    verdict = classify(pod, evs, now=now, policy=policy, relaunches=relaunches)
    check_shape(verdict, now)
    budget = (policy or FailurePolicy()).relaunch_budget
    if verdict.outcome is Outcome.RELAUNCH:
        assert relaunches < budget
    # Same input, same verdict: the function is pure.
    assert classify(pod, evs, now=now, policy=policy, relaunches=relaunches) == verdict


@PROPERTY
@given(pod=garbage_pods(), evs=st.one_of(JSON, st.lists(JSON, max_size=3)), now=times)
def test_malformed_input_never_raises(pod: Any, evs: Any, now: float) -> None:
    check_shape(classify(pod, evs, now=now), now)


@PROPERTY
@given(pod=pods(), evs=events(), policy=st.one_of(st.none(), policies()), relaunches=st.integers(0, 4))
def test_a_stuck_state_reaches_a_final_verdict_by_its_deadline(
    pod: dict[str, Any], evs: list[dict[str, Any]], policy: FailurePolicy | None, relaunches: int
) -> None:
    first = classify(pod, evs, now=T0, policy=policy, relaunches=relaunches)
    event(f"{first.outcome.value} by {first.rule}")
    if first.outcome is not Outcome.WAIT or rule_named(first.rule).outcome is Outcome.WAIT:
        return  # final already, or a re-check rule (running, a refused resize, a running pod's lag)
    assert first.deadline is not None
    # Nothing changes but the time: still waiting just before the deadline, final at it.
    before = first.deadline - min(1.0, (first.deadline - T0) / 2)
    middle = classify(pod, evs, first.history, now=before, policy=policy, relaunches=relaunches)
    assert middle.outcome is Outcome.WAIT
    assert middle.deadline == first.deadline
    # Restart-safe: the history survives its payload form.
    carried = History.from_payload(middle.history.to_payload())
    final = classify(pod, evs, carried, now=first.deadline, policy=policy, relaunches=relaunches)
    assert final.outcome is not Outcome.WAIT, final.message
    assert final.rule == first.rule


@PROPERTY
@given(pod=pods(), evs=events(), now=times, relaunches=st.integers(0, 4))
def test_verdict_payload_round_trips(
    pod: dict[str, Any], evs: list[dict[str, Any]], now: float, relaunches: int
) -> None:
    verdict = classify(pod, evs, now=now, relaunches=relaunches)
    assert Verdict.from_payload(verdict.to_payload()) == verdict


@PROPERTY
@given(policy=policies())
def test_policy_payload_round_trips(policy: FailurePolicy) -> None:
    assert FailurePolicy.from_payload(policy.to_payload()) == policy


SPECIFIC_PULL_MESSAGES = [
    "rpc error: code = Unknown desc = 429 Too Many Requests - Server message: toomanyrequests: limit",
    'failed to resolve reference "ghcr.io/acme/etl:1": ghcr.io/acme/etl:1: not found',
    "pull access denied, repository does not exist or may require authorization",
    "unauthorized: authentication required",
    "dial tcp 10.0.0.1:443: i/o timeout",
]


def pulling(message: str, reason: str = "ErrImagePull") -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "uid": "u"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "base", "image": "acme/etl:1"}]},
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "base",
                    "image": "acme/etl:1",
                    "state": {"waiting": {"reason": reason, "message": message}},
                }
            ],
        },
    }


@PROPERTY
@given(
    message=st.sampled_from(SPECIFIC_PULL_MESSAGES),
    steps=st.lists(st.floats(min_value=0.01, max_value=0.99), min_size=1, max_size=6),
    restart=st.booleans(),
)
def test_a_decaying_pull_message_keeps_its_cause_and_ends_by_the_first_deadline(
    message: str, steps: list[float], restart: bool
) -> None:
    first = classify(pulling(message), now=T0)
    assert first.outcome is Outcome.WAIT
    assert first.deadline is not None
    history = first.history
    generic = pulling('Back-off pulling image "acme/etl:1"', "ImagePullBackOff")
    for fraction in sorted(steps):
        now = T0 + fraction * (first.deadline - T0)
        later = classify(generic, now=now, history=history)
        assert (later.outcome, later.reason, later.deadline) == (Outcome.WAIT, first.reason, first.deadline)
        history = History.from_payload(later.history.to_payload()) if restart else later.history
    final = classify(generic, now=first.deadline, history=history)
    assert final.outcome is Outcome.RETRY
    assert final.reason is first.reason
