"""The kubelet endpoint of each KWOK node: the API server's ``pods/log`` reaches it, nothing else.

The API server talks to a node's kubelet at the node's address and the port its status names
(``daemonEndpoints``), over TLS it verifies against the cluster CA. Here that port is served by
this front, which passes container-log requests on to the KWOK process playing the node (KWOK
reads the files :mod:`.podlogs` writes, with the kubelet's own log reader) and answers everything
else (exec, attach, port-forward, run) with 403 without passing it on: KWOK's exec would run the
client's command on this machine.

Two things the front adds, each what a kubelet does and KWOK alone does not:

* a ``follow`` request ends once the container has terminated and the stream has gone quiet, as
  a kubelet ends it; KWOK has no container runtime to ask, so on its own it would follow for ever
  (and the cncf operator follows the log of every pod it ran);
* a container's log can be read as soon as the API server reports the container started. KWOK
  finds a log through a ``Logs`` object that :mod:`.podlogs` creates when it sees the pod running,
  and answers 400 until its informer has that object; a client that reads the log right after
  seeing ``Running`` would get that 400 on a busy machine. The front asks again for a while when
  the pod's status says the container has started.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp import ClientResponse, ClientSession, web

log = logging.getLogger(__name__)

#: How long a followed stream must be quiet, once the container has terminated, before it ends.
QUIET_SECONDS = 0.5
#: How long a log request of a started container is asked again while KWOK has not caught up.
CATCH_UP_SECONDS = 20.0


class KubeletFront:
    def __init__(
        self,
        pki: Path,
        routes: dict[int, int],
        terminated: Callable[[str, str, str], bool],
        started: Callable[[str, str, str], bool],
    ) -> None:
        """``routes`` maps each front port (what the node advertises) to its KWOK process's port;
        ``terminated(namespace, pod, container)`` says whether that container has terminated, and
        ``started(namespace, pod, container)`` whether the API server reports it started (a
        blocking read, run off the event loop)."""
        self.pki = pki
        self.routes = routes
        self.terminated = terminated
        self.started = started
        self.ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()
        if not self.ready.wait(30):
            raise RuntimeError("the kubelet front did not start")

    def close(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        from aiohttp import ClientSession, ClientTimeout, web

        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(self.pki / "kubelet.crt"), str(self.pki / "kubelet.key"))
        session = ClientSession(timeout=ClientTimeout(total=None, sock_connect=10))
        runners = []
        try:
            for front, kwok in self.routes.items():
                app = web.Application()
                app.router.add_route("*", "/{tail:.*}", self._handler(session, kwok))
                runner = web.AppRunner(app, access_log=None)
                await runner.setup()
                await web.TCPSite(runner, "127.0.0.1", front, ssl_context=context).start()
                runners.append(runner)
            self.ready.set()
            await self._stop.wait()
        finally:
            for runner in runners:
                await runner.cleanup()
            await session.close()

    def _handler(
        self, session: ClientSession, kwok: int
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        from aiohttp import web

        async def handle(request: web.Request) -> web.StreamResponse:
            parts = [p for p in request.path.split("/") if p]
            if request.method != "GET" or len(parts) not in (4, 5) or parts[0] != "containerLogs":
                log.warning("kubelet front: refused %s %s", request.method, request.path)
                return web.Response(status=403, text="this test node's kubelet serves container logs only\n")
            namespace, pod, container = parts[1], parts[2], parts[-1]
            follow = request.query.get("follow", "").lower() in ("true", "1")
            upstream = await self._open(session, kwok, request, (namespace, pod, container), follow)
            if upstream is None:
                return web.Response(status=200, body=b"", content_type="text/plain")
            try:
                if upstream.status != 200:
                    return web.Response(
                        status=upstream.status,
                        body=await upstream.read(),
                        content_type=upstream.content_type,
                    )
                response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
                await response.prepare(request)
                while True:
                    try:
                        chunk = await asyncio.wait_for(upstream.content.readany(), QUIET_SECONDS)
                    except TimeoutError:
                        if follow and self.terminated(namespace, pod, container):
                            break
                        continue
                    if not chunk:
                        break
                    await response.write(chunk)
                await response.write_eof()
                return response
            finally:
                upstream.release()

        return handle

    async def _open(
        self,
        session: ClientSession,
        kwok: int,
        request: web.Request,
        target: tuple[str, str, str],
        follow: bool,
    ) -> ClientResponse | None:
        """KWOK's answer to the request, asked again while it answers 400 for a container the API
        server reports started; None for a followed empty log of a container that has ended."""
        previous = request.query.get("previous", "").lower() in ("true", "1")
        deadline = asyncio.get_running_loop().time() + CATCH_UP_SECONDS
        while True:
            # KWOK sends its headers with the first bytes of the log: for a followed empty log
            # of a container that has ended, none ever come.
            opening = asyncio.ensure_future(session.get(f"http://127.0.0.1:{kwok}{request.path_qs}"))
            while not (await asyncio.wait({opening}, timeout=QUIET_SECONDS))[0]:
                if follow and self.terminated(*target):
                    opening.cancel()
                    return None
            upstream = opening.result()
            if (
                upstream.status != 400
                or previous
                or asyncio.get_running_loop().time() > deadline
                or not await asyncio.to_thread(self.started, *target)
            ):
                return upstream
            upstream.release()
            await asyncio.sleep(0.25)
