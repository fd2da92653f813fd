"""The soak's fault proxy (``tests/support/api_faults.py``) in front of the real kube-apiserver: what
each fault looks like to the official client and to this package's own, and that without a fault
everything (writes, watches) goes through unchanged."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from airflow_k8s_retry.kube.aio import AsyncKube
from airflow_k8s_retry.kube.config import ClusterConfig
from airflow_k8s_retry.kube.errors import Gone
from tests.cluster.kube import core_api
from tests.support.api_faults import FaultProxy


@pytest.fixture(scope="module")
def proxy(kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultProxy]:
    with FaultProxy(kubeconfig, tmp_path_factory.mktemp("fault-proxy"), seed=7) as running:
        yield running


@pytest.fixture(autouse=True)
def no_window(proxy: FaultProxy) -> Iterator[None]:
    yield
    proxy.clear()
    time.sleep(0.1)  # the clear is done on the proxy's loop


def config_map(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}


def test_without_a_fault_writes_and_watches_go_through(proxy: FaultProxy, kubeconfig: Path):
    name = f"proxied-{uuid.uuid4().hex[:6]}"
    with core_api(proxy.kubeconfig) as through, core_api(kubeconfig) as direct:
        version = through.list_namespaced_config_map("default").metadata.resource_version
        through.create_namespaced_config_map("default", config_map(name))
        assert direct.read_namespaced_config_map(name, "default").data == {"k": "v"}
        stream = through.list_namespaced_config_map(
            "default", watch=True, resource_version=version, timeout_seconds=5, _preload_content=False
        )
        seen = b"".join(stream.stream())
        through.delete_namespaced_config_map(name, "default")
    assert f'"name":"{name}"'.encode() in seen
    assert not proxy.injected


@pytest.mark.parametrize("kind, codes", [("http_5xx", {500, 503, 504}), ("http_429", {429})])
def test_an_error_answer_is_kube_apiservers_status(proxy: FaultProxy, kind: str, codes: set[int]):
    proxy.window(kind, 30)
    with core_api(proxy.kubeconfig) as api:
        time.sleep(0.1)
        with pytest.raises(ApiException) as caught:
            api.list_namespaced_pod("default")
    assert caught.value.status in codes
    assert '"kind":"Status"' in caught.value.body.replace(" ", "")
    if kind == "http_429":
        assert caught.value.headers["Retry-After"] == "1"
    assert proxy.injected[kind] >= 1


def test_a_lost_answer_is_a_write_done_whose_answer_never_came(proxy: FaultProxy, kubeconfig: Path):
    name = f"lost-{uuid.uuid4().hex[:6]}"
    proxy.window("lost_answer", 30)
    with core_api(proxy.kubeconfig) as through, core_api(kubeconfig) as direct:
        time.sleep(0.1)
        with pytest.raises(urllib3.exceptions.HTTPError):
            through.create_namespaced_config_map("default", config_map(name), _request_timeout=10)
        assert direct.read_namespaced_config_map(name, "default").metadata.name == name
        direct.delete_namespaced_config_map(name, "default")
    assert proxy.injected["lost_answer"] >= 1


def test_a_reset_cuts_the_connection_and_nothing_is_done(proxy: FaultProxy, kubeconfig: Path):
    name = f"reset-{uuid.uuid4().hex[:6]}"
    proxy.window("reset", 30)
    with core_api(proxy.kubeconfig) as through, core_api(kubeconfig) as direct:
        time.sleep(0.1)
        with pytest.raises(urllib3.exceptions.HTTPError):
            through.create_namespaced_config_map("default", config_map(name), _request_timeout=10)
        with pytest.raises(ApiException) as caught:
            direct.read_namespaced_config_map(name, "default")
    assert caught.value.status == 404
    assert proxy.injected["reset"] >= 1


def test_a_slow_answer_comes_seconds_late(proxy: FaultProxy):
    proxy.window("slow", 30)
    with core_api(proxy.kubeconfig) as api:
        time.sleep(0.1)
        started = time.monotonic()
        api.list_namespaced_pod("default")
    assert time.monotonic() - started >= 2.0
    assert proxy.injected["slow"] == 1


async def test_a_watch_told_gone_raises_gone_in_the_packages_client(proxy: FaultProxy):
    kube = await AsyncKube.connect(ClusterConfig(kube_config_path=str(proxy.kubeconfig)))
    try:
        version = (await kube.list_pods("default")).resource_version
        proxy.window("watch_gone", 30)
        await asyncio.sleep(0.1)
        with pytest.raises(Gone):
            async for _ in kube.watch_pods("default", resource_version=version, timeout_seconds=20):
                pass
    finally:
        await kube.close()
    assert proxy.injected["watch_gone"] == 1


def test_a_cut_watch_ends_long_before_its_timeout(proxy: FaultProxy):
    ended = threading.Event()
    with core_api(proxy.kubeconfig) as api:
        version = api.list_namespaced_pod("default").metadata.resource_version

        def watch() -> None:
            stream = api.list_namespaced_pod(
                "default", watch=True, resource_version=version, timeout_seconds=120, _preload_content=False
            )
            try:
                for _ in stream.stream():
                    pass
            except urllib3.exceptions.HTTPError:
                pass
            ended.set()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        deadline = time.monotonic() + 30
        while not proxy._streams and time.monotonic() < deadline:  # the watch is streaming
            time.sleep(0.05)
        assert not ended.is_set()
        proxy.window("watch_cut", 1)
        assert ended.wait(30), "the watch was not cut"
    assert proxy.injected["watch_cut"] == 1


def test_an_unknown_kind_is_refused_by_name(proxy: FaultProxy):
    with pytest.raises(ValueError, match="fault kind 'teapot': choose one of http_5xx"):
        proxy.window("teapot", 1)
