"""While a grace runs, the trigger's log says once a minute what is awaited and until when.

Airflow 3 shows a trigger's log in the task's log, so a task waiting out a registry's rate limit
for 15 minutes is not silent: one line a minute names the reason code, when the signal was first
seen and when the wait gives up. The line costs no API request (a timer, not a poll).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from airflow_k8s_retry.classification import Outcome
from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.naming import TryIdentity
from airflow_k8s_retry.triggers import PodStateTrigger
from airflow_k8s_retry_testing import FakeCluster
from tests.simulated.watching.test_every_default_rule_through_a_pod_lifecycle import stamped_signals
from tests.support.lab import Run, cluster_reaches, create_pod, pod_body, trigger_for, use_cluster


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster({"images": {"busy:1": {"pull": "rate_limited"}}}, time_scale=0.01) as running:
        yield running


def hhmmss(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M:%S UTC")


class TriggerLog:
    """The trigger's log lines (Airflow's structlog writes them to stdout)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.text = ""

    def waiting(self) -> list[str]:
        self.text += self.capsys.readouterr().out
        found = [row for row in self.text.splitlines() if ": waiting since " in row]
        return [row[row.index("Pod ") :].split(" [airflow")[0].rstrip() for row in found]


async def test_a_rate_limited_pull_says_once_a_minute_what_it_awaits(
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    manual_clock: ManualClock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    log = TriggerLog(capsys)
    use_cluster(monkeypatch, cluster)
    monkeypatch.setattr(PodStateTrigger, "clock", manual_clock)
    pod = create_pod(cluster, pod_body(TryIdentity("grace", "pull", "run-1"), "busy:1"))
    name = pod["metadata"]["name"]
    run = Run(trigger_for(pod, TryIdentity("grace", "pull", "run-1"))).start()

    signal = "image.rate_limited:base"
    await cluster_reaches(cluster, lambda c: signal in stamped_signals(c, name), 10)
    start = stamped_signals(cluster, name)[signal]
    since, until = hhmmss(start), hhmmss(start + 900)
    line = f"Pod {name}: image.rate_limited: waiting since {since}, giving up at {until}"
    # The grace's own timer stays as it was; a line a minute is a timer of its own.
    await manual_clock.wait_for_sleeper(start + 900)
    await manual_clock.wait_for_sleeper(start + 60)
    assert log.waiting() == []
    reads_before = cluster.request_counts()[("get", "pods")]
    for minute in (1, 2, 3):
        manual_clock.advance(60)
        await manual_clock.wait_for_sleeper(start + 60 * (minute + 1))
        assert log.waiting() == [line] * minute
    assert cluster.request_counts()[("get", "pods")] == reads_before  # a line is not a request
    assert run.events == []

    manual_clock.set(start + 900)
    event = await run.finish(within=10)
    assert (event.verdict.outcome, event.verdict.reason.value) == (Outcome.RETRY, "image.rate_limited")
