"""A PodTargetTrigger waits for the pod to appear, follows the newest pod of a
selector, judges a Job's pods as part of the Job, and reports a timeout: all through the watch.

Nothing here waits for real time to pass, so every step has one outcome whatever the machine's
load: the cluster runs on a manual clock (a pod's life, a Job's back-off and an eviction happen
only when the test advances it), the hub's feeds wait (reconnect backoff, polling, a missing pod's
confirming GET) on a ``ManualClock`` only the test moves, and so does the trigger (its progress
line, its timeout, its judges' grace timers). The tests assert exactly which requests the trigger
made, from the simulator's audit, which decisions it logged, and which event it emitted. (One
wait is real: where a Job's two pods must differ in creationTimestamp, which the cluster writes
on real time in whole seconds, the test lets the wall clock's second turn between them.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from airflow_k8s_retry.classification import Outcome, Reason
from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.config import ClusterConfig
from airflow_k8s_retry.kube.hub import WatchHub
from airflow_k8s_retry.kube.watch_settings import HubSettings
from airflow_k8s_retry.triggers.target import PROGRESS_EVERY, PodTargetTrigger, Target, TargetEvent
from airflow_k8s_retry_testing import FakeCluster
from tests.simulated.sensor.stepping import (
    SCENARIO,
    WATCHED,
    TaskLog,
    created,
    job_failed,
    made,
    phase,
    requests,
    run_until,
)
from tests.support.feeds import hold_hub
from tests.support.following import Following, create, following, job, pod
from tests.support.lab import use_cluster

#: The hub's longest reconnect delay: advancing its clock this far ends any one backoff.
BACKOFF_CAP = 0.2
#: The following trigger's clock, and its judges', moves only when a test advances it.
pytestmark = pytest.mark.usefixtures("trigger_clock")
EXIT_3 = "container 'main' failed with exit code 3, reason Error"
BACKOFF_LIMIT = "BackoffLimitExceeded: Job has reached the specified backoff limit"


@pytest.fixture
def hub_clock(hub_settings: Callable[..., HubSettings]) -> ManualClock:
    return hold_hub(hub_settings, backoff_base=0.05, backoff_cap=BACKOFF_CAP)


@pytest.fixture
def log(capsys: pytest.CaptureFixture[str]) -> TaskLog:
    return TaskLog(capsys)


@pytest.fixture
def cluster(
    hub_clock: ManualClock, make_fake_cluster: Callable[..., FakeCluster], monkeypatch: pytest.MonkeyPatch
) -> FakeCluster:
    running = make_fake_cluster(SCENARIO, clock="manual")
    use_cluster(monkeypatch, running)
    return running


def watching(cluster: FakeCluster, name: str) -> str:
    """The trigger's log line when it starts judging pod ``name``."""
    found = cluster.pod(name)
    assert found is not None
    return f"Watching pod default/{name} (uid {found['metadata']['uid']})"


def look(name: str) -> list[str]:
    """The last look at a pod whose container failed: the pod, then the container's last log lines."""
    return [f"get {name} 200", f"log {name} 200"]


def left_to_the_job(name: str, why: str) -> str:
    """The trigger's log line when a failed pod of Job ``etl`` is not the end: the Job replaces it."""
    return f"Pod {name} of job etl: {why}; the Job decides what comes next"


