"""How the hub reaches the API: which watches it opens, on which connections, with which credentials.

* One cluster-wide watch when RBAC allows it; one per namespace under a namespaced Role, chosen
  by the API's own 403, with every subscriber kept.
* Watches never take the connections short requests need: with more namespaces than the client's
  pool has connections, every pod is still delivered and a direct GET answers at once.
* A credential plugin that hangs delays only its own cluster, and fails after a time limit, at
  the first load and at a token refresh alike; the plugin is stopped.
* A rotated exec-plugin token is picked up by the next request that gets a 401, also when
  another request reloaded the credentials between its sending and its 401.

Where simulated time is involved the cluster runs on a manual clock (its pods stand still) and the
hub's feeds wait on a clock only the test advances, so the requests asserted are exactly those made.
The credential-plugin tests time real subprocesses instead: no simulated time is involved there.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from airflow_k8s_retry.kube import aio
from airflow_k8s_retry.kube import config as config_module
from airflow_k8s_retry.kube.aio import AsyncKube
from airflow_k8s_retry.kube.clock import ManualClock
from airflow_k8s_retry.kube.config import ClusterConfig
from airflow_k8s_retry.kube.errors import TransportError
from airflow_k8s_retry.kube.hub import WatchHub
from airflow_k8s_retry.kube.naming import MANAGED_SELECTOR, TryIdentity
from airflow_k8s_retry.kube.watch_settings import HubSettings
from airflow_k8s_retry_testing import FakeCluster
from tests.support.feeds import (
    FeedRequest,
    Recorder,
    feed_requests,
    hold_hub,
    mark,
    requests,
    until_watching,
    version,
    woken,
)
from tests.support.lab import cluster_reaches, create_pod, pod_body

LONG = {"images": {"long:1": {"run": {"exit_code": 0, "duration_seconds": 100_000}}}}


def make_pods(cluster: FakeCluster, namespaces: int) -> dict[str, dict[str, Any]]:
    """One labelled pod in each of ``namespaces`` namespaces: namespace -> the pod as created."""
    pods = {}
    for i in range(namespaces):
        namespace = f"ns-{i}"
        cluster.add_namespace(namespace)
        identity = TryIdentity("scope", f"task{i}", "run-1")
        pods[namespace] = create_pod(cluster, pod_body(identity, "long:1"), namespace=namespace)
    return pods


async def subscribe_all(config: ClusterConfig, pods: dict[str, dict[str, Any]]) -> dict[str, Recorder]:
    hub = WatchHub.current()
    subscribed = {}
    for namespace, pod in pods.items():
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        sub = await hub.subscribe(config, namespace, name, uid, label_selector=MANAGED_SELECTOR)
        subscribed[namespace] = Recorder(sub)
    return subscribed


async def delivered_as_created(subs: dict[str, Recorder], pods: dict[str, dict[str, Any]]) -> None:
    """Every subscriber was given its pod as it was created, and nothing else (the pods stand still)."""
    created = {namespace: int(pod["metadata"]["resourceVersion"]) for namespace, pod in pods.items()}
    given = await asyncio.gather(*(subs[namespace].until(version) for namespace, version in created.items()))
    assert dict(zip(created, given, strict=True)) == {
        namespace: [version] for namespace, version in created.items()
    }


async def close_all(subs: dict[str, Recorder]) -> None:
    for recorder in subs.values():
        await recorder.sub.close()


def watched(cluster: FakeCluster, namespaces: list[str]) -> bool:
    """Whether the feeds of each namespace (pods and Events) have a watch answered."""
    return all(
        any(verb == "watch" for verb, *_ in per_namespace(cluster, kind).get(namespace, []))
        for kind in ("pods", "events")
        for namespace in namespaces
    )


def per_namespace(cluster: FakeCluster, kind: str, since: int = 0) -> dict[str, list[FeedRequest]]:
    """The requests of each feed of ``kind``, by the namespace it reads ("cluster": all of them)."""
    found: dict[str, list[FeedRequest]] = {}
    for request in feed_requests(cluster, kind, since):
        found.setdefault(request[1], []).append(request)
    return found


async def test_one_watch_for_every_namespace_when_rbac_allows(held_hub: ManualClock) -> None:
    # The pods stand still (manual clock), the hub's feeds wait on a clock nobody advances.
    with FakeCluster(LONG, clock="manual") as cluster:
        pods = make_pods(cluster, 20)
        listed = str(cluster.resource_version)
        subs = await subscribe_all(ClusterConfig(kube_config_path=str(cluster.kubeconfig)), pods)
        await delivered_as_created(subs, pods)
        feeds = {(s.kind, s.namespace) for s in WatchHub.current().stats()}
        assert feeds == {("pods", None), ("events", None)}
        await until_watching(cluster)
        for kind in ("pods", "events"):
            assert feed_requests(cluster, kind) == [
                ("list", "cluster", 200, None),
                ("watch", "cluster", 200, listed),
            ]
        await close_all(subs)
        assert WatchHub.current().stats() == []


async def test_a_namespaced_role_gets_one_watch_per_namespace(held_hub: ManualClock) -> None:
    with FakeCluster(LONG, clock="manual") as cluster:
        pods = make_pods(cluster, 3)
        # What a RoleBinding per namespace grants: nothing at the cluster scope.
        kubeconfig = cluster.grant(
            "role-only",
            [
                {
                    "verbs": ["get", "list", "watch", "patch"],
                    "resources": ["pods", "events"],
                    "namespaces": list(pods),
                },
            ],
        )
        listed = str(cluster.resource_version)
        config = ClusterConfig(kube_config_path=str(kubeconfig))
        subs = await subscribe_all(config, pods)
        await delivered_as_created(subs, pods)
        feeds = {(s.kind, s.namespace, s.mode) for s in WatchHub.current().stats()}
        assert feeds == {(kind, ns, "watch") for kind in ("pods", "events") for ns in pods}
        # One refused LIST per kind at the cluster scope, then a LIST and a WATCH per namespace.
        await cluster_reaches(cluster, lambda c: watched(c, list(pods)), 30)
        for kind in ("pods", "events"):
            assert per_namespace(cluster, kind) == {
                "cluster": [("list", "cluster", 403, None)],
                **{ns: [("list", ns, 200, None), ("watch", ns, 200, listed)] for ns in pods},
            }
        # A later subscriber goes straight to its namespace's feed: subscribed before the watch can
        # have delivered its new pod, then given it by that watch; when the feed's confirm_delay
        # runs out, it has the pod and reads nothing. No request at all.
        first = mark(cluster)
        identity = TryIdentity("scope", "late", "run-1")
        late = create_pod(cluster, pod_body(identity, "long:1"), namespace="ns-0")
        sub = Recorder(
            await WatchHub.current().subscribe(
                config,
                "ns-0",
                late["metadata"]["name"],
                late["metadata"]["uid"],
                label_selector=MANAGED_SELECTOR,
            )
        )
        created = int(late["metadata"]["resourceVersion"])
        assert await sub.until(created) == [created]
        held_hub.advance(HubSettings().confirm_delay)
        await woken(held_hub)
        assert [s.counts["get"] for s in WatchHub.current().stats() if s.kind == "pods"] == [0] * len(pods)
        assert requests(cluster, first) == [("create", "pods", "ns-0", 201)]
        await sub.sub.close()
        await close_all(subs)


async def test_watches_never_starve_short_requests(hub_settings: Callable[..., HubSettings]) -> None:
    # One watch per namespace (as under a namespaced Role): 120 namespaces hold 240 watches, more
    # than the 100 connections a kubernetes_asyncio client pools by default.
    hold_hub(hub_settings, scope="namespace")
    with FakeCluster(LONG, clock="manual") as cluster:
        pods = make_pods(cluster, 120)
        listed = str(cluster.resource_version)
        config = ClusterConfig(kube_config_path=str(cluster.kubeconfig))
        subs = await subscribe_all(config, pods)
        await delivered_as_created(subs, pods)
        await asyncio.to_thread(
            cluster.wait_for, lambda c: len(c._call(lambda: list(c.store.watchers))) == 2 * len(pods), 30
        )
        await cluster_reaches(cluster, lambda c: watched(c, list(pods)), 30)
        for kind in ("pods", "events"):
            assert per_namespace(cluster, kind) == {
                ns: [("list", ns, 200, None), ("watch", ns, 200, listed)] for ns in pods
            }
        # A direct call (the last look, on_kill's DELETE) is answered while every watch is open.
        first = mark(cluster)
        async with WatchHub.current().client(config) as kube:
            name = pods["ns-0"]["metadata"]["name"]
            pod = await asyncio.wait_for(kube.read_pod("ns-0", name), 5)
        assert pod["metadata"]["name"] == name
        assert requests(cluster, first) == [("get", "pods", "ns-0", 200)]
        # A change in the last namespace still reaches its subscriber through its watch: its
        # deletion, the one change (the pods stand still otherwise).
        last = pods["ns-119"]["metadata"]["name"]
        await asyncio.to_thread(cluster.disrupt, last, "delete", "ns-119")
        deleting = version(cluster, last, "ns-119")
        assert await subs["ns-119"].until(deleting) == [deleting]
        assert (cluster.pod(last, "ns-119") or {})["metadata"].get("deletionTimestamp")
        await close_all(subs)


def write_exec_kubeconfig(cluster: FakeCluster, tmp_path: Path, script: str) -> Path:
    plugin = tmp_path / "credential-plugin"
    plugin.write_text(script)
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    kubeconfig = yaml.safe_load(cluster.kubeconfig.read_text())
    kubeconfig["users"][0]["user"] = {
        "exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": str(plugin)}
    }
    path = tmp_path / "kubeconfig-exec"
    path.write_text(yaml.safe_dump(kubeconfig))
    os.chmod(path, 0o600)
    return path


async def test_a_hanging_credential_plugin_stalls_only_its_own_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(aio, "CONNECT_TIMEOUT", 3.0, raising=False)
    with FakeCluster(LONG, time_scale=0.01) as cluster:
        # The plugin hangs until the test releases it (so that it never outlives the test).
        release = tmp_path / "release"
        script = f"#!/bin/sh\nwhile [ ! -e {release} ]; do sleep 0.1; done\n"
        hanging = write_exec_kubeconfig(cluster, tmp_path, script)
        hub = WatchHub.current()
        stuck = asyncio.ensure_future(
            hub.subscribe(
                ClusterConfig(kube_config_path=str(hanging)), "default", "x", None, label_selector=None
            )
        )
        await asyncio.sleep(0)
        # Another cluster (here: the same server, other credentials) is served meanwhile.
        async with asyncio.timeout(2.5):
            async with hub.client(ClusterConfig(kube_config_path=str(cluster.kubeconfig))) as kube:
                listing = await kube.list_pods("default")
        try:
            assert listing.items == []
            assert not stuck.done()
            assert running(tmp_path / "credential-plugin")
            with pytest.raises(TransportError, match="no credentials after 3 s"):
                await stuck
            # The plugin did not outlive the wait for it.
            await gone(tmp_path / "credential-plugin")
        finally:
            release.touch()


async def test_a_token_refresh_that_hangs_fails_the_request_and_stops_the_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(config_module, "PLUGIN_TIMEOUT", 2.0)
    with FakeCluster(LONG, clock="manual") as cluster:
        # The first run hands out an expired token; every later run (a refresh) hangs.
        ran, release = tmp_path / "ran", tmp_path / "release"
        script = (
            f"#!/bin/sh\nif [ -e {ran} ]; then while [ ! -e {release} ]; do sleep 0.1; done; fi\n"
            f"touch {ran}\n"
            'printf \'{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential",'
            '"status":{"token":"token-a","expirationTimestamp":"2000-01-01T00:00:00Z"}}\'\n'
        )
        path = write_exec_kubeconfig(cluster, tmp_path, script)
        cluster.restrict("token-a")
        kube = await AsyncKube.connect(ClusterConfig(kube_config_path=str(path)))
        try:
            with pytest.raises(TransportError, match="credential plugin gave no credentials after 2 s"):
                await kube.list_pods("default")
            await gone(tmp_path / "credential-plugin")
        finally:
            release.touch()
            await kube.close()


def running(plugin: Path) -> list[psutil.Process]:
    """The live processes running ``plugin``."""
    found = []
    for process in psutil.process_iter():
        try:
            if str(plugin) in process.cmdline() and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.Error:
            continue
    return found


async def gone(plugin: Path, within: float = 10) -> None:
    """Wait until no process runs ``plugin``, then let the loop take in its pipes' ends (so that
    their transports close before the test's loop does)."""
    async with asyncio.timeout(within):
        while True:
            if not running(plugin):
                break
            await asyncio.sleep(0.05)  # processes have no event to await
    await asyncio.sleep(0.2)


