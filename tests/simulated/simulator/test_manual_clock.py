"""``FakeCluster(clock="manual")``: simulated time stands still until the test advances it.

The timebase itself (``ManualTime``) runs every call due by the new time in due order, those its
calls schedule within the window included, and nothing else; through the cluster, a pod's scripted
life, a watch's ``timeoutSeconds`` and a Job's back-off follow :meth:`FakeCluster.advance`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest

from airflow_k8s_retry_testing import FakeCluster
from airflow_k8s_retry_testing.timers import ManualTime
from tests.simulated.simulator.pods import phase, pod_body

SCENARIO: dict[str, Any] = {
    "images": {
        "job:1": {"run": {"duration_seconds": 30}},
        "fails:1": {"run": {"exit_code": 1, "duration_seconds": 1}},
    }
}


@pytest.fixture
def manual() -> Iterator[FakeCluster]:
    with FakeCluster(SCENARIO, clock="manual") as running:
        yield running


@pytest.fixture
def cluster(manual: FakeCluster) -> FakeCluster:
    """The manual cluster for this folder's fixtures (``core``: a client of it)."""
    return manual


async def test_calls_run_only_on_advance_in_due_order_with_those_they_schedule() -> None:
    time = ManualTime(asyncio.get_running_loop())
    ran: list[tuple[str, float]] = []

    def call(name: str) -> None:
        ran.append((name, time.time()))

    def spawning() -> None:
        call("spawning")
        time.call_later(0.5, call, "child")  # due within the window: runs in this advance
        time.call_later(5.0, call, "late child")
        time.call_soon(call, "soon")  # after this call, before anything due later

    time.call_at(3.0, call, "c")
    time.call_at(1.0, spawning)
    time.call_at(1.0, call, "tie")
    time.call_at(2.0, call, "cancelled").cancel()
    await asyncio.sleep(0)
    assert ran == [] and time.pending() == [1.0, 1.0, 3.0]
    assert time.advance(0.5) == 0 and ran == [] and time.time() == 0.5
    assert time.advance(2.5) == 5
    # Each call sees its own due time; time then stands at the end of the window.
    assert ran == [("spawning", 1.0), ("tie", 1.0), ("soon", 1.0), ("child", 1.5), ("c", 3.0)]
    assert time.time() == 3.0 and time.pending() == [6.0]
    assert time.advance(3.0) == 1 and ran[-1] == ("late child", 6.0)
    with pytest.raises(ValueError, match="forward"):
        time.advance(-1)


async def test_a_call_due_now_runs_on_the_next_turn_and_a_failing_call_stops_no_other() -> None:
    loop = asyncio.get_running_loop()
    time = ManualTime(loop)
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    ran: list[str] = []

    def fail() -> None:
        raise RuntimeError("boom")

    time.call_later(0.0, fail)
    time.call_later(0.0, ran.append, "after")
    assert ran == []
    await asyncio.sleep(0)
    assert ran == ["after"] and time.time() == 0.0
    assert [str(context["exception"]) for context in reported] == ["boom"]


def test_a_pods_scripted_life_follows_advance(manual: FakeCluster, core: Any) -> None:
    core.create_namespaced_pod("default", pod_body("p", "job:1"))
    core.read_namespaced_pod("p", "default")  # a round trip: the loop has turned meanwhile
    assert manual.sim_time == 0.0 and phase(manual.pod("p")) == "Pending"
    assert lifecycle(manual) == ["created"]
    # Step by step, to each next scripted step: each advance runs exactly what was due.
    seen: list[tuple[float, list[str]]] = []
    while phase(manual.pod("p")) != "Succeeded":
        (due, *_) = manual.pending_timers()
        before = len(lifecycle(manual))
        assert manual.advance(due - 0.001 - manual.sim_time) == 0
        assert len(lifecycle(manual)) == before
        assert manual.advance(due - manual.sim_time) >= 1  # to the step's time, exactly
        seen.append((manual.sim_time, lifecycle(manual)[before:]))
    changes = [change for _, found in seen for change in found]
    assert changes == [
        "scheduled",
        "waiting:ContainerCreating",
        "running:base",
        "phase:Running",
        "terminated:Completed",
        "phase:Succeeded",
    ]
    started = next(at for at, found in seen if "running:base" in found)
    ended = next(at for at, found in seen if "terminated:Completed" in found)
    assert ended - started == pytest.approx(30.0)
    assert manual.pending_timers() == [] and manual.timer_lag() == [0.0] * len(manual.timer_lag())


