"""While a grace runs, the trigger's log says once a minute what is awaited and until when.

Airflow 3 shows a trigger's log in the task's log, so a task waiting out a registry's rate limit
for 15 minutes is not silent: one line a minute names the reason code, when the signal was first
seen and when the wait gives up. The line costs no API request (a timer, not a poll).

The cluster runs on a manual clock (the pull is refused once the test advances it), the hub's waits
on a clock nobody advances, and the minutes pass on the trigger's clock only: each line is logged
exactly when the test moves that clock, and the requests are the exact ones in the simulator's audit.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from airflow_k8s_retry.classification import Outcome
from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.naming import TryIdentity
from airflow_k8s_retry_testing import FakeCluster
from tests.support.feeds import mark, probe, requests, until_watching, version
from tests.support.lab import (
    Run,
    TriggerLog,
    cluster_reaches,
    create_pod,
    pod_body,
    stamped_signals,
    trigger_for,
    use_cluster,
)

#: How long a pending pod's trigger waits at most (the deadline of a pod that never starts).
PENDING_WAIT = 900.0
#: Simulated seconds from the pod's creation until its first pull is refused.
PULL_REFUSED = 0.4


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster({"images": {"busy:1": {"pull": "rate_limited"}}}, clock="manual") as running:
        yield running


def hhmmss(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M:%S UTC")


def waiting(log: TriggerLog) -> list[str]:
    """The trigger's "waiting since" lines, from "Pod" on (without the logger's fields)."""
    found = log.lines(": waiting since ")
    return [row[row.index("Pod ") :].split(" [airflow")[0].rstrip() for row in found]


async def test_a_rate_limited_pull_says_once_a_minute_what_it_awaits(
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    trigger_clock: ManualClock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    log = TriggerLog(capsys)
    use_cluster(monkeypatch, cluster)
    pod = create_pod(cluster, pod_body(TryIdentity("grace", "pull", "run-1"), "busy:1"))
    name = pod["metadata"]["name"]
    run = Run(trigger_for(pod, TryIdentity("grace", "pull", "run-1"))).start()
    await until_watching(cluster)
    await trigger_clock.wait_for_sleeper(trigger_clock.now() + PENDING_WAIT)
    cluster.advance(PULL_REFUSED)

    signal = "image.rate_limited:base"
    await cluster_reaches(cluster, lambda c: signal in stamped_signals(c, name), 30)
    start = stamped_signals(cluster, name)[signal]
    # The feed has delivered the stamp too: the trigger takes it in before its clock moves past
    # the first minute, and hears nothing of the pod after that.
    stamped = await probe(cluster, pod)
    await stamped.until(version(cluster, name))
    since, until = hhmmss(start), hhmmss(start + 900)
    line = f"Pod {name}: image.rate_limited: waiting since {since}, giving up at {until}"
    # The grace's own timer stays as it was; a line a minute is a timer of its own.
    await trigger_clock.wait_for_sleeper(start + 900)
    await trigger_clock.wait_for_sleeper(start + 60)
    assert waiting(log) == []
    first = mark(cluster)
    for minute in (1, 2, 3):
        trigger_clock.advance(60)
        await trigger_clock.wait_for_sleeper(start + 60 * (minute + 1))
        assert waiting(log) == [line] * minute
    assert requests(cluster, first) == []  # a line is not a request (nor a stamp)
    assert run.events == []

    trigger_clock.set(start + 900)
    event = await run.finish(within=30)
    assert (event.verdict.outcome, event.verdict.reason.value) == (Outcome.RETRY, "image.rate_limited")
    # Two reads when the grace ends: the pod itself, the feed having said nothing of it for longer
    # than the trigger's quiet limit; then the last look before the retry leaves.
    assert requests(cluster, first) == [("get", "pods", "default", 200)] * 2