async def test_waits_for_a_pod_created_later_without_polling(
    cluster: FakeCluster, hub_clock: ManualClock, trigger_clock: ManualClock, log: TaskLog
) -> None:
    run = Following(following(Target("default", pod_name="report-1")))
    waiting = "Waiting for pod default/report-1 ({} s so far): no such pod yet"
    await made(cluster, {"pods in default": WATCHED})
    # A minute passes on every clock while the trigger waits: it says so, and neither it nor its
    # feed reads anything (no poll is even due: nothing waits on the hub's clock).
    start = trigger_clock.now()
    await trigger_clock.wait_for_sleeper(start + PROGRESS_EVERY)
    trigger_clock.advance(PROGRESS_EVERY)
    hub_clock.advance(PROGRESS_EVERY)
    await trigger_clock.wait_for_sleeper(start + 2 * PROGRESS_EVERY)
    assert log.decisions() == [waiting.format(0), waiting.format(60)]
    assert requests(cluster) == {"pods in default": WATCHED} and hub_clock.deadlines == []
    assert run.events == []

    create(cluster, "pod", pod("report-1", "quick:1"))
    # The watch brings the pod; its judge adds the Events' feed.
    judged = {"pods in default": WATCHED, "events in all namespaces": WATCHED}
    await made(cluster, judged)
    assert log.decisions()[2:] == [watching(cluster, "report-1")]
    run_until(cluster, lambda c: phase(c, "report-1") == "Succeeded")
    event = await run.finish(within=20)
    assert (event.timed_out, event.job, event.message) == (False, None, "pod default/report-1 succeeded")
    assert event.event is not None
    assert (event.event.pod_name, event.event.verdict.outcome) == ("report-1", Outcome.SUCCEED)
    # Not one read of the pod, before it existed (a 404) or after (a success needs no last look).
    assert requests(cluster) == judged


async def test_a_selector_follows_the_newest_matching_pod(cluster: FakeCluster, log: TaskLog) -> None:
    create(cluster, "pod", pod("report-old", "long:1"))
    run = Following(following(Target("default", label_selector="app=report")))
    # The selector's own feed; report-old's judge reads the namespace's pods and the Events.
    judged = {"pods in default (app=report)": WATCHED, "pods in default": WATCHED}
    judged["events in all namespaces"] = WATCHED
    await made(cluster, judged)
    create(cluster, "pod", pod("report-new", "fails:1"))
    # report-new is newer: report-old's judge stops (the last reader of its feeds, which stop),
    # report-new's starts them again.
    switched = {**judged, "pods in default": WATCHED * 2, "events in all namespaces": WATCHED * 2}
    await made(cluster, switched)
    assert log.decisions() == [
        "Waiting for the newest pod matching 'app=report' in namespace default (0 s so far):"
        " no matching pod yet",
        watching(cluster, "report-old"),
        "Pod report-new is newer than report-old: following it instead",
        watching(cluster, "report-new"),
    ]
    run_until(cluster, lambda c: phase(c, "report-new") == "Failed")
    event = await run.finish(within=20)
    assert event.event is not None and event.message == EXIT_3
    assert event.event.pod_name == "report-new"
    verdict = event.event.verdict
    assert (verdict.outcome, verdict.reason) == (Outcome.RETRY, Reason.CONTAINER_EXIT_CODE)
    assert phase(cluster, "report-old") == "Running"
    assert requests(cluster) == {**switched, "reads": look("report-new")}  # its last look


@pytest.fixture
def evicting(
    hub_clock: ManualClock, make_fake_cluster: Callable[..., FakeCluster], monkeypatch: pytest.MonkeyPatch
) -> FakeCluster:
    """The first pod of Job ``etl`` is evicted a second after it starts (count 1: not its successor)."""
    disruption = {"pod_name_prefix": "etl-", "after_seconds": 1, "kind": "evict"}
    running = make_fake_cluster({**SCENARIO, "disruptions": [disruption]}, clock="manual")
    use_cluster(monkeypatch, running)
    return running