def test_a_deletion_reaches_the_kubelet_from_the_store_with_no_time_passing(
    manual: FakeCluster, core: Any
) -> None:
    """The API server only marks the pod; the kubelet learns of the mark from the store on the
    loop's next turn, at the same simulated time, and takes its steps as advance reaches them."""
    core.create_namespaced_pod("default", pod_body("p", "job:1"))
    while phase(manual.pod("p")) != "Running":
        manual.advance(manual.pending_timers()[0] - manual.sim_time)
    at = manual.sim_time
    before = len(lifecycle(manual))
    core.delete_namespaced_pod("p", "default")  # the pod's own grace: 30 s
    # The kubelet's stop is due 0.5 s on (before the run's scripted end), and time stood still.
    assert manual.pending_timers()[0] == pytest.approx(at + 0.5) and manual.sim_time == at
    assert [e["reason"] for e in manual.events(involved="p")][-1] == "Killing"
    assert lifecycle(manual)[before:] == ["deleting"]
    assert manual.advance(0.499) == 0
    manual.advance(0.001)  # the containers stop: the pod fails (SIGTERM, 143), the object stays
    assert phase(manual.pod("p")) == "Failed"
    manual.advance(0.05)  # then the kubelet confirms
    assert manual.pod("p") is None and manual.pending_timers() == []
    assert lifecycle(manual)[before:] == ["deleting", "terminated:Error:base", "phase:Failed", "deleted"]


def test_a_deletion_without_grace_removes_the_pod_at_once_and_the_kubelet_lets_go(
    manual: FakeCluster, core: Any
) -> None:
    core.create_namespaced_pod("default", pod_body("p", "job:1"))
    while phase(manual.pod("p")) != "Running":
        manual.advance(manual.pending_timers()[0] - manual.sim_time)
    core.delete_namespaced_pod("p", "default", grace_period_seconds=0)
    assert manual.pod("p") is None
    # The kubelet saw it go: nothing of the pod's run is left to fire.
    assert manual.pending_timers() == []
    assert lifecycle(manual)[-2:] == ["deleting", "deleted"]


async def test_a_watch_times_out_in_simulated_seconds(manual: FakeCluster) -> None:
    import kubernetes_asyncio

    client = await kubernetes_asyncio.config.new_client_from_config(str(manual.kubeconfig))
    try:
        core = kubernetes_asyncio.client.CoreV1Api(client)
        response = await core.list_namespaced_pod(
            "default", watch=True, timeout_seconds=5, _preload_content=False
        )
        assert manual.pending_timers() == [5.0]  # the watch's end, nothing else
        reading = asyncio.ensure_future(response.content.read())
        manual.advance(4.9)
        await core.list_namespaced_pod("default")  # a round trip: the watch would have ended by now
        assert not reading.done()
        manual.advance(0.1)
        assert await asyncio.wait_for(reading, 10) == b""
        response.close()
    finally:
        await client.close()


def test_a_jobs_back_off_counts_from_the_failure_in_simulated_seconds(manual: FakeCluster) -> None:
    batch = kubernetes.client.BatchV1Api(kubernetes.config.new_client_from_config(str(manual.kubeconfig)))
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "fails:1"}]}}
    batch.create_namespaced_job("default", {"metadata": {"name": "etl"}, "spec": {"template": template}})
    assert manual.wait_for(lambda c: len(c.pods()) == 1, 10)
    while phase(manual.pods()[0]) != "Running":
        manual.advance(manual.pending_timers()[0] - manual.sim_time)
    (fails_at,) = manual.pending_timers()
    # One advance past the failure: the controller takes it in at its time, not at the window's end,
    # and re-creates the pod after its 10 s back-off from then.
    manual.advance(fails_at + 5 - manual.sim_time)
    assert phase(manual.pods()[0]) == "Failed"
    (backed_off,) = manual.pending_timers()
    assert backed_off == pytest.approx(fails_at + 10)
    manual.advance(backed_off - 0.001 - manual.sim_time)
    batch.read_namespaced_job("etl", "default")  # a round trip: the loop has turned meanwhile
    assert len(manual.pods()) == 1
    manual.advance(0.002)
    assert manual.wait_for(lambda c: len(c.pods()) == 2, 10)


def test_manual_mode_refuses_what_has_no_meaning_without_a_pace() -> None:
    with pytest.raises(ValueError, match="manual clock has no pace"):
        FakeCluster(clock="manual", time_scale=0.1)
    with pytest.raises(ValueError, match="clock"):
        FakeCluster(clock="fast")  # type: ignore[arg-type]
    with FakeCluster(clock="manual") as cluster, pytest.raises(RuntimeError, match="manual"):
        cluster.sim_clock()
    with FakeCluster(time_scale=0.01) as cluster, pytest.raises(RuntimeError, match="clock='manual'"):
        cluster.advance(1)


def lifecycle(cluster: FakeCluster) -> list[str]:
    return [r["change"] for r in cluster.audit_records() if r["kind"] == "lifecycle"]
