"""The watch semantics the trigger stands on, against a real API server and a real etcd, through
this package's own client (``kube.aio``) and shared feed (``kube.hub``)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from airflow_k8s_retry.kube.aio import AsyncKube
from airflow_k8s_retry.kube.config import ClusterConfig
from airflow_k8s_retry.kube.errors import Gone
from airflow_k8s_retry.kube.hub import WatchHub
from tests.cluster.kube import core_api, delete_now, pod_body, wait_for_pod
from tests.cluster.watch_probe import WatchProbe
from tools.controlplane import ControlPlane


def test_a_long_watch_carries_bookmarks(watch_probe: WatchProbe):
    """A watch that sees no change still gets bookmarks (about one a minute, and one 2 s before its
    deadline), each with a resourceVersion to resume from; the hub counts on them."""
    events = watch_probe.result()
    bookmarks = [e for e in events if e.type == "BOOKMARK"]
    assert bookmarks, f"no bookmark in {events}"
    assert all(int(b.resource_version or 0) >= int(watch_probe.list_version) for b in bookmarks)


async def test_after_a_compaction_an_old_version_is_gone_and_the_feed_relists(
    kubeconfig: Path, control_plane: ControlPlane
):
    """etcd compacted and the API server restarted (its watch cache starts over from etcd): a watch
    from before answers 410, and the hub's feed re-lists and still sees what changed meanwhile."""
    label = f"compaction-{uuid.uuid4().hex[:6]}"
    selector = f"case={label}"
    name = f"{label}-followed"
    with core_api(kubeconfig) as api:
        body = pod_body(name, "registry.example.com/app:long")
        body["metadata"]["labels"] = {"case": label}
        uid = api.create_namespaced_pod("default", body).metadata.uid
        wait_for_pod(api, name, lambda p: p["status"].get("phase") == "Running")
    config = ClusterConfig(kube_config_path=str(kubeconfig))
    hub = WatchHub.current()
    sub = await hub.subscribe(config, "default", name, uid, label_selector=selector, events=False)
    kube = await AsyncKube.connect(config)
    try:
        assert await sub.wait(within=30), "the feed delivered the followed pod"
        assert [c.pod["metadata"]["uid"] for c in sub.drain() if c.pod] == [uid]
        old = (await kube.list_pods("default", label_selector=selector)).resource_version
        with core_api(kubeconfig) as api:  # history after `old`, so that compacting removes it
            other = f"{label}-other"
            api.create_namespaced_pod("default", pod_body(other, "registry.example.com/app:long"))
            delete_now(api, other)
        compacted = control_plane.compact_etcd()
        assert compacted > int(old)
        await asyncio.to_thread(control_plane.restart, "kube-apiserver")

        with pytest.raises(Gone):
            async for _ in kube.watch_pods("default", resource_version=old, timeout_seconds=5):
                pass

        with core_api(kubeconfig) as api:
            delete_now(api, name)
        deleted = False
        for _ in range(40):
            if not await sub.wait(within=5):
                continue
            if any(c.deleted for c in sub.drain()):
                deleted = True
                break
        assert deleted, "the deletion reached the subscriber after the restart"
        stats = [s for s in hub.stats() if s.kind == "pods" and s.selector == selector]
        assert stats and stats[0].counts.get("relist_410", 0) >= 1, stats
    finally:
        await sub.close()
        await kube.close()
