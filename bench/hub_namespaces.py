"""One triggerer's watch hub following one pod in each of many namespaces (not part of ``make bench``).

Usage::

    .venv/bin/python -m bench.hub_namespaces                       # 500 namespaces, both scopes
    .venv/bin/python -m bench.hub_namespaces --namespaces 200 --scope namespace

For each scope (``cluster``: one cluster-wide watch; ``namespace``: one per namespace, as under a
namespaced Role) it reports: how long until every subscriber had its pod, the watches open on the
server, direct GETs (the last look, on_kill's DELETE path) while every watch is open, and how long
a change (the pod deleted) takes to reach its subscriber in a sample of namespaces. Then the
Events feed's re-list after a 410 with 5,000 followed pods (how long it blocks the event loop).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

from kubernetes.config import new_client_from_config

from airflow_k8s_retry.kube.config import ClusterConfig
from airflow_k8s_retry.kube.hub import WATCH_SCOPE_ENV, PodSubscription, WatchHub
from airflow_k8s_retry.kube.naming import MANAGED_SELECTOR, TryIdentity
from airflow_k8s_retry_testing import FakeCluster
from tools.airflow_home import use_throwaway_airflow_home

# A throw-away Airflow home, removed at exit, before anything imports Airflow (the modules above
# do not).
use_throwaway_airflow_home("airflow-k8s-retry-bench-")

SCENARIO = {"images": {"long:1": {"run": {"exit_code": 0, "duration_seconds": 1_000_000}}}}


def make_pods(cluster: FakeCluster, namespaces: int) -> dict[str, tuple[str, str]]:
    from kubernetes import client as k

    api_client = new_client_from_config(config_file=str(cluster.kubeconfig), persist_config=False)
    api = k.CoreV1Api(api_client)
    pods = {}
    for i in range(namespaces):
        namespace = f"ns-{i}"
        cluster.add_namespace(namespace)
        identity = TryIdentity("bench", f"task{i}", "run-1")
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": identity.pod_name(), "labels": identity.labels()},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "base", "image": "long:1"}]},
        }
        created = api.create_namespaced_pod(namespace, body)
        pods[namespace] = (created.metadata.name, created.metadata.uid)
    api_client.close()
    return pods


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def measure(cluster: FakeCluster, pods: dict[str, tuple[str, str]], samples: int) -> dict[str, Any]:
    config = ClusterConfig(kube_config_path=str(cluster.kubeconfig))
    hub = WatchHub.current()
    started = time.perf_counter()
    subs: dict[str, PodSubscription] = {}
    for namespace, (name, uid) in pods.items():
        subs[namespace] = await hub.subscribe(config, namespace, name, uid, label_selector=MANAGED_SELECTOR)
    got = await asyncio.gather(*(s.wait(within=120) for s in subs.values()))
    all_delivered = time.perf_counter() - started
    feeds = hub.stats()
    expected = len({(f.kind, f.namespace) for f in feeds})
    await asyncio.to_thread(
        cluster.wait_for, lambda c: len(c._call(lambda: list(c.store.watchers))) >= expected, 60
    )
    watches = len(cluster._call(lambda: list(cluster.store.watchers)))
    gets = []
    async with hub.client(config) as kube:
        for namespace in list(pods)[:20]:
            t = time.perf_counter()
            await kube.read_pod(namespace, pods[namespace][0])
            gets.append(time.perf_counter() - t)
    step = max(1, len(pods) // samples)
    sampled = list(pods)[::step][:samples]
    for namespace in sampled:
        subs[namespace].drain()
    delays = []
    for namespace in sampled:
        t = time.perf_counter()
        await asyncio.to_thread(cluster.disrupt, pods[namespace][0], "delete", namespace)
        assert await subs[namespace].wait(within=60), f"no news from {namespace}"
        delays.append(time.perf_counter() - t)
    for sub in subs.values():
        await sub.close()
    return {
        "delivered": sum(got),
        "all_delivered_s": all_delivered,
        "feeds": len(feeds),
        "watches_open": watches,
        "get_p50_ms": 1000 * statistics.median(gets),
        "get_max_ms": 1000 * max(gets),
        "change_p50_ms": 1000 * statistics.median(delays),
        "change_max_ms": 1000 * max(delays),
        "requests": dict(sorted(cluster.request_counts().items())),
    }


def events_relist(pods: int, events_per_pod: int) -> float:
    """Seconds one Events re-list blocks the loop with ``pods`` followed pods."""
    from airflow_k8s_retry.kube.feed_types import EventFeed
    from airflow_k8s_retry.kube.watch_settings import HubSettings

    async def run() -> float:

        class Sub:
            def __init__(self, name: str) -> None:
                self.namespace, self.name, self.uid, self.n = "ns", name, f"uid-{name}", 0

            @property
            def key(self) -> tuple[str, str]:
                return (self.namespace, self.name)

            poll_interval = 10.0

            def offer_event(self, event: Any) -> None:
                self.n += 1

        feed = EventFeed(conn=None, namespace="ns", settings=HubSettings())  # type: ignore[arg-type]
        subs = [Sub(f"pod-{i}") for i in range(pods)]
        for sub in subs:
            feed.add(sub)  # type: ignore[arg-type]
        items = [
            {
                "metadata": {
                    "name": f"pod-{i}.{j:04x}",
                    "namespace": "ns",
                    "resourceVersion": str(i * 10 + j),
                },
                "involvedObject": {"kind": "Pod", "name": f"pod-{i}", "uid": f"uid-pod-{i}"},
                "lastTimestamp": f"2024-01-01T00:{(i // 60) % 60:02d}:{i % 60:02d}Z",
                "reason": "Pulled",
            }
            for i in range(pods)
            for j in range(events_per_pod)
        ]
        t = time.perf_counter()
        feed._resync(items)
        took = time.perf_counter() - t
        assert all(sub.n == events_per_pod for sub in subs)
        return took

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespaces", type=int, default=500)
    parser.add_argument("--samples", type=int, default=20, help="namespaces whose change delay is timed")
    parser.add_argument("--scope", choices=("cluster", "namespace", "both"), default="both")
    args = parser.parse_args()
    scopes = ("cluster", "namespace") if args.scope == "both" else (args.scope,)
    for scope in scopes:
        os.environ[WATCH_SCOPE_ENV] = scope
        with FakeCluster(SCENARIO, time_scale=0.01) as cluster:
            pods = make_pods(cluster, args.namespaces)
            result = asyncio.run(measure(cluster, pods, args.samples))
        shown = {k: v for k, v in result.items() if k != "requests"}
        figures = ", ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items())
        print(f"scope={scope} namespaces={args.namespaces}: {figures}")
        print(f"  requests: {result['requests']}")
    for pods in (500, 5000):
        print(f"events re-list, {pods} followed pods x 5 events: {events_relist(pods, 5):.3f} s")


if __name__ == "__main__":
    main()
