"""A small-N run of the load check: concurrent pods all finish on time through the real async client."""

from __future__ import annotations

from airflow_k8s_retry_testing.loadcheck import run_loadcheck


def test_fifty_concurrent_pods_finish_without_falling_behind() -> None:
    # Each pod runs 3 real seconds, long enough for all 50 creates to land while the first still run.
    report = run_loadcheck(50, time_scale=0.05, run_seconds=60.0, concurrency=16, timeout=60)
    assert report.succeeded == 50
    assert report.peak_concurrent_running == 50, "every pod ran at the same time"
    # Each pod's lifecycle changes (scheduled, creating, running, succeeded) reached the watch.
    assert report.watch_lag.count == 4 * 50
    assert report.timer_lag.count >= 50 * 8
    # The makespan is creation plus the scripted minimum, with slack for a loaded CI machine.
    assert report.makespan_s < report.create_wall_s + report.scripted_minimum_s + 5
    assert report.server_request.p50_ms < 50