def rotating_plugin(cluster: FakeCluster, tmp_path: Path) -> tuple[Path, Path]:
    """A kubeconfig whose exec plugin hands out the token written in a file: (kubeconfig, file).
    The cluster accepts ``token-a``, which the file holds to begin with."""
    token_file = tmp_path / "token"
    script = (
        "#!/bin/sh\n"
        'printf \'{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential",'
        f'"status":{{"token":"%s"}}}}\' "$(cat {token_file})"\n'
    )
    path = write_exec_kubeconfig(cluster, tmp_path, script)
    cluster.restrict("token-a")
    token_file.write_text("token-a")
    return path, token_file


def rotate(cluster: FakeCluster, token_file: Path) -> None:
    """token-a is revoked; the plugin hands out token-b from now on."""
    cluster.restrict("token-b")
    cluster._call(lambda: cluster.api.rules.pop("token-a"))
    token_file.write_text("token-b")


def requests_since(cluster: FakeCluster, first: int) -> list[tuple[str, str, int]]:
    """(verb, resource, status) of every request from the ``first``-th audit record on."""
    return [
        (r["verb"], r["resource"], r["status"])
        for r in cluster.audit_records()[first:]
        if r.get("kind") == "request"
    ]


async def test_a_rotated_exec_token_is_picked_up_after_a_401(
    tmp_path: Path, hub_settings: Callable[..., HubSettings]
) -> None:
    # Nothing moves unless the test moves it: the pod stands still (manual cluster clock) and the
    # hub's watches never time out, so the only requests after the rotation are the test's own.
    hub_settings(clock=ManualClock(1_000.0), watch_timeout=(600, 600))
    with FakeCluster(LONG, clock="manual") as cluster:
        path, token_file = rotating_plugin(cluster, tmp_path)
        identity = TryIdentity("token", "rotation", "run-1")
        pod = create_pod(cluster, pod_body(identity, "long:1"))
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        config = ClusterConfig(kube_config_path=str(path))
        sub = await WatchHub.current().subscribe(
            config, "default", name, uid, label_selector=MANAGED_SELECTOR
        )
        try:
            assert await sub.wait(within=20)
            # Both feeds (pods, events) have listed and are watching with token-a.
            await cluster_reaches(cluster, lambda c: watching(c) == {"pods", "events"}, within=20)
            rotate(cluster, token_file)
            first = len(cluster.audit_records())
            # The last look and on_kill's DELETE go through the subscription's shared client.
            assert (await sub.kube.read_pod("default", name))["metadata"]["uid"] == uid
            assert await sub.kube.delete_pod("default", name, uid)
            assert requests_since(cluster, first) == [
                ("get", "pods", 401),
                ("get", "pods", 200),
                ("delete", "pods", 200),
            ]
        finally:
            await sub.close()


