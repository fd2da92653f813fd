"""The shared watch loses nothing and repeats nothing through 410 Gone, 5xx, 429, dropped connections
and RBAC that forbids watching.

Each test follows one pod's life with a trigger and, on the same shared feed, a plain subscription
that records every change it is given. Nothing waits on real time, so every step has one outcome
whatever the machine's load: the cluster runs on a manual clock (its kubelet acts only when the test
advances it), the hub's feeds wait (reconnect backoff, polling) on a ``ManualClock`` the test
advances one wait at a time, and the trigger's clock never moves, so it acts only on what the feed
gives it. The tests assert exactly which requests the feed made, from the simulator's audit, and
exactly which versions of the pod it delivered, against the simulator's history.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from airflow_k8s_retry.classification import Outcome
from airflow_k8s_retry.kube.aio import AsyncKube
from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.config import ClusterConfig
from airflow_k8s_retry.kube.hub import WatchHub
from airflow_k8s_retry.kube.naming import MANAGED_SELECTOR, TryIdentity
from airflow_k8s_retry.kube.watch_settings import HubSettings
from airflow_k8s_retry_testing import FakeCluster
from tests.support.feeds import Recorder, hold_hub, through_refusals
from tests.support.lab import Run, cluster_reaches, create_pod, pod_body, trigger_for, use_cluster

#: The pod is scheduled and started within half a simulated second, then runs for 30.
SCENARIO = {"images": {"job:1": {"run": {"exit_code": 0, "duration_seconds": 30}}}}
#: Simulated seconds: the pod is being created (ContainerCreating) after the first, Running after
#: both; it has Succeeded RUN seconds later.
CREATING, STARTING, RUN = 0.1, 0.4, 30.0
#: The hub's longest reconnect delay: advancing its clock this far ends any one backoff.
BACKOFF_CAP = 0.2
#: The polling feeds' interval (on the hub's clock).
POLL = 5.0
#: A server-side watch timeout the cluster's clock never reaches here: watches end when a test
#: drops them.
WATCH_TIMEOUT = 600

#: The triggers' clock is never advanced: no grace timer or direct read of the trigger's own adds a
#: request.
pytestmark = pytest.mark.usefixtures("trigger_clock")


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster(SCENARIO, clock="manual") as running:
        yield running


@pytest.fixture
def hub_clock(hub_settings: Callable[..., HubSettings]) -> ManualClock:
    return hold_hub(hub_settings, backoff_base=0.05, backoff_cap=BACKOFF_CAP)


@dataclass
class Followed:
    """A pod, the recorder of its feed and the trigger following it."""

    cluster: FakeCluster
    name: str
    uid: str
    recorder: Recorder
    run: Run
    #: The version the recorder was first given (the pod as it was created).
    created: int

    def version(self) -> int:
        pod = self.cluster.pod(self.name)
        assert pod is not None
        return int(pod["metadata"]["resourceVersion"])

    async def annotate(self, times: int) -> list[int]:
        """Change the pod ``times`` times (as the cluster's admin); the new versions."""
        kube = await AsyncKube.connect(ClusterConfig(kube_config_path=str(self.cluster.kubeconfig)))
        try:
            versions = []
            for n in range(times):
                patched = await kube.patch_pod_annotations("default", self.name, {"example.com/step": str(n)})
                versions.append(int(patched["metadata"]["resourceVersion"]))
            return versions
        finally:
            await kube.close()

    async def live_out(self) -> None:
        """Let the pod run to its end on a healthy watch: every change is delivered, one step at a
        time; the trigger judges it a success."""
        for step in (CREATING, STARTING, RUN):
            self.cluster.advance(step)
            await self.recorder.until(self.version())
        pod = self.cluster.pod(self.name)
        assert pod is not None and pod["status"]["phase"] == "Succeeded"
        await self.finish()

    async def finish(self) -> None:
        await self.recorder.sub.close()
        event = await self.run.finish(within=30)
        assert event.verdict.outcome is Outcome.SUCCEED

    async def history(self, since: int) -> list[int]:
        """Every version of the pod after ``since``, from a fresh watch over the cluster's history."""
        final = self.version()
        kube = await AsyncKube.connect(ClusterConfig(kube_config_path=str(self.cluster.kubeconfig)))
        try:
            versions: list[int] = []
            stream = kube.watch_pods("default", resource_version=str(since), timeout_seconds=WATCH_TIMEOUT)
            async with contextlib.aclosing(stream):  # type: ignore[type-var]
                async for event in stream:
                    meta = event.object.get("metadata") or {}
                    if meta.get("uid") == self.uid and event.type in ("ADDED", "MODIFIED"):
                        versions.append(int(meta["resourceVersion"]))
                        if versions[-1] == final:
                            return versions
        finally:
            await kube.close()
        raise AssertionError(f"the history ended before the pod's version {final}: {versions}")


async def follow(
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
    trigger_clock: ManualClock,
    kubeconfig: Any = None,
    poll_interval: float = POLL,
) -> Followed:
    """Create a pod, follow it with a trigger and a recorder on one feed; return once the recorder
    has the pod as created and the trigger waits (it has subscribed and taken the pod in)."""
    use_cluster(monkeypatch, cluster, kubeconfig)
    identity = TryIdentity("faults", "task", "run-1")
    pod = create_pod(cluster, pod_body(identity, "job:1"))
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    config = ClusterConfig(kube_config_path=str(kubeconfig or cluster.kubeconfig))
    sub = await WatchHub.current().subscribe(
        config, "default", name, uid, label_selector=MANAGED_SELECTOR, poll_interval=poll_interval
    )
    recorder = Recorder(sub)
    run = Run(trigger_for(pod, identity, poll_interval=poll_interval)).start()
    created = int(pod["metadata"]["resourceVersion"])
    assert await recorder.until(created) == [created]
    await trigger_clock.wait_for_sleeper(within=30)
    return Followed(cluster, name, uid, recorder, run, created)


def pod_requests(cluster: FakeCluster, verb: str) -> list[tuple[str, int | str, str | None]]:
    """The feed's pod requests of ``verb`` so far, in order: (where: "cluster" or the namespace,
    the injected fault or else the status, the resourceVersion asked for). Its LISTs and WATCHes
    select the managed pods; the test's own reads of the history do not."""
    found = []
    for record in cluster.audit_records():
        if record.get("kind") != "request" or record["verb"] != verb or record["resource"] != "pods":
            continue
        query = parse_qs(urlsplit(record["request_uri"]).query)
        if verb in ("list", "watch") and query.get("labelSelector") != [MANAGED_SELECTOR]:
            continue
        outcome = record.get("fault", record["status"])
        found.append((record["namespace"] or "cluster", outcome, (query.get("resourceVersion") or [None])[0]))
    return found


async def watching(cluster: FakeCluster) -> str | None:
    """Until the feed's first watch is open; the version it watches from (its LIST's)."""
    await cluster_reaches(cluster, lambda c: pod_requests(c, "watch") != [], 30)
    ((_, status, listed),) = pod_requests(cluster, "watch")
    assert status == 200 and listed is not None
    return listed


def feed_counts(kind: str = "pods") -> dict[str, int]:
    """What the hub's one feed of ``kind`` has done (its requests and relists)."""
    (stats,) = [s for s in WatchHub.current().stats() if s.kind == kind]
    return stats.counts


async def backs_off(hub_clock: ManualClock) -> None:
    """Until a feed waits on the hub's clock for a time still ahead (not one an advance just woke)."""
    await hub_clock.wait_for_sleeper(later_than=hub_clock.now(), within=30)


def reconnect(hub_clock: ManualClock) -> None:
    """End the pods feed's backoff: it makes its next request."""
    hub_clock.advance(BACKOFF_CAP)


#: HTTP requests per try of the feed: aiohttp sends an idempotent request once more by itself when
#: the server drops the connection without an answer.
SENT_PER_TRY = {500: 1, 429: 1, "reset": 2}


@pytest.mark.parametrize("status", [500, 429, "reset"])
async def test_transient_errors_resume_without_loss_or_duplicate(
    status: int | str,
    cluster: FakeCluster,
    hub_clock: ManualClock,
    trigger_clock: ManualClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pod = await follow(cluster, monkeypatch, trigger_clock)
    listed = await watching(cluster)
    # The watch is cut and fails from its next request on: the feed backs off and reconnects
    # exactly once per step of its clock, each time in vain.
    cluster.add_fault(verb="watch", resource="pods", status=status, times=None)
    cluster.drop_watches("pods", reset=True)
    await backs_off(hub_clock)
    # While it is down, the pod is scheduled and started, and annotated three times.
    cluster.advance(CREATING + STARTING)
    changed_while_down = await pod.annotate(3)
    for _ in range(3):
        reconnect(hub_clock)
        await backs_off(hub_clock)
    assert feed_counts()["watch"] == 1 + 3
    failed = [("cluster", status, listed)] * (3 * SENT_PER_TRY[status])
    assert pod_requests(cluster, "watch") == [("cluster", 200, listed), *failed]
    # Back: one more request resumes the watch from the version it had (no re-list), and every
    # change made meanwhile arrives, in order, once.
    cluster.clear_faults()
    reconnect(hub_clock)
    down = await pod.recorder.until(changed_while_down[-1])
    assert pod_requests(cluster, "watch") == [("cluster", 200, listed), *failed, ("cluster", 200, listed)]
    assert pod_requests(cluster, "list") == [("cluster", 200, None)]
    assert feed_counts()["watch"] == 1 + 3 + 1
    assert down == await pod.history(pod.created)
    assert set(changed_while_down) < set(down)  # with the kubelet's changes
    await pod.live_out()
    assert pod.recorder.versions == [pod.created, *await pod.history(pod.created)]


async def test_410_gone_relists_and_delivers_the_latest_state_once(
    cluster: FakeCluster,
    hub_clock: ManualClock,
    trigger_clock: ManualClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pod = await follow(cluster, monkeypatch, trigger_clock)
    listed = await watching(cluster)
    # The watch is cut; while the feed backs off the pod is scheduled and annotated twice; its
    # reconnection is answered 410 Gone. After failing, the feed backs off once more, then lists.
    cluster.add_fault(verb="watch", resource="pods", status=410, times=1)
    cluster.drop_watches("pods", reset=True)
    await backs_off(hub_clock)
    cluster.advance(CREATING)
    changed_while_down = await pod.annotate(2)
    latest = pod.version()
    assert latest == changed_while_down[-1]
    reconnect(hub_clock)
    await backs_off(hub_clock)
    assert feed_counts()["relist_410"] == 1
    assert pod_requests(cluster, "watch") == [("cluster", 200, listed), ("cluster", 410, listed)]
    reconnect(hub_clock)
    # Of what changed meanwhile, only the latest state is given (a listing has nothing else), once.
    assert await pod.recorder.until(latest) == [latest]
    await cluster_reaches(cluster, lambda c: len(pod_requests(c, "watch")) == 3, 30)
    relisted_at = str(cluster.resource_version)
    assert pod_requests(cluster, "list") == [("cluster", 200, None)] * 2
    assert pod_requests(cluster, "watch")[2] == ("cluster", 200, relisted_at)
    # A watch that was delivering when it got 410 lists again at once, without a wait; the
    # listing repeats nothing the subscription already has.
    cluster.advance(STARTING)
    running = await pod.recorder.until(pod.version())
    assert running == await pod.history(latest)
    cluster.add_fault(verb="watch", resource="pods", status=410, times=1)
    cluster.drop_watches("pods")
    await cluster_reaches(cluster, lambda c: len(pod_requests(c, "watch")) == 5, 30)
    assert feed_counts()["relist_410"] == 2
    assert pod_requests(cluster, "list") == [("cluster", 200, None)] * 3
    assert pod.recorder.take() == []
    await pod.live_out()
    assert pod.recorder.versions == [pod.created, latest, *running, *await pod.history(running[-1])]


async def test_a_watch_behind_compacted_history_relists(
    cluster: FakeCluster,
    hub_clock: ManualClock,
    trigger_clock: ManualClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pod = await follow(cluster, monkeypatch, trigger_clock)
    listed = await watching(cluster)
    # The watch is down while the pod changes; the history is compacted; then the watch is let
    # back: the version it resumes from is gone.
    cluster.add_fault(verb="watch", resource="pods", status=500, times=None)
    cluster.drop_watches("pods", reset=True)
    await backs_off(hub_clock)
    reconnect(hub_clock)
    await backs_off(hub_clock)
    cluster.advance(CREATING)
    await pod.annotate(2)
    latest = pod.version()
    cluster.compact()
    cluster.clear_faults()
    reconnect(hub_clock)  # 410: the feed backs off (it has been failing), then re-lists
    await backs_off(hub_clock)
    assert pod_requests(cluster, "list") == [("cluster", 200, None)]
    assert feed_counts()["relist_410"] == 1
    reconnect(hub_clock)
    assert await pod.recorder.until(latest) == [latest]
    await cluster_reaches(cluster, lambda c: len(pod_requests(c, "watch")) == 4, 30)
    assert pod_requests(cluster, "list") == [("cluster", 200, None)] * 2
    # The third watch was answered 410 (the history it asked for is gone); the fourth watches
    # from the new listing.
    assert pod_requests(cluster, "watch") == [
        ("cluster", 200, listed),
        ("cluster", 500, listed),
        ("cluster", 200, listed),
        ("cluster", 200, str(cluster.resource_version)),
    ]
    await pod.live_out()
    assert pod.recorder.versions == [pod.created, latest, *await pod.history(latest)]


async def poll_steps(
    pod: Followed, hub_clock: ManualClock, count: Callable[[], int], steps: tuple[float, ...]
) -> list[int]:
    """Per step: the cluster advances, then the feeds' poll interval passes. Each poll makes exactly
    one request (``count``) and delivers the pod's version then, if it is new, exactly once.
    Returns the versions the polls found."""
    found = [pod.created]
    for step in steps:
        pod.cluster.advance(step)
        now, before = pod.version(), count()
        hub_clock.advance(POLL)
        await hub_clock.wait_for_sleeper(hub_clock.now() + POLL, count=2, within=30)  # pods and events
        assert count() == before + 1
        assert pod.recorder.take() == ([now] if now != found[-1] else [])
        if now != found[-1]:
            found.append(now)
    return found


#: What each poll finds: being created, running, the same (nothing delivered), succeeded.
POLLED_LIFE = (CREATING, STARTING, 0.0, RUN)


async def test_forbidden_watch_falls_back_to_listing(
    cluster: FakeCluster,
    hub_clock: ManualClock,
    trigger_clock: ManualClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kubeconfig = cluster.restrict("no-watch-token", verbs=["get", "list", "patch"])
    pod = await follow(cluster, monkeypatch, trigger_clock, kubeconfig)
    await hub_clock.wait_for_sleeper(hub_clock.now() + POLL, count=2, within=30)
    # Refused at the cluster scope, then in the namespace: the feed lists every POLL instead.
    listed = pod_requests(cluster, "list")
    assert [(where, status) for where, status, _ in listed] == [
        ("cluster", 200),
        ("default", 200),
        ("default", 200),
    ]
    assert [(where, status) for where, status, _ in pod_requests(cluster, "watch")] == [
        ("cluster", 403),
        ("default", 403),
    ]
    found = await poll_steps(pod, hub_clock, lambda: len(pod_requests(cluster, "list")), POLLED_LIFE)
    assert pod.recorder.versions == found and len(found) == 4  # created, creating, running, done
    await pod.finish()
    assert len(pod_requests(cluster, "list")) == 3 + len(POLLED_LIFE)
    assert pod_requests(cluster, "get") == []


async def test_forbidden_list_falls_back_to_reading_each_pod(
    cluster: FakeCluster,
    hub_clock: ManualClock,
    trigger_clock: ManualClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kubeconfig = cluster.restrict("get-only-token", verbs=["get", "patch"])
    pod = await follow(cluster, monkeypatch, trigger_clock, kubeconfig)
    # The Events cannot be read one by one: their LIST is asked again until it is refused for good.
    await through_refusals(hub_clock, cluster, longest_backoff=BACKOFF_CAP)
    # Both feeds poll (the first step of poll_steps wakes both, and they poll in step after it).
    await hub_clock.wait_for_sleeper(later_than=hub_clock.now(), count=2, within=30)
    assert pod_requests(cluster, "list") == [("cluster", 403, None), ("default", 403, None)]
    assert pod_requests(cluster, "watch") == []
    assert [(where, status) for where, status, _ in pod_requests(cluster, "get")] == [("default", 200)]
    found = await poll_steps(pod, hub_clock, lambda: len(pod_requests(cluster, "get")), POLLED_LIFE)
    assert pod.recorder.versions == found and len(found) == 4  # created, creating, running, done
    await pod.finish()
    assert len(pod_requests(cluster, "get")) == 1 + len(POLLED_LIFE)
