"""``on_kill`` deletes the pod by UID only once the task instance is confirmed killed.

Airflow 3.3.0-3.3.2 also call ``on_kill`` when a trigger merely moves to another triggerer; the
task instance is still deferred then, and the live pod must survive the hand-over. After another
triggerer fired, the task instance is scheduled, queued or running and the worker owns the pod.
A deleted DAG run leaves no task instance at all: nobody else will delete the pod.

The cluster runs on a manual clock (a pod moves, and a deleted one goes, only when the test advances
it), the hub's feeds wait on a clock nobody advances, and the triggers' clock moves only to each pause
the code under test sleeps for: every step has one outcome, and the tests assert the exact requests
(from the simulator's audit) and pauses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import AsyncMock

import pytest
from kubernetes.config import new_client_from_config
from pytest_mock import MockerFixture

from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.naming import TryIdentity
from airflow_k8s_retry.kube.pods import KILL_BACKOFF
from airflow_k8s_retry.triggers import PodStateTrigger
from airflow_k8s_retry_testing import FakeCluster
from tests.support.feeds import Request, mark, requests, until_watching
from tests.support.lab import Run, create_pod, kill_work, pod_body, trigger_for, use_cluster

SCENARIO = {
    "images": {
        "long:1": {"pull": "ok", "run": {"exit_code": 0, "duration_seconds": 100_000}},
        "fails:1": {"pull": "ok", "run": {"exit_code": 1, "duration_seconds": 1}},
    }
}
#: Simulated seconds from a pod's creation: it runs; a failing one has failed (it runs 1 s).
STARTED, FAILED = 0.3, 2.0
#: A deleted pod's container stops within this many simulated seconds, and the pod is gone.
STOPPED = 1.0
#: How long a pending pod's trigger waits at most (the deadline of a pod that never starts).
PENDING_WAIT = 900.0
#: When a trigger that has seen its pod running looks again (on its own clock).
RECHECK = 600.0
#: What the kill makes once it decided to delete, per attempt: a read of the pod, then its DELETE.
READ = ("get", "pods", "default", 200)
DELETED = ("delete", "pods", "default", 200)


@pytest.fixture
def cluster(held_hub: ManualClock) -> Iterator[FakeCluster]:
    with FakeCluster(SCENARIO, clock="manual") as running:
        yield running


def gone_once_stopped(cluster: FakeCluster, name: str) -> None:
    """The pod was deleted: once its container stopped (a running pod's deletion is graceful), it is
    gone."""
    cluster.advance(STOPPED)
    assert cluster.pod(name) is None


async def running_pod(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, kubeconfig: Path | None = None
) -> tuple[TryIdentity, dict[str, Any]]:
    """A running pod of a try (the triggers run on the ``trigger_clock`` fixture's manual clock, and
    read task states from the ``task_state_lookup`` stub where a test asks for it)."""
    use_cluster(monkeypatch, cluster, kubeconfig)
    identity = TryIdentity("kill", "task", "run-1", map_index=2)
    pod = create_pod(cluster, pod_body(identity, "long:1"))
    cluster.advance(STARTED)
    assert (cluster.pod(pod["metadata"]["name"]) or {})["status"]["phase"] == "Running"
    return identity, pod


async def stopped_trigger(
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    clock: ManualClock,
    *,
    owned: bool = True,
    kubeconfig: Path | None = None,
) -> tuple[PodStateTrigger, str, TryIdentity]:
    """Run a trigger on a running pod, then cancel it as the triggerer does before ``on_kill``."""
    identity, pod = await running_pod(cluster, monkeypatch, kubeconfig)
    name = pod["metadata"]["name"]
    run = Run(trigger_for(pod, identity if owned else None, owned=owned)).start()
    # The trigger has seen the pod running (it sleeps until its next re-check) through feeds that
    # watch (with no label selector for a pod the task did not create).
    await until_watching(cluster, selector=None if owned else "")
    await clock.wait_for_sleeper(clock.now() + RECHECK)
    await run.stop()
    return run.trigger, name, identity


def since_the_stop(cluster: FakeCluster) -> list[Request]:
    """The requests after the trigger's feeds were up: the kill's (the stopped trigger made none)."""
    made = requests(cluster)
    last_watch = max(i for i, request in enumerate(made) if request[0] == "watch")
    return made[last_watch + 1 :]


async def on_clock(clock: ManualClock, work: set[asyncio.Future[Any]]) -> list[float]:
    """Move the clock to each pause ``work`` sleeps for, as soon as it sleeps, until it is done (however
    slowly a busy machine runs it); the pauses, in order."""
    pauses = []
    while not all(future.done() for future in work):
        sleeper = asyncio.ensure_future(clock.wait_for_sleeper(later_than=clock.now(), within=30))
        done, _ = await asyncio.wait({sleeper, *work}, return_when=asyncio.FIRST_COMPLETED)
        if sleeper in done:
            # A timer that bounds a wait (the state lookup's) is cancelled as soon as the wait is
            # answered, a few loop turns later (2 today): only a sleeper still there after 20
            # turns is a pause.
            for _ in range(20):
                await asyncio.sleep(0)
                if sleeper.result() not in clock.deadlines:
                    break
            else:
                pauses.append(sleeper.result() - clock.now())
                clock.set(sleeper.result())
        else:
            sleeper.cancel()
            await asyncio.gather(sleeper, return_exceptions=True)
    for future in work:
        future.result()  # the work itself raised nothing
    return pauses


async def on_kill_on_the_clock(trigger: PodStateTrigger) -> list[float]:
    """``on_kill``, moving the trigger's manual clock on to each pause it backs off for between
    attempts; those pauses."""
    clock = trigger.clock
    assert isinstance(clock, ManualClock)
    return await on_clock(clock, {asyncio.ensure_future(trigger.on_kill())})


async def kill(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, clock: ManualClock, *, owned: bool = True
) -> tuple[str, TryIdentity]:
    """Do what the triggerer does on a kill: cancel the trigger, then call ``on_kill``."""
    trigger, name, identity = await stopped_trigger(cluster, monkeypatch, clock, owned=owned)
    await trigger.on_kill()
    return name, identity


async def test_hand_over_to_another_triggerer_keeps_the_pod(
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    trigger_clock: ManualClock,
    task_state_lookup: AsyncMock,
) -> None:
    task_state_lookup.return_value = "deferred"
    name, identity = await kill(cluster, monkeypatch, trigger_clock)
    task_state_lookup.assert_awaited_once_with(identity)
    assert cluster.pod(name) is not None
    assert since_the_stop(cluster) == []  # not even a read of the pod


async def test_a_real_kill_deletes_the_pod_by_uid(
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    trigger_clock: ManualClock,
    task_state_lookup: AsyncMock,
) -> None:
    task_state_lookup.return_value = "failed"
    name, _ = await kill(cluster, monkeypatch, trigger_clock)
    uid = (cluster.pod(name) or {})["metadata"]["uid"]
    assert since_the_stop(cluster) == [READ, DELETED]
    deletion = [
        r for r in cluster.audit_records() if r.get("verb") == "delete" and r.get("resource") == "pods"
    ]
    assert [(r["uid"], r["status"]) for r in deletion] == [(uid, 200)]
    gone_once_stopped(cluster, name)


async def test_a_state_that_cannot_be_read_keeps_the_pod(
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    trigger_clock: ManualClock,
    task_state_lookup: AsyncMock,
) -> None:
    task_state_lookup.side_effect = RuntimeError("no supervisor")
    name, _ = await kill(cluster, monkeypatch, trigger_clock)
    assert cluster.pod(name) is not None
    assert since_the_stop(cluster) == []


async def test_a_pod_the_task_did_not_create_is_never_deleted(
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    trigger_clock: ManualClock,
    task_state_lookup: AsyncMock,
) -> None:
    task_state_lookup.return_value = "failed"
    name, _ = await kill(cluster, monkeypatch, trigger_clock, owned=False)
    task_state_lookup.assert_not_awaited()
    assert cluster.pod(name) is not None
    assert since_the_stop(cluster) == []


async def test_outside_a_triggerer_the_default_lookup_fails_safe(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, trigger_clock: ManualClock, mocker: MockerFixture
) -> None:
    from airflow_k8s_retry.kills.policy import airflow_task_state

    # No task SDK supervisor here: the real lookup raises, so the pod is kept.
    assert PodStateTrigger.task_state_lookup is airflow_task_state
    lookup = mocker.spy(PodStateTrigger, "task_state_lookup")
    name, identity = await kill(cluster, monkeypatch, trigger_clock)
    lookup.assert_awaited_once_with(identity)
    assert lookup.spy_exception is not None
    assert cluster.pod(name) is not None
    assert since_the_stop(cluster) == []


async def test_a_repeated_cancellation_during_the_lookup_still_deletes_the_pod(
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    trigger_clock: ManualClock,
    task_state_lookup: AsyncMock,
) -> None:
    # Airflow 3.3 re-sends the cancellation on every state sync until the trigger has ended, and
    # each one lands inside on_kill while it is still asking for the task's state.
    started, release = asyncio.Event(), asyncio.Event()

    async def answer_once_released(identity: TryIdentity) -> str:
        """As a busy supervisor does (seen: about 4 s)."""
        started.set()
        await release.wait()
        return "failed"

    task_state_lookup.side_effect = answer_once_released
    trigger, name, _ = await stopped_trigger(cluster, monkeypatch, trigger_clock)
    on_kill = asyncio.ensure_future(trigger.on_kill())
    await asyncio.wait_for(started.wait(), 10)
    on_kill.cancel()
    with pytest.raises(asyncio.CancelledError):
        await on_kill
    assert cluster.pod(name) is not None, "the kill work is still waiting for the state"
    (work,) = kill_work()
    release.set()
    await asyncio.wait_for(work, 30)
    assert since_the_stop(cluster) == [READ, DELETED]
    gone_once_stopped(cluster, name)


@pytest.mark.parametrize(
    ("after", "pauses", "deleted"),
    [(20.0, [20.0], True), (None, [PodStateTrigger.state_lookup_timeout], False)],
    ids=["answered after 20 s", "never answered"],
)
async def test_a_slow_state_lookup_is_waited_for_on_the_triggers_clock(
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    trigger_clock: ManualClock,
    task_state_lookup: AsyncMock,
    after: float | None,
    pauses: list[float],
    deleted: bool,
) -> None:
    # On a loaded machine the triggerer's supervisor answered after more than 10 s; the kill waits
    # its bound (25 s) on the trigger's clock, then keeps the pod for the api-server's listener.
    async def answer_after(identity: TryIdentity) -> str:
        """As a busy supervisor does: ``after`` seconds of the trigger's clock later (never, if None)."""
        if after is None:
            await asyncio.Event().wait()
        else:
            await trigger_clock.sleep_until(trigger_clock.now() + after)
        return "failed"

    task_state_lookup.side_effect = answer_after
    trigger, name, _ = await stopped_trigger(cluster, monkeypatch, trigger_clock)
    assert await on_kill_on_the_clock(trigger) == pauses
    assert task_state_lookup.await_count == 1
    assert since_the_stop(cluster) == ([READ, DELETED] if deleted else [])
    if deleted:
        gone_once_stopped(cluster, name)
    else:
        assert cluster.pod(name) is not None


@pytest.mark.parametrize("state", ["failed", "success", "skipped", "upstream_failed", "removed", None])
async def test_every_state_a_user_action_leaves_deletes_the_pod(
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    trigger_clock: ManualClock,
    task_state_lookup: AsyncMock,
    state: str | None,
) -> None:
    task_state_lookup.return_value = state
    name, _ = await kill(cluster, monkeypatch, trigger_clock)
    assert since_the_stop(cluster) == [READ, DELETED]
    gone_once_stopped(cluster, name)


async def test_a_deleted_dag_run_deletes_the_pod(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, trigger_clock: ManualClock, mocker: MockerFixture
) -> None:
    # Once the DAG run (or the DAG) is deleted, the execution API answers the state query with an
    # empty map: the task instance is gone, and nobody else will ever delete its pod.
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    from airflow_k8s_retry.kills.policy import airflow_task_state

    monkeypatch.setattr(RuntimeTaskInstance, "get_task_states", staticmethod(lambda **kwargs: {}))
    assert PodStateTrigger.task_state_lookup is airflow_task_state  # the package's own lookup
    lookup = mocker.spy(PodStateTrigger, "task_state_lookup")
    name, identity = await kill(cluster, monkeypatch, trigger_clock)
    lookup.assert_awaited_once_with(identity)
    assert since_the_stop(cluster) == [READ, DELETED]
    gone_once_stopped(cluster, name)


@pytest.mark.parametrize("state", ["scheduled", "queued", "running", "up_for_retry", "restarting"])
async def test_after_another_triggerer_fired_the_pod_is_left_to_the_worker(
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    trigger_clock: ManualClock,
    task_state_lookup: AsyncMock,
    state: str,
) -> None:
    # Hand-over: triggerer B fired the verdict, the task instance is on its way back to a worker
    # (scheduled, queued, running); the stale copy on triggerer A is cancelled like a kill. The
    # worker reads the pod's logs and XCom next, so A must not delete it.
    task_state_lookup.return_value = state
    name, _ = await kill(cluster, monkeypatch, trigger_clock)
    assert since_the_stop(cluster) == []
    assert cluster.pod(name) is not None


async def test_a_pod_carrying_a_verdict_is_left_to_the_worker(
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    trigger_clock: ManualClock,
    task_state_lookup: AsyncMock,
) -> None:
    # The worker already acted on a verdict and kept the pod (keep_failed_pods): the task failed,
    # and a stale triggerer's on_kill must not remove the pod the author asked to keep.
    import json

    from airflow_k8s_retry.kube.naming import VERDICT_ANNOTATION

    task_state_lookup.return_value = "failed"
    trigger, name, _ = await stopped_trigger(cluster, monkeypatch, trigger_clock)
    stamp = {"outcome": "fail", "reason": "container.exit_code", "message": "exit 1", "rule": "exit_code"}
    client = new_client_from_config(config_file=str(cluster.kubeconfig), persist_config=False)
    try:
        from kubernetes import client as k

        k.CoreV1Api(client).patch_namespaced_pod(
            name, "default", {"metadata": {"annotations": {VERDICT_ANNOTATION: json.dumps(stamp)}}}
        )
    finally:
        client.close()
    stamped = mark(cluster)
    await trigger.on_kill()
    assert requests(cluster, stamped) == [READ]  # it read the stamp, and kept the pod
    assert cluster.pod(name) is not None


async def test_a_kill_without_the_delete_verb_names_it(
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    trigger_clock: ManualClock,
    task_state_lookup: AsyncMock,
    capfd: pytest.CaptureFixture[str],
) -> None:
    everything_but_delete = [
        {"verbs": ["get", "list", "watch", "patch"], "resources": ["pods", "events"], "namespaces": None}
    ]
    kubeconfig = cluster.grant("no-delete", everything_but_delete)
    task_state_lookup.return_value = "failed"
    trigger, name, _ = await stopped_trigger(cluster, monkeypatch, trigger_clock, kubeconfig=kubeconfig)
    capfd.readouterr()
    # A denial may be an authorizer's hiccup: tried again after each pause, then given up.
    assert await on_kill_on_the_clock(trigger) == list(KILL_BACKOFF)
    assert since_the_stop(cluster) == [READ, ("delete", "pods", "default", 403)] * (1 + len(KILL_BACKOFF))
    assert cluster.pod(name) is not None
    errors = [line for line in capfd.readouterr().out.splitlines() if "[error" in line]
    assert any('RBAC: may not delete pods in namespace "default"' in line for line in errors), errors


@pytest.mark.parametrize("status", [500, 429, 403, "reset"])
async def test_a_kill_whose_delete_fails_for_a_while_still_deletes_the_pod(
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    trigger_clock: ManualClock,
    task_state_lookup: AsyncMock,
    status: int | str,
) -> None:
    task_state_lookup.return_value = "failed"
    trigger, name, _ = await stopped_trigger(cluster, monkeypatch, trigger_clock)
    cluster.add_fault(verb="delete", resource="pods", status=status, times=2)
    pauses = await on_kill_on_the_clock(trigger)
    failed = ("delete", "pods", "default", status)
    if status == "reset":
        # The client sends a DELETE once more by itself when its connection was reset unanswered:
        # both faults go to the first attempt.
        assert pauses == list(KILL_BACKOFF[:1])
        assert since_the_stop(cluster) == [READ, failed, failed, READ, DELETED]
    else:
        assert pauses == list(KILL_BACKOFF[:2])
        assert since_the_stop(cluster) == [READ, failed, READ, failed, READ, DELETED]
    gone_once_stopped(cluster, name)


async def test_a_kill_whose_deletes_fail_five_times_in_a_row_still_deletes_the_pod(
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    trigger_clock: ManualClock,
    task_state_lookup: AsyncMock,
) -> None:
    # Chaos seed 107: three 410s from a proxy, then an authorizer's two denials.
    task_state_lookup.return_value = "failed"
    trigger, name, _ = await stopped_trigger(cluster, monkeypatch, trigger_clock)
    cluster.add_fault(verb="delete", resource="pods", status=410, times=3)
    cluster.add_fault(verb="delete", resource="pods", status=403, times=2)
    pauses = await on_kill_on_the_clock(trigger)
    assert pauses == list(KILL_BACKOFF[:5]) and sum(pauses) < 30  # Airflow's limit for on_kill
    deletes = [r for r in since_the_stop(cluster) if r[0] == "delete"]
    assert [outcome for *_, outcome in deletes] == [410, 410, 410, 403, 403, 200]
    gone_once_stopped(cluster, name)


# -- killed in the moment the trigger fired: Airflow drops the event and calls no on_kill ---------


async def fired_and_ended(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, clock: ManualClock
) -> tuple[str, int]:
    """Run a trigger on a pod that fails until it fires its verdict and returns, as in a triggerer;
    (the pod's name, where the audit stood once it returned)."""
    use_cluster(monkeypatch, cluster)
    identity = TryIdentity("kill", "task", "run-1", map_index=2)
    pod = create_pod(cluster, pod_body(identity, "fails:1"))
    run = Run(trigger_for(pod, identity)).start()
    await until_watching(cluster)
    await clock.wait_for_sleeper(clock.now() + PENDING_WAIT)
    cluster.advance(FAILED)
    event = await run.finish(within=30)
    assert event.verdict.outcome.value == "retry", event.verdict
    return pod["metadata"]["name"], mark(cluster)


async def test_a_fired_trigger_leaves_nothing_behind_on_the_triggerers_loop(
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    trigger_clock: ManualClock,
    task_state_lookup: AsyncMock,
) -> None:
    # Once the trigger fired, the pod is the resumed worker's; a kill before a worker resumed the
    # try is the listener's, a clear the next try's sweep's (kills/__init__.py): nothing of the
    # trigger outlives its event, and the pod is not touched.
    from airflow_k8s_retry.kube.hub import WatchHub

    name, fired = await fired_and_ended(cluster, monkeypatch, trigger_clock)
    assert kill_work() == set()
    assert WatchHub.current().stats() == []  # its feeds closed with it
    trigger_clock.advance(6 * 3600)
    await asyncio.sleep(0)
    task_state_lookup.assert_not_awaited()
    assert requests(cluster, fired) == []
    assert cluster.pod(name) is not None
