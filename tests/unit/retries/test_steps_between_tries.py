"""The table behind ``PodFailureRetryPolicy``: which step follows which cause, and how long it waits.

Pure: no Airflow, no clock but the one passed in.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_k8s_retry.classification.model import Evidence, History, Outcome, Reason, Verdict
from airflow_k8s_retry.classification.retries import (
    DEFAULT_STEPS,
    RETRY_AFTER_TASK_DELAY,
    Delay,
    RetryPolicyError,
    RetryStep,
    RetrySteps,
    first_seen,
)


def verdict(reason: Reason, *, seen_at: float = 0.0, history: History | None = None) -> Verdict:
    evidence = (Evidence(reason, "status", "seen", "base", seen_at),) if seen_at else ()
    return Verdict(Outcome.RETRY, reason, "m", "rule", evidence=evidence, history=history or History())


def test_a_fixed_delay_is_the_same_after_every_try() -> None:
    delay = Delay.fixed(timedelta(minutes=2))
    assert [delay.seconds_for(try_number=n) for n in (1, 2, 5)] == [120.0, 120.0, 120.0]


def test_an_exponential_delay_doubles_per_try_up_to_its_cap() -> None:
    delay = Delay.exponential(60, cap=timedelta(minutes=5))
    assert [delay.seconds_for(try_number=n) for n in (1, 2, 3, 4, 50, 5000)] == [60, 120, 240, 300, 300, 300]
    assert Delay.exponential(10, factor=3).seconds_for(try_number=3) == 90


def test_an_uncapped_exponential_delay_stops_at_a_year_instead_of_overflowing() -> None:
    assert Delay.exponential(1).seconds_for(try_number=100_000) == 365 * 86400.0


def test_a_delay_after_grace_counts_from_when_the_cause_was_first_seen() -> None:
    delay = Delay.after_grace(timedelta(minutes=20))
    assert (
        delay.seconds_for(try_number=1, verdict=verdict(Reason.IMAGE_RATE_LIMITED, seen_at=1000), now=1900)
        == 300
    )
    # The grace already outlasted the delay: the next try may start at once.
    assert (
        delay.seconds_for(try_number=1, verdict=verdict(Reason.IMAGE_RATE_LIMITED, seen_at=1000), now=3000)
        == 0
    )
    # Unknown start: the whole delay.
    assert delay.seconds_for(try_number=1, verdict=verdict(Reason.IMAGE_RATE_LIMITED), now=3000) == 1200


def test_first_seen_reads_the_evidence_and_the_history_of_the_verdicts_own_cause() -> None:
    history = History(first_seen={"image.rate_limited:base": 800.0, "pod.starting": 10.0})
    assert first_seen(verdict(Reason.IMAGE_RATE_LIMITED, seen_at=900, history=history)) == 800.0
    assert first_seen(verdict(Reason.CONTAINER_OOM)) is None


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: Delay("linear", 1),
            "Delay kind must be 'fixed', 'exponential' or 'after_grace', got 'linear'",
        ),
        (lambda: Delay("fixed", -1), "Delay.seconds must be >= 0 seconds, got -1"),
        (lambda: Delay("exponential", 1, 0.5), "Delay.factor must be >= 1, got 0.5"),
        (lambda: Delay("fixed", float("nan")), "Delay.seconds must be a finite number, got nan"),
        (lambda: RetryStep("later"), "RetryStep action must be 'retry', 'fail' or 'default', got 'later'"),
        (lambda: RetryStep("fail", Delay.fixed(1)), "a delay goes only with action 'retry', not 'fail'"),
        (lambda: RetrySteps.of({"container.om": "fail"}), "unknown reason code or family 'container.om'"),
        (lambda: RetrySteps.of({"container.oom": "sometimes"}), "'sometimes' is not a step"),
        (lambda: RetrySteps.of({"container.oom": True}), "True is not a step"),
        (lambda: RetrySteps.of(["container.oom"]), "maps reason codes or families to steps"),  # type: ignore[arg-type]
    ],
)
def test_bad_input_is_refused_with_one_line_naming_what_is_wrong(make: object, message: str) -> None:
    with pytest.raises(RetryPolicyError) as raised:
        make()  # type: ignore[operator]
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_rule_is_a_delay_a_number_a_timedelta_or_an_action() -> None:
    steps = RetrySteps.of(
        {
            "container.oom": "fail",
            "image": timedelta(seconds=30),
            Reason.CONTAINER_EXIT_CODE: 5,
            "pod.deleted_externally": Delay.exponential(10),
            "api.conflict": "default",
            "config": RetryStep("retry"),
        }
    )
    assert steps.step_for("container.oom") == RetryStep("fail")
    assert steps.step_for("image.not_found") == RetryStep("retry", Delay.fixed(30))
    assert steps.step_for("container.exit_code") == RetryStep("retry", Delay.fixed(5))
    assert steps.step_for("pod.deleted_externally") == RetryStep("retry", Delay.exponential(10))
    assert steps.step_for("api.conflict") == RetryStep("default")
    assert steps.step_for("config.missing_secret") == RETRY_AFTER_TASK_DELAY


def test_the_authors_rule_beats_a_default_even_when_the_default_names_the_code_and_the_rule_the_family() -> (
    None
):
    assert "image.rate_limited" in DEFAULT_STEPS
    steps = RetrySteps.of({"image": Delay.fixed(6)})
    assert steps.step_for("image.rate_limited") == RetryStep("retry", Delay.fixed(6))
    # Within one table the code's rule beats its family's.
    steps = RetrySteps.of({"image": Delay.fixed(6), "image.rate_limited": "fail"})
    assert steps.step_for("image.rate_limited") == RetryStep("fail")
    assert steps.step_for("image.not_found") == RetryStep("retry", Delay.fixed(6))


def test_the_defaults_wait_longer_for_causes_that_pass_slowly_and_not_at_all_for_a_lost_pod() -> None:
    steps = RetrySteps()
    after = {r: steps.step_for(r).delay for r in ("image.rate_limited", "node.lost", "node.disruption")}
    rate_limit = after["image.rate_limited"]
    assert rate_limit is not None
    assert [rate_limit.seconds_for(try_number=n) for n in (1, 2, 3, 4)] == [600, 1200, 2400, 3600]
    assert after["node.lost"] == after["node.disruption"] == Delay.fixed(0)
    # A cause a retry cannot shorten keeps the task's own retry_delay.
    assert steps.step_for("container.oom") == steps.step_for("container.exit_code") == RETRY_AFTER_TASK_DELAY
    assert RetrySteps(defaults=False).step_for("image.rate_limited") == RETRY_AFTER_TASK_DELAY


def test_the_table_round_trips_through_its_payload() -> None:
    steps = RetrySteps.of(
        {"container.oom": "fail", "image": Delay.exponential(30, factor=3, cap=600)}, defaults=False
    )
    payload = steps.to_payload()
    assert payload == {
        "rules": {
            "container.oom": {"action": "fail"},
            "image": {
                "action": "retry",
                "delay": {"kind": "exponential", "seconds": 30, "factor": 3, "cap": 600},
            },
        },
        "defaults": False,
    }
    assert RetrySteps.from_payload(payload) == steps


def test_describe_lists_every_step_and_the_catch_all_last() -> None:
    rows = RetrySteps.of({"container.oom": "fail"}).describe()
    assert ("container.oom", "fail") in rows
    assert ("image.rate_limited", "retry after 10 min x2 per try, at most 1 h") in rows
    assert ("node", "retry after 0 s") in rows
    assert rows[-1] == ("any other cause", "retry after the task's retry_delay")