async def test_a_failed_pod_the_job_replaces_is_not_the_end(evicting: FakeCluster, log: TaskLog) -> None:
    run = Following(following(Target("default", job_name="etl")))
    feeds = {"pods in default": WATCHED, "jobs in default": WATCHED}
    await made(evicting, feeds)
    create(evicting, "job", job("etl", "quick:1"))
    await made(evicting, {**feeds, "events in all namespaces": WATCHED})
    (first,) = created(evicting)
    run_until(evicting, lambda c: phase(c, first) == "Failed")
    # Evicted: its judge's verdict (a relaunch, after its last look) is left to the Job.
    evicted = left_to_the_job(
        first,
        f"node.disruption (pod default/{first} is being disrupted by the cluster (EvictionByEvictionAPI:"
        " Eviction API: evicting); a fresh pod will be started in the same try (relaunch 1 of 3))",
    )
    await log.says(evicted)
    assert requests(evicting) == {**feeds, "events in all namespaces": WATCHED, "reads": [f"get {first} 200"]}
    run_until(evicting, lambda c: len(created(c)) == 2)
    second = created(evicting)[1]
    replaced = {**feeds, "events in all namespaces": WATCHED * 2, "reads": [f"get {first} 200"]}
    await made(evicting, replaced)
    assert log.decisions()[1:] == [
        watching(evicting, first),
        evicted,
        watching(evicting, second),
    ]
    run_until(evicting, lambda c: phase(c, second) == "Succeeded")
    event = await run.finish(within=20)
    assert (event.job, event.timed_out) == ("etl", False) and event.event is not None
    assert event.event.pod_name == second
    assert event.event.verdict.outcome is Outcome.SUCCEED
    assert event.message == (
        "job default/etl is complete (CompletionsReached: Reached expected number of succeeded pods);"
        " 1 pod(s) succeeded"
    )
    pods = {p["metadata"]["name"]: (p["status"]["phase"], p["status"].get("reason")) for p in evicting.pods()}
    assert pods == {first: ("Failed", "Evicted"), second: ("Succeeded", None)}
    assert requests(evicting) == replaced


async def test_a_job_that_fails_reports_the_cause_of_its_last_pod(cluster: FakeCluster, log: TaskLog) -> None:
    run = Following(following(Target("default", job_name="etl")))
    feeds = {"pods in default": WATCHED, "jobs in default": WATCHED}
    await made(cluster, feeds)
    create(cluster, "job", job("etl", "fails:1", backoff_limit=1))
    await made(cluster, {**feeds, "events in all namespaces": WATCHED})
    (first,) = created(cluster)
    run_until(cluster, lambda c: phase(c, first) == "Failed")
    await log.says(left_to_the_job(first, f"container.exit_code ({EXIT_3})"))
    run_until(cluster, lambda c: len(created(c)) == 2)
    last = created(cluster)[1]
    replaced = {**feeds, "events in all namespaces": WATCHED * 2, "reads": look(first)}
    await made(cluster, replaced)
    assert log.decisions()[1:] == [
        watching(cluster, first),
        left_to_the_job(first, f"container.exit_code ({EXIT_3})"),
        watching(cluster, last),
    ]
    run_until(cluster, job_failed)
    event = await run.finish(within=20)
    assert event.event is not None and event.job == "etl"
    verdict = event.event.verdict
    assert (verdict.outcome, verdict.reason) == (Outcome.RETRY, Reason.CONTAINER_EXIT_CODE)
    assert (
        verdict.message
        == f"job default/etl failed ({BACKOFF_LIMIT}) after 2 failed pod(s); its last pod {last}: {EXIT_3}"
    )
    assert event.event.pod_name == last
    assert len(cluster.pods()) == 2, "backoffLimit 1: the first pod and one replacement"
    final = requests(cluster)
    reads = final.pop("reads")
    assert final == {**feeds, "events in all namespaces": WATCHED * 2}
    # The last pod's last look and the LIST of the failed Job's pods, one each: the pods' and the
    # Jobs' watches deliver the pod's failure and the Job's independently, so in either order.
    assert reads[:2] == look(first)
    assert sorted(reads[2:]) == sorted([*look(last), "list job etl's pods 200"])