def watching(cluster: FakeCluster) -> set[str]:
    """The resources watched so far (a watch's record is written when it is answered)."""
    return {
        r["resource"]
        for r in cluster.audit_records()
        if r.get("kind") == "request" and r["verb"] == "watch" and r["status"] == 200
    }


async def test_a_401_that_lands_after_another_request_reloaded_tries_again(tmp_path: Path) -> None:
    # Two requests leave with token-a. The first 401 to come back reloads the credentials (token-b);
    # the other 401 comes back only after that reload, and must try again with token-b rather than
    # fail because a reload of its own finds nothing new.
    with FakeCluster(LONG, clock="manual") as cluster:
        path, token_file = rotating_plugin(cluster, tmp_path)
        pod = create_pod(cluster, pod_body(TryIdentity("token", "late", "run-1"), "long:1"))
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        kube = await AsyncKube.connect(ClusterConfig(kube_config_path=str(path)))
        try:
            rotate(cluster, token_file)
            first = len(cluster.audit_records())
            answered, reloaded = asyncio.Event(), asyncio.Event()
            sent = 0

            async def held_back() -> Any:
                # The first sending's answer (a 401) is handed over only once the other request
                # has reloaded and succeeded; the repeat is not held.
                nonlocal sent
                sent += 1
                resp = await kube.core.read_namespaced_pod(name, "default", _preload_content=False)
                if sent == 1:
                    answered.set()
                    await reloaded.wait()
                return resp

            late = asyncio.ensure_future(kube._json(held_back, f"reading pod default/{name}"))
            await answered.wait()
            assert (await kube.read_pod("default", name))["metadata"]["uid"] == uid
            reloaded.set()
            assert (await late)["metadata"]["uid"] == uid
        finally:
            await kube.close()
        assert requests_since(cluster, first) == [
            ("get", "pods", 401),
            ("get", "pods", 401),
            ("get", "pods", 200),
            ("get", "pods", 200),
        ]
