"""The cluster tier's long watch through the package's own client (the session fixture
``watch_probe`` in conftest.py), read by the bookmark test in test_watch_semantics.py."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from airflow_k8s_retry.kube.aio import AsyncKube, WatchEvent
from airflow_k8s_retry.kube.config import ClusterConfig


class WatchProbe:
    """One long watch through the package's client, opened with the first cluster test and read by
    the bookmark test at its end (the watch cache's periodic bookmark comes about once a minute, so
    the wait overlaps the other tests instead of adding to them)."""

    def __init__(self, kubeconfig: Path, seconds: int) -> None:
        self.kubeconfig = kubeconfig
        self.seconds = seconds
        self.events: list[WatchEvent] = []
        self.list_version = ""
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._watch())
        except BaseException as exc:
            self.error = exc

    async def _watch(self) -> None:
        kube = await AsyncKube.connect(ClusterConfig(kube_config_path=str(self.kubeconfig)))
        try:
            selector = "probe=bookmarks"
            self.list_version = (await kube.list_pods("default", label_selector=selector)).resource_version
            async for event in kube.watch_pods(
                "default",
                resource_version=self.list_version,
                label_selector=selector,
                timeout_seconds=self.seconds,
            ):
                self.events.append(event)
        finally:
            await kube.close()

    def result(self) -> list[WatchEvent]:
        self.thread.join(self.seconds + 30)
        if self.error is not None:
            raise self.error
        return self.events
