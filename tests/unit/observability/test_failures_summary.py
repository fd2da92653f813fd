"""What the failures page computes from verdict XComs: counts by reason per time bucket, the tasks
failing most, and one escaped row per try (pure; no Airflow)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from airflow_k8s_retry.plugins.failures import FailureRecord, record_from_xcom, summarize
from airflow_k8s_retry.plugins.page import render

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def rec(task: str, reason: str, minutes: int, outcome: str = "retry", dag: str = "etl") -> FailureRecord:
    record = record_from_xcom(
        {"outcome": outcome, "reason": reason, "message": f"{reason} happened <b>here</b>"},
        dag_id=dag,
        task_id=task,
        run_id="manual__1",
        map_index=-1,
        at=T0 + timedelta(minutes=minutes),
        try_number=2,
        state="failed",
        pod_name=f"{dag}-{task}-abc-t2",
        namespace="jobs",
    )
    assert record is not None
    return record


def test_counts_by_reason_per_bucket_and_by_task() -> None:
    records = [
        rec("load", "image.rate_limited", 5),
        rec("load", "image.rate_limited", 65),
        rec("load", "container.oom", 70),
        rec("train", "container.oom", 130),
        rec("skipped", "container.exit_code", 10, outcome="skip"),
        rec("old", "container.oom", -120),  # before the range
    ]
    summary = summarize(records, since=T0, until=T0 + timedelta(hours=3), bucket=timedelta(hours=1))
    assert summary.buckets == [T0, T0 + timedelta(hours=1), T0 + timedelta(hours=2)]
    assert summary.series == {"container.oom": [0, 1, 1], "image.rate_limited": [1, 1, 0]}
    assert summary.failures == 4
    assert [(t.task, t.failures, t.reasons) for t in summary.top_tasks] == [
        ("etl.load", 3, {"image.rate_limited": 2, "container.oom": 1}),
        ("etl.train", 1, {"container.oom": 1}),
    ]
    # The skip is shown as a try but not counted as a failure; the old one is outside the range.
    assert [r.task_id for r in summary.records] == ["train", "load", "load", "skipped", "load"]


def test_values_that_are_not_verdicts_are_ignored() -> None:
    kw = {
        "dag_id": "d",
        "task_id": "t",
        "run_id": "r",
        "map_index": -1,
        "at": T0,
        "try_number": 1,
        "state": None,
    }
    assert record_from_xcom("text", **kw) is None
    assert record_from_xcom({"outcome": "retry"}, **kw) is None


def test_a_bucket_must_be_positive() -> None:
    with pytest.raises(ValueError, match="bucket must be positive"):
        summarize([], since=T0, until=T0, bucket=timedelta(0))


def test_the_page_escapes_messages_and_links_each_try() -> None:
    summary = summarize(
        [rec("load", "image.rate_limited", 5)],
        since=T0,
        until=T0 + timedelta(hours=1),
        bucket=timedelta(minutes=5),
    )
    html = render(summary, dag_ids=["etl"], dag_id=None, hours=1, base="http://airflow.example")
    assert "happened &lt;b&gt;here&lt;/b&gt;" in html and "<b>here</b>" not in html
    assert 'href="http://airflow.example/dags/etl/runs/manual__1/tasks/load?try_number=2"' in html
    assert "<code>jobs/etl-load-abc-t2</code>" in html
    assert 'data-reason="image.rate_limited" data-count="1"' in html
    assert html.count('class="failure"') == 1


def test_every_reason_code_has_a_hint_and_unknown_codes_have_none() -> None:
    from airflow_k8s_retry.classification import Reason, hint_for

    for reason in Reason:
        assert hint_for(reason.value) == hint_for(reason)
        assert hint_for(reason)
    assert hint_for("image.from_the_future") is None
