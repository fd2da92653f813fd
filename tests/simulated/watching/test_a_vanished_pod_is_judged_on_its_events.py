"""A pod that vanished is judged on its Events, read once the Events feed has caught up.

A pod the trigger first sees gone (or loses while its feed could not see it) leaves nothing on the
pod to say why: only its Events (``Preempted``, a lost node's) tell a disruption, which costs no
try, from a deletion by someone else, which does. When the Events feed is behind at that moment
(its first LIST, or a re-list after its watch expired, answered with an error and retried after a
backoff), the trigger waits for it (at most ``EVENTS_LIST_WAIT`` on its clock) and judges with
what it lists. Chaos seed 413 judged a preempted pod ``pod.deleted_externally`` this way, and seed
456 too when a momentary 403 on the Events' LIST was taken for missing RBAC.

Nothing here waits on real time: the cluster and the hub's feeds wait on manual clocks only the
test moves, and so does the trigger.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from airflow_k8s_retry.classification import Outcome, Reason
from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.config import ClusterConfig
from airflow_k8s_retry.kube.hub import WatchHub
from airflow_k8s_retry.kube.naming import MANAGED_SELECTOR, TryIdentity
from airflow_k8s_retry.kube.subscriptions import EVENTS_LIST_WAIT
from airflow_k8s_retry.kube.watch_settings import HubSettings
from airflow_k8s_retry.triggers.pod import PodEvent
from airflow_k8s_retry_testing import FakeCluster
from tests.support.feeds import feed_requests, hold_hub, mark, until_watching, woken
from tests.support.lab import Run, create_pod, pod_body, trigger_for, use_cluster

SCENARIO = {"images": {"long:1": {"pull": "ok", "run": {"exit_code": 0, "duration_seconds": 100_000}}}}
#: Simulated seconds from a pod's creation until it runs, and for a preempted one to stop and go.
STARTED, STOPPED = 0.3, 1.0
#: The hub's timings here: the pods feed reads a pod missing from its LIST 0.1 s later, and a feed
#: whose LIST failed twice waits 10-20 s before the next, so the pod is known gone well before.
CONFIRM_DELAY, BACKOFF_BASE = 0.1, 10.0


def preempted_before_any_look(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, dag_id: str
) -> tuple[dict[str, Any], TryIdentity]:
    """A running pod of ``dag_id``'s try, preempted and gone before any trigger looked; its
    Preempted Event stays. The pod as created, and the try."""
    use_cluster(monkeypatch, cluster)
    identity = TryIdentity(dag_id, "task", "run-1")
    pod = create_pod(cluster, pod_body(identity, "long:1"))
    name = pod["metadata"]["name"]
    cluster.advance(STARTED)
    cluster.disrupt(name, "preempt")
    cluster.advance(STOPPED)
    assert cluster.pod(name) is None
    assert "Preempted" in [e["reason"] for e in cluster.events(involved=name)]
    return pod, identity


async def judged_once_the_events_are_listed(
    run: Run, hub_clock: ManualClock, trigger_clock: ManualClock, relist_at: float
) -> PodEvent:
    """The trigger's event, once the Events feed lists again at ``relist_at`` (its backoff's end)."""
    # The pods LIST lacks the pod: after its confirm_delay the feed reads it (404) and says gone.
    hub_clock.advance(CONFIRM_DELAY)
    await woken(hub_clock)
    # The trigger waits for the Events feed, on its own clock, before it judges the vanished pod.
    await trigger_clock.wait_for_sleeper(trigger_clock.now() + EVENTS_LIST_WAIT)
    assert run.events == []
    hub_clock.set(relist_at)
    return await run.finish(within=30)


@pytest.mark.fake_cluster(SCENARIO, clock="manual")
async def test_a_pod_preempted_before_the_trigger_looked_relaunches_once_the_events_are_listed(
    fake_cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    trigger_clock: ManualClock,
    hub_settings: Callable[..., HubSettings],
) -> None:
    hub_clock = hold_hub(hub_settings, confirm_delay=CONFIRM_DELAY, backoff_base=BACKOFF_BASE)
    pod, identity = preempted_before_any_look(fake_cluster, monkeypatch, "preempted")
    # The Events feed's LIST is answered 410 twice (a LIST whose continue token expired): it lists
    # again at once, then backs off.
    fake_cluster.add_fault(verb="list", resource="events", status=410, times=2)
    run = Run(trigger_for(pod, identity)).start()
    relist_at = await hub_clock.wait_for_sleeper(later_than=hub_clock.now() + 1)
    listed = [(verb, status) for verb, _, status, _ in feed_requests(fake_cluster, "events")]
    assert listed == [("list", 410)] * 2
    event = await judged_once_the_events_are_listed(run, hub_clock, trigger_clock, relist_at)
    assert (event.verdict.outcome, event.verdict.reason) == (Outcome.RELAUNCH, Reason.NODE_DISRUPTION)
    # Judged on the LIST that came through (its watch opens after it, on the loop's next turn).
    listed = [(verb, status) for verb, _, status, _ in feed_requests(fake_cluster, "events")]
    assert listed[:3] == [("list", 410), ("list", 410), ("list", 200)]


@pytest.mark.fake_cluster(SCENARIO, clock="manual")
async def test_a_momentary_403_on_the_events_list_does_not_judge_a_preempted_pod_deleted(
    fake_cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    trigger_clock: ManualClock,
    hub_settings: Callable[..., HubSettings],
) -> None:
    hub_clock = hold_hub(hub_settings, confirm_delay=CONFIRM_DELAY, backoff_base=BACKOFF_BASE)
    pod, identity = preempted_before_any_look(fake_cluster, monkeypatch, "denied")
    # An authorizer that denies for a moment (a webhook's timeout): the cluster-wide LIST of Events
    # is refused (the feed moves to the namespace), then the namespace's, once.
    fake_cluster.add_fault(verb="list", resource="events", status=403, times=2)
    run = Run(trigger_for(pod, identity)).start()
    relist_at = await hub_clock.wait_for_sleeper(later_than=hub_clock.now() + 1)
    listed = [(verb, where, status) for verb, where, status, _ in feed_requests(fake_cluster, "events")]
    assert listed == [("list", "cluster", 403), ("list", "default", 403)]
    # Not taken for RBAC yet: the feed asks again after its backoff, and the trigger waits for it.
    event = await judged_once_the_events_are_listed(run, hub_clock, trigger_clock, relist_at)
    assert (event.verdict.outcome, event.verdict.reason) == (Outcome.RELAUNCH, Reason.NODE_DISRUPTION)
    listed = [(verb, where, status) for verb, where, status, _ in feed_requests(fake_cluster, "events")]
    assert listed[2] == ("list", "default", 200)


@pytest.mark.fake_cluster(SCENARIO, clock="manual")
async def test_the_events_are_behind_from_a_lost_watch_until_the_relist_is_in(
    fake_cluster: FakeCluster, hub_settings: Callable[..., HubSettings]
) -> None:
    # The window a vanished pod's verdict waits out: its Events feed's watch expired (410) and its
    # LIST failed, so Events created meanwhile are not in until the LIST after the backoff.
    hub_clock = hold_hub(hub_settings, backoff_base=BACKOFF_BASE)
    identity = TryIdentity("behind", "task", "run-1")
    pod = create_pod(fake_cluster, pod_body(identity, "long:1"))
    meta = pod["metadata"]
    config = ClusterConfig(kube_config_path=str(fake_cluster.kubeconfig))
    sub = await WatchHub.current().subscribe(
        config, "default", meta["name"], meta["uid"], label_selector=MANAGED_SELECTOR
    )
    await until_watching(fake_cluster)
    assert not sub.events_pending
    fake_cluster.add_fault(verb="watch", resource="events", status=410, times=1)
    fake_cluster.add_fault(verb="list", resource="events", status=500, times=1)
    fake_cluster.drop_watches("events")
    # The cut watch brought nothing: the feed waits a backoff before it watches again.
    rewatch_at = await hub_clock.wait_for_sleeper(later_than=hub_clock.now())
    assert not sub.events_pending  # nothing came meanwhile: its watch resumes where it was
    hub_clock.set(rewatch_at)
    # Watched again: 410, so it lists again, after a backoff (the cut watch's counts).
    relist_at = await hub_clock.wait_for_sleeper(later_than=hub_clock.now())
    assert sub.events_pending
    hub_clock.set(relist_at)
    # Listed: 500; it backs off before the next LIST, and is still behind.
    relist_at = await hub_clock.wait_for_sleeper(later_than=hub_clock.now())
    assert sub.events_pending
    since = mark(fake_cluster)
    hub_clock.set(relist_at)
    await until_watching(fake_cluster, ("events",), since=since)
    assert not sub.events_pending
    assert [(verb, status) for verb, _, status, _ in feed_requests(fake_cluster, "events")][-4:] == [
        ("watch", 410),
        ("list", 500),
        ("list", 200),
        ("watch", 200),
    ]
    await sub.close()
