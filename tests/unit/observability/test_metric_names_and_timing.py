"""Metric names follow Airflow's rules and are all documented; timers and gauges compute what
docs/metrics.md says, from the classifier's own verdicts and the hub's own statistics."""

from __future__ import annotations

import re

import pytest

from airflow_k8s_retry import metrics
from airflow_k8s_retry.classification import FailurePolicy, Outcome, Reason, classify
from airflow_k8s_retry.kube.hub import FeedStats
from tests.support.paths import REPO

DOCS = (REPO / "docs" / "metrics.md").read_text()
#: Airflow's rule for a stat name (airflow.sdk._shared.observability.metrics.validators).
AIRFLOW_NAME = re.compile(r"^[A-Za-z0-9_.\-/]{1,250}$")


def pulling(message: str) -> dict[str, object]:
    return {
        "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "base", "image": "x"}]},
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {"name": "base", "state": {"waiting": {"reason": "ErrImagePull", "message": message}}}
            ],
        },
    }


def exited(code: int) -> dict[str, object]:
    return {
        "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "base", "image": "x"}]},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {"name": "base", "state": {"terminated": {"exitCode": code, "reason": "Error"}}}
            ],
        },
    }


@pytest.mark.parametrize("reason", list(Reason))
def test_every_reason_code_is_one_valid_level_of_a_name(reason: Reason) -> None:
    name = metrics.verdict_metric("retry", reason.value)
    assert AIRFLOW_NAME.match(name), name
    assert name.count(".") == 3  # k8s_retry . verdict . outcome . reason
    assert name.endswith(reason.value.replace(".", "__"))


def test_segments_outside_airflows_characters_are_replaced() -> None:
    assert metrics.metric_segment("a.b c/d:e") == "a__b_c_d_e"


def test_every_counter_of_the_default_rules_and_every_other_name_is_documented() -> None:
    names = [
        *metrics.default_verdict_metrics(),
        metrics.RELAUNCHES,
        metrics.DETECTION_LATENCY,
        metrics.GRACE_WAIT,
        metrics.FEEDS,
        metrics.SUBSCRIPTIONS,
        metrics.WATCH_RECONNECTS,
        metrics.POLLING_FEEDS,
    ]
    missing = [n for n in names if f"`{n}`" not in DOCS]
    assert not missing
    # And nothing documented that the code cannot send.
    documented = set(re.findall(r"`(k8s_retry\.verdict\.[a-z]+\.[a-z_]+)`", DOCS))
    assert documented == set(metrics.default_verdict_metrics())


def test_every_final_outcome_of_the_rule_table_has_a_counter() -> None:
    outcomes = {o for o, _ in metrics.default_verdict_metrics().values()}
    assert outcomes == {"succeed", "retry", "fail", "skip", "relaunch"}


def test_a_verdict_at_once_is_timed_from_the_first_sighting_of_its_signal() -> None:
    first = classify(exited(3), now=1000.0)
    assert first.outcome is Outcome.RETRY
    timing = metrics.verdict_timing(first, now=1000.25, policy=None)
    assert timing.detection_latency == pytest.approx(0.25)
    assert timing.grace_wait is None


def test_a_graced_verdict_is_timed_from_its_grace_running_out() -> None:
    policy = FailurePolicy(grace={"image.not_found": 30})
    message = 'failed to resolve reference "x:1": x:1: not found'
    waiting = classify(pulling(message), now=1000.0, policy=policy)
    assert waiting.outcome is Outcome.WAIT
    final = classify(pulling(message), history=waiting.history, now=1031.0, policy=policy)
    assert (final.outcome, final.reason) == (Outcome.RETRY, Reason.IMAGE_NOT_FOUND)
    timing = metrics.verdict_timing(final, now=1031.5, policy=policy)
    assert timing.grace_wait == pytest.approx(31.5)
    assert timing.detection_latency == pytest.approx(1.5)


def test_verdicts_without_a_rule_or_history_are_not_timed() -> None:
    stamped = classify(exited(3), now=1000.0)
    from dataclasses import replace

    from airflow_k8s_retry.classification import History

    assert metrics.verdict_timing(replace(stamped, history=History()), now=1001, policy=None) == (
        metrics.VerdictTiming(None, None)
    )
    assert metrics.verdict_timing(replace(stamped, rule="execution_timeout"), now=1001, policy=None) == (
        metrics.VerdictTiming(None, None)
    )


def test_feed_gauges_sum_the_hubs_feeds() -> None:
    feeds = [
        FeedStats("a", "sel", "pods", "watch", 3, {"watch": 4}),
        FeedStats("a", None, "events", "watch", 3, {"watch": 1}),
        FeedStats("b", "sel", "pods", "poll-list", 2, {"watch": 1}),
        FeedStats("b", None, "events", "watch", 2, {}),
    ]
    assert metrics.feed_gauges(feeds) == metrics.FeedGauges(
        feeds=4, subscriptions=5, watch_reconnects=3, polling_feeds=1
    )
    assert metrics.feed_gauges([]) == metrics.FeedGauges(0, 0, 0, 0)