async def a_second_after(cluster: FakeCluster, name: str) -> None:
    """Wait (real time, under a second) until the wall clock's second is past pod ``name``'s
    creationTimestamp: the cluster writes it on real time in whole seconds, so a pod created from
    then on has a later one (which then tells the last pod, whatever order a LIST gives)."""
    found = cluster.pod(name)
    assert found is not None
    stamp = datetime.strptime(found["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
    await asyncio.sleep(max(0.0, stamp.replace(tzinfo=UTC).timestamp() + 1 - time.time()))


async def run_a_job_that_fails(cluster: FakeCluster) -> str:
    """Job ``etl`` with backoffLimit 1, run until it has failed: two pods fail, the second created
    in a later second than the first. Returns the second, its last pod."""
    create(cluster, "job", job("etl", "fails:1", backoff_limit=1))
    run_until(cluster, lambda c: len(created(c)) == 1 and phase(c, created(c)[0]) == "Failed")
    await a_second_after(cluster, created(cluster)[0])
    run_until(cluster, job_failed)
    assert len(created(cluster)) == 2
    return created(cluster)[1]


def assert_the_cause_of_the_last_pod(event: TargetEvent, cluster: FakeCluster, last: str) -> None:
    assert event.event is not None and event.job == "etl"
    verdict = event.event.verdict
    assert (verdict.outcome, verdict.reason) == (Outcome.RETRY, Reason.CONTAINER_EXIT_CODE), verdict.message
    pods = sorted(cluster.pods(), key=lambda p: p["metadata"]["creationTimestamp"])
    assert [p["metadata"]["name"] for p in pods][-1] == last
    assert (
        len(pods) == 2 and pods[0]["metadata"]["creationTimestamp"] < pods[1]["metadata"]["creationTimestamp"]
    )
    assert (
        verdict.message
        == event.message
        == (f"job default/etl failed ({BACKOFF_LIMIT}) after 2 failed pod(s); its last pod {last}: {EXIT_3}")
    )
    assert event.event.pod_name == last  # the sensor task reads that pod's log for its report


WAITING_FOR_ETL = "Waiting for job default/etl (0 s so far): no such job yet; no matching pod yet"


@pytest.mark.parametrize("first", ["jobs", "pods"])
async def test_a_job_failed_before_the_sensor_started_reports_its_last_pod_whichever_list_answers_first(
    first: str, cluster: FakeCluster, hub_clock: ManualClock, log: TaskLog
) -> None:
    """The pods' and the Jobs' feeds LIST at once; when the Jobs' answer comes first, the Job is
    already Failed while the pods' view is still empty: the cause is still the last pod's.

    Each order is made on purpose: the test opens the later feed first, its LIST fails and it
    backs off on the hub's clock; the trigger shares it and opens the other, which answers; the
    later one lists only when the test ends its backoff (and stays open, read by the test, however
    soon the trigger ends). The test also reads the pods' Events from the start (through a feed of
    its own): the last pod's judge, which may end at once (its pod has failed), shares that feed, so
    its requests do not depend on when the judge ends."""
    last = await run_a_job_that_fails(cluster)
    config = ClusterConfig(kube_config_path=str(cluster.kubeconfig))
    hub = WatchHub.current()
    uid = str((cluster.pod(last) or {})["metadata"]["uid"])
    events = await hub.subscribe(config, "default", last, uid, label_selector="app=etl")
    tests_own = {"pods in all namespaces (app=etl)": WATCHED, "events in all namespaces": WATCHED}
    await made(cluster, tests_own)
    later = "pods" if first == "jobs" else "jobs"
    cluster.add_fault("list", later, 500, times=1)
    later_feed = await hub.follow(config, "default", jobs=later == "jobs")
    tests_own[f"{later} in default"] = ["list 500"]
    await made(cluster, tests_own)
    await hub_clock.wait_for_sleeper(later_than=hub_clock.now())  # the later feed's backoff
    run = Following(following(Target("default", job_name="etl")))
    judged = {**tests_own, f"{first} in default": WATCHED}
    if first == "jobs":
        # The Job has failed and no pod is known: the Job's pods are listed afresh, the last judged.
        judged["reads"] = ["list job etl's pods 200"]
        decided = [WAITING_FOR_ETL, watching(cluster, last)]
    else:
        # Both pods are known: the last is judged (after its last look) and left to the Job, whose
        # state is not known yet.
        judged["reads"] = look(last)
        decided = [
            WAITING_FOR_ETL,
            watching(cluster, last),
            left_to_the_job(last, f"container.exit_code ({EXIT_3})"),
        ]
    await made(cluster, judged)
    await log.says(decided[-1])
    assert log.decisions() == decided
    assert run.events == []
    hub_clock.advance(BACKOFF_CAP)
    event = await run.finish(within=20)
    assert_the_cause_of_the_last_pod(event, cluster, last)
    # The later feed lists and watches; the other read follows.
    after = look(last) if first == "jobs" else ["list job etl's pods 200"]
    await made(
        cluster,
        {**judged, f"{later} in default": ["list 500", *WATCHED], "reads": [*judged["reads"], *after]},
    )
    await later_feed.close()
    await events.close()


async def test_a_job_s_failure_seen_before_its_last_pod_reports_that_pod(
    cluster: FakeCluster, hub_clock: ManualClock, log: TaskLog
) -> None:
    """Two watches deliver independently: here the pods' watch lags behind the Jobs', so the Job's
    Failed condition arrives before its pods do. The cause is still the last pod's."""
    run = Following(following(Target("default", job_name="etl")))
    feeds = {"pods in default": WATCHED, "jobs in default": WATCHED}
    await made(cluster, feeds)
    # The pods' watch is cut; it waits to reconnect (on the hub's clock) while the Job runs its
    # two pods and fails.
    cluster.add_fault("watch", "pods", 500, times=None)
    cluster.drop_watches("pods", reset=True)
    await hub_clock.wait_for_sleeper(later_than=hub_clock.now())
    last = await run_a_job_that_fails(cluster)
    # The Job's failure arrives while no pod is known: the Job's pods are listed afresh and the
    # last one is judged; its judge waits for the pod's state from the pods' feed (whose GET of a
    # pod it lacks would come after 2 s on the hub's clock, which only moves by BACKOFF_CAP here).
    judged = {**feeds, "events in all namespaces": WATCHED, "reads": ["list job etl's pods 200"]}
    await made(cluster, judged)
    await log.says(watching(cluster, last))
    assert log.decisions() == [WAITING_FOR_ETL, watching(cluster, last)]
    assert run.events == []
    cluster.clear_faults()
    hub_clock.advance(BACKOFF_CAP)
    assert_the_cause_of_the_last_pod(await run.finish(within=20), cluster, last)
    # The pods' watch resumed once, from where it was cut; the last pod's last look.
    assert requests(cluster) == {
        **judged,
        "pods in default": [*WATCHED, "watch 200"],
        "reads": ["list job etl's pods 200", *look(last)],
    }


async def test_a_selector_on_a_jobs_pods_is_judged_as_the_job(cluster: FakeCluster, log: TaskLog) -> None:
    run = Following(following(Target("default", label_selector="app=etl")))
    await made(cluster, {"pods in default (app=etl)": WATCHED})
    create(cluster, "job", job("etl", "fails:1", backoff_limit=2))
    # Its first pod belongs to the Job: the Jobs' feed opens; the pod's judge reads the
    # namespace's pods and the Events.
    judged = {"pods in default (app=etl)": WATCHED, "jobs in default": WATCHED}
    judged |= {"pods in default": WATCHED, "events in all namespaces": WATCHED}
    await made(cluster, judged)
    decided = [
        "Waiting for the newest pod matching 'app=etl' in namespace default (0 s so far):"
        " no matching pod yet",
        watching(cluster, created(cluster)[0]),
    ]
    # The first two pods fail; each is left to the Job, which replaces it (its judge, the last
    # reader of the namespace's pods' and the Events' feeds, ends; the next one's starts them).
    for n in range(2):
        failed = created(cluster)[n]
        run_until(cluster, lambda c, failed=failed: phase(c, failed) == "Failed")
        decided.append(left_to_the_job(failed, f"container.exit_code ({EXIT_3})"))
        await log.says(decided[-1])
        run_until(cluster, lambda c, n=n: len(created(c)) == n + 2)
        judged["pods in default"] = judged["events in all namespaces"] = WATCHED * (n + 2)
        judged["reads"] = [*judged.get("reads", []), *look(failed)]
        await made(cluster, judged)
        decided.append(watching(cluster, created(cluster)[n + 1]))
    assert log.decisions() == decided
    run_until(cluster, job_failed)
    event = await run.finish(within=20)
    last = created(cluster)[2]
    assert event.job == "etl" and event.event is not None and event.event.pod_name == last
    verdict = event.event.verdict
    assert (verdict.outcome, verdict.reason) == (Outcome.RETRY, Reason.CONTAINER_EXIT_CODE)
    assert verdict.message == (
        f"job default/etl failed ({BACKOFF_LIMIT}) after 3 failed pod(s); its last pod {last}: {EXIT_3}"
    )
    assert len(cluster.pods()) == 3
    final = requests(cluster)
    reads = final.pop("reads")
    assert final == {k: v for k, v in judged.items() if k != "reads"}
    # The last pod's last look and the LIST of the failed Job's pods, one each, in either order
    # (the pods' and the Jobs' watches deliver the pod's failure and the Job's independently).
    assert reads[:4] == judged["reads"]
    assert sorted(reads[4:]) == sorted([*look(last), "list job etl's pods 200"])


async def test_says_what_it_waits_for_once_a_minute_and_times_out(
    cluster: FakeCluster, trigger_clock: ManualClock, log: TaskLog
) -> None:
    start = trigger_clock.now()
    target = Target("default", pod_name="never", deadline=start + 150)
    run = Following(following(target))
    await made(cluster, {"pods in default": WATCHED})
    await trigger_clock.wait_for_sleeper(start + PROGRESS_EVERY)
    assert log.decisions() == [
        "Waiting for pod default/never (0 s so far, timeout in 150 s): no such pod yet"
    ]
    trigger_clock.advance(PROGRESS_EVERY)
    await trigger_clock.wait_for_sleeper(start + 2 * PROGRESS_EVERY)
    assert log.decisions()[1:] == [
        "Waiting for pod default/never (60 s so far, timeout in 90 s): no such pod yet"
    ]
    trigger_clock.advance(PROGRESS_EVERY)
    await trigger_clock.wait_for_sleeper(start + 150)
    assert log.decisions()[2:] == [
        "Waiting for pod default/never (120 s so far, timeout in 30 s): no such pod yet"
    ]
    trigger_clock.advance(30)
    event = await run.finish(within=10)
    assert event.timed_out and event.event is None
    assert event.message == "timed out after 150 s waiting for pod default/never: no such pod yet"
    assert len(log.decisions()) == 3
    assert requests(cluster) == {"pods in default": WATCHED}  # all through the watch: not one read


def test_the_target_round_trips_through_the_triggers_kwargs() -> None:
    target = Target("default", job_name="etl", deadline=1_800_000_000.0)
    classpath, kwargs = following(target).serialize()
    assert kwargs["target"] == {
        "namespace": "default",
        "pod_name": None,
        "label_selector": None,
        "job_name": "etl",
        "deadline": 1_800_000_000.0,
        "since": None,
    }
    assert PodTargetTrigger(**kwargs).serialize() == (classpath, kwargs)


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({}, "exactly one of pod_name, label_selector and job_name"),
        ({"pod_name": "a", "job_name": "b"}, "exactly one of"),
    ],
)
def test_a_target_names_exactly_one_thing(fields: dict[str, str], complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        Target("default", **fields)


def test_the_pods_of_a_target_are_judged_as_pods_the_task_does_not_own() -> None:
    follower = following(Target("default", pod_name="x"), poll_interval=3)
    judge = follower._judge("x", "uid-x")
    _, kwargs = judge.serialize()
    assert (kwargs["owned"], kwargs["identity"], kwargs["poll_interval"]) == (False, None, 3.0)


def test_a_job_pod_taken_away_by_the_cluster_is_left_to_the_job_even_before_it_has_failed() -> None:
    """An eviction's relaunch verdict comes while the pod is still Running (DisruptionTarget, then
    the graceful stop): the Job counts that pod as failed and replaces it, so it is not the end."""
    from airflow_k8s_retry.classification.model import Verdict
    from airflow_k8s_retry.triggers.target import _going

    running = {"metadata": {"name": "etl-a"}, "status": {"phase": "Running"}}
    relaunch = Verdict(outcome=Outcome.RELAUNCH, reason=Reason.NODE_DISRUPTION, message="m", rule="r")
    stuck = Verdict(outcome=Outcome.RETRY, reason=Reason.IMAGE_NOT_FOUND, message="m", rule="r")
    assert _going(running, relaunch)
    assert _going(None, stuck)  # gone
    assert _going({**running, "metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}, stuck)
    assert _going({"status": {"phase": "Failed"}}, stuck)
    assert not _going({"status": {"phase": "Pending"}}, stuck)  # never ran: the Job will not replace it
