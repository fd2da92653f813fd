"""A real network hop in front of kube-apiserver that answers some requests wrongly, on demand.

:class:`FaultProxy` is an HTTPS reverse proxy (aiohttp, in a thread of its own): clients get a
kubeconfig whose server is the proxy (:attr:`FaultProxy.kubeconfig`, with the proxy's own CA) and
the proxy speaks to kube-apiserver with the cluster's admin credentials, so the API server's audit
log names the same user as without it. Watches are streamed through chunk by chunk.

It sits at the HTTP level, not at TCP's, because most faults worth injecting are answers: a 5xx or
429 from an overloaded API server or a load balancer, and a watch ended by ``410 Expired``. A TCP
proxy (Toxiproxy) could cut and slow connections but not read a request inside TLS, nor answer it.

:meth:`FaultProxy.window` opens a fault window: for ``seconds``, each request has ``share`` chance of
getting ``kind``:

``http_5xx``
    500, 503 or 504 with kube-apiserver's own Status bodies; the request never reaches the server.
``http_429``
    ``429 TooManyRequests`` with ``Retry-After: 1``, as kube-apiserver's max-in-flight filter answers.
``reset``
    the connection is cut before the request is forwarded.
``lost_answer``
    a write (POST, PUT, PATCH, DELETE) is forwarded and done, then the connection is cut before its
    answer: the client cannot know whether it happened.
``slow``
    the request waits 2 to 6 s before it is forwarded.
``watch_gone``
    a watch is answered with one ``ERROR`` event, ``410 Expired`` (what kube-apiserver sends for a
    resourceVersion it has compacted), and ends.
``watch_cut``
    every watch streaming through the proxy is cut when the window opens (a load balancer's idle
    timeout or a restart); later ones in the window are cut after their first chunk.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from airflow_k8s_retry_testing.apiserver.errors import status_body

KINDS = ("http_5xx", "http_429", "reset", "lost_answer", "slow", "watch_gone", "watch_cut")
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: Headers that belong to one hop, not to the request or answer.
HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host", "content-length"}
)
#: kube-apiserver's Status answers the proxy gives in its place: (code, reason, message).
SERVER_ERRORS = (
    (500, "InternalError", "Internal error occurred: etcdserver: request timed out"),
    (503, "ServiceUnavailable", "the server is currently unable to handle the request"),
    (504, "Timeout", "Timeout: request did not complete within the allowed duration"),
)


class FaultProxy:
    """The proxy, as a context manager.

    :param upstream_kubeconfig: the cluster's admin kubeconfig (a client certificate and key).
    :param directory: where the proxy writes its certificates and :attr:`kubeconfig`.
    :param seed: the seed of which requests a window's share picks.
    """

    def __init__(self, upstream_kubeconfig: Path, directory: Path, seed: int = 0) -> None:
        self.upstream_kubeconfig = upstream_kubeconfig
        self.directory = directory
        self.rng = random.Random(seed)
        #: Faults injected so far, by kind (requests answered wrongly, watches cut).
        self.injected: collections.Counter[str] = collections.Counter()
        #: Requests forwarded to kube-apiserver.
        self.forwarded = 0
        self._window: tuple[str, float, float] | None = None  # kind, share, until (monotonic)
        self._streams: set[Any] = set()  # transports of the watches streaming now
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self.port = 0

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "proxied.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- control (any thread) ---------------------------------------------------------------------

    def window(self, kind: str, seconds: float, share: float = 1.0) -> None:
        """For ``seconds`` from now, answer ``share`` of the requests with fault ``kind``."""
        if kind not in KINDS:
            raise ValueError(f"fault kind {kind!r}: choose one of {', '.join(KINDS)}")
        if not 0.0 < share <= 1.0 or seconds <= 0:
            raise ValueError(f"fault window {kind}: give 0 < share <= 1 and seconds > 0")
        assert self._loop is not None, "the proxy is not running"
        self._loop.call_soon_threadsafe(self._open, kind, share, time.monotonic() + seconds)

    def clear(self) -> None:
        """End the open window at once."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(setattr, self, "_window", None)

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(30) or self._error is not None:
            raise RuntimeError(f"the fault proxy did not start: {self._error!r}")

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(15)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported by start(), or lost with the thread at exit
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

        from airflow_k8s_retry_testing.tls import make_serving_cert

        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        upstream, client_context = self._upstream()
        serving = make_serving_cert(self.directory / "pki")
        session = ClientSession(
            connector=TCPConnector(ssl=client_context, limit=0),
            timeout=ClientTimeout(total=None, sock_connect=5),
            auto_decompress=False,
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{path:.*}", lambda request: self._handle(request, session, upstream))
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=serving.server_context())
        await site.start()
        self.port = runner.addresses[0][1]
        self._write_kubeconfig(serving.ca_pem)
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            for transport in list(self._streams):
                transport.abort()
            await runner.cleanup()
            await session.close()

    def _upstream(self) -> tuple[str, Any]:
        import ssl

        config = yaml.safe_load(self.upstream_kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        pki = self.directory / "upstream"
        pki.mkdir(parents=True, exist_ok=True)
        files = {}
        for key in ("certificate-authority-data", "client-certificate-data", "client-key-data"):
            path = pki / key.replace("-data", ".pem")
            data = cluster.get(key) or user.get(key)
            path.write_bytes(base64.b64decode(data))
            path.chmod(0o600)
            files[key] = path
        context = ssl.create_default_context(cafile=str(files["certificate-authority-data"]))
        context.load_cert_chain(str(files["client-certificate-data"]), str(files["client-key-data"]))
        return cluster["server"], context

    def _write_kubeconfig(self, ca_pem: bytes) -> None:
        config = yaml.safe_load(self.upstream_kubeconfig.read_text())
        config["clusters"][0]["cluster"] = {
            "server": self.server,
            "certificate-authority-data": base64.b64encode(ca_pem).decode(),
        }
        self.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
        self.kubeconfig.chmod(0o600)

    # -- the proxy's loop -------------------------------------------------------------------------

    def _open(self, kind: str, share: float, until: float) -> None:
        self._window = (kind, share, until)
        if kind == "watch_cut":
            for transport in list(self._streams):
                self.injected[kind] += 1
                transport.abort()

    def _fault(self, is_watch: bool, method: str) -> str | None:
        """The fault this request gets, if any."""
        if self._window is None:
            return None
        kind, share, until = self._window
        if time.monotonic() >= until:
            self._window = None
            return None
        if kind.startswith("watch_") and not is_watch:
            return None
        if kind == "lost_answer" and method not in WRITES:
            return None
        return kind if self.rng.random() < share else None

    async def _handle(self, request: Any, session: Any, upstream: str) -> Any:
        from aiohttp import web

        is_watch = request.query.get("watch", "").lower() in ("true", "1")
        fault = self._fault(is_watch, request.method)
        if fault is not None and fault not in ("slow", "watch_cut"):
            self.injected[fault] += 1
        match fault:
            case "http_5xx":
                code, reason, message = self.rng.choice(SERVER_ERRORS)
                return web.json_response(status_body(code, message, reason), status=code)
            case "http_429":
                body = status_body(
                    429,
                    "Too many requests, please try again later.",
                    "TooManyRequests",
                    {"retryAfterSeconds": 1},
                )
                return web.json_response(body, status=429, headers={"Retry-After": "1"})
            case "reset":
                return self._cut(request)
            case "watch_gone":
                version = request.query.get("resourceVersion") or "1"
                expired = status_body(
                    410, f"too old resource version: {version} ({int(version) + 1000})", "Expired"
                )
                answer = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
                await answer.prepare(request)
                await answer.write(json.dumps({"type": "ERROR", "object": expired}).encode() + b"\n")
                await answer.write_eof()
                return answer
            case "slow":
                self.injected[fault] += 1
                await asyncio.sleep(self.rng.uniform(2, 6))
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        try:
            upstream_answer = await session.request(
                request.method, upstream + str(request.rel_url), headers=headers, data=body or None
            )
        except Exception:  # kube-apiserver down or restarting: the client sees its connection cut
            return self._cut(request)
        self.forwarded += 1
        async with upstream_answer:
            if fault == "lost_answer":
                await upstream_answer.read()  # done on the server; the answer goes nowhere
                return self._cut(request)
            answer = web.StreamResponse(
                status=upstream_answer.status,
                headers={k: v for k, v in upstream_answer.headers.items() if k.lower() not in HOP},
            )
            await answer.prepare(request)
            if is_watch:
                self._streams.add(request.transport)
            try:
                async for chunk in upstream_answer.content.iter_any():
                    await answer.write(chunk)
                    if is_watch and self._fault(True, request.method) == "watch_cut":
                        self.injected["watch_cut"] += 1
                        return self._cut(request)
                await answer.write_eof()
            except ConnectionError:  # the client went away (a watch it closed): nothing to answer
                with contextlib.suppress(Exception):
                    request.transport.abort()
                return answer
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    request.transport.abort()
                raise
            except Exception:  # the upstream stream broke (kube-apiserver restarted): cut ours too
                return self._cut(request)
            finally:
                self._streams.discard(request.transport)
            return answer

    @staticmethod
    def _cut(request: Any) -> Any:
        from aiohttp import web

        if request.transport is not None:
            request.transport.abort()
        raise web.HTTPServiceUnavailable()  # never sent: the connection is gone
