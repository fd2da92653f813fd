"""The real control plane's kubelet endpoint (the harness's front of each KWOK node) answers a log
request for a started container with its log even while KWOK itself has not caught up, as a
kubelet would. Runs without the control plane: KWOK is played by a small local server that answers
400 (its "log target not found" for a Logs object its informer does not have yet) a few times."""

from __future__ import annotations

import asyncio
import ssl
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from airflow_k8s_retry_testing.ports import free_port
from tools.controlplane import pki
from tools.controlplane.kubeletfront import KubeletFront

LOG = b"2026-01-01T00:00:00.000000000Z stdout F one\n"


class LaggingKwok:
    """Answers 400 to the first ``lag`` log requests, then the log."""

    def __init__(self, lag: int) -> None:
        self.lag = lag
        self.requests = 0
        self.port = free_port()
        self.ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()

        async def handle(request: web.Request) -> web.Response:
            self.requests += 1
            if self.requests <= self.lag:
                return web.Response(status=400, text='log target not found for container "base"')
            return web.Response(status=200, body=LOG, content_type="text/plain")

        app = web.Application()
        app.router.add_get("/{tail:.*}", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        self.ready.set()
        await self._stop.wait()
        await runner.cleanup()

    def __enter__(self) -> LaggingKwok:
        self._thread.start()
        assert self.ready.wait(10)
        return self

    def __exit__(self, *_: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pki")
    pki.create(directory, {})
    return directory


@pytest.fixture
def front_of(certificates: Path) -> Iterator:
    fronts: list[KubeletFront] = []

    def start(kwok: LaggingKwok, started: bool) -> int:
        port = free_port()
        front = KubeletFront(certificates, {port: kwok.port}, lambda *_: True, lambda *_: started)
        front.start()
        fronts.append(front)
        return port

    yield start
    for front in fronts:
        front.close()


def _get(certificates: Path, port: int) -> tuple[int, bytes]:
    context = ssl.create_default_context(cafile=str(certificates / "ca.crt"))
    request = urllib.request.Request(f"https://127.0.0.1:{port}/containerLogs/default/p/base")
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_a_started_container_s_log_is_served_once_kwok_has_caught_up(certificates: Path, front_of) -> None:
    with LaggingKwok(lag=3) as kwok:
        status, body = _get(certificates, front_of(kwok, started=True))
    assert (status, body) == (200, LOG)
    assert kwok.requests == 4


def test_a_container_that_has_not_started_gets_kwok_s_400_at_once(certificates: Path, front_of) -> None:
    with LaggingKwok(lag=3) as kwok:
        status, body = _get(certificates, front_of(kwok, started=False))
    assert status == 400
    assert b"log target not found" in body
    assert kwok.requests == 1
