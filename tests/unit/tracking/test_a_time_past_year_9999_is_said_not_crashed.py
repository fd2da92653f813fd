"""The once-a-minute grace note formats its times; one past year 9999 reads "never" instead of
crashing the trigger (review finding R3-7). ``FailurePolicy`` refuses such graces at parse time
anyway (``test_bad_values_name_the_field_and_the_fix``); a trigger deferred before that check must
still not crash."""

from __future__ import annotations

from airflow_k8s_retry.triggers.tracker import _clock


def test_times_format_and_a_time_past_year_9999_reads_never() -> None:
    assert _clock(0) == "00:00:00 UTC"
    assert _clock(1e12) == "never"
    assert _clock(float("inf")) == "never"
