"""One measured triggerer: many triggers of one kind as coroutines in one asyncio process.

``python -m bench.driver SPEC.json OUT.json`` is started once per side and phase. It creates the
pods it will watch (those requests carry the ``bench-setup`` User-Agent so the analysis can leave
them out), then runs one coroutine per pod that does what Airflow's triggerer does with a trigger:
``async for event in trigger.run()``, keep the first event, close the generator, ``cleanup()``.

It records when each trigger yielded (wall clock, to compare with the simulator's audit
timestamps), and, in footprint mode, the process's CPU time, resident memory and event-loop lag
over a steady-state window. Everything it measures is written to ``OUT.json``; nothing is derived
here, so a run can be re-analysed from its files.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import json
import logging
import os
import random
import resource
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SETUP_AGENT = "bench-setup/1"
CONTAINER = "base"
GATE = "bench.airflow-k8s-retry/hold"


def _kube_target(kubeconfig: Path) -> tuple[str, dict[str, str], Any]:
    """Server URL, auth headers and SSL context (None for plain HTTP) from a kubeconfig.

    The simulator's kubeconfig holds a bearer token; the real control plane's a client certificate.
    """
    import base64
    import ssl

    import yaml

    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
    headers = {"Authorization": f"Bearer {user['token']}"} if user.get("token") else {}
    context: Any = None
    if cluster.get("certificate-authority-data"):
        ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
        context = ssl.create_default_context(cadata=ca)
        if user.get("client-certificate-data"):
            import tempfile

            with tempfile.TemporaryDirectory() as folder:
                cert, key = Path(folder) / "c.pem", Path(folder) / "k.pem"
                cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
                key.write_bytes(base64.b64decode(user["client-key-data"]))
                context.load_cert_chain(str(cert), str(key))
    return cluster["server"], headers, context


def pod_body(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod the benchmark creates: one ``base`` container, optionally an init container first."""
    from airflow_k8s_retry.kube.naming import TryIdentity

    labels = TryIdentity("bench", pod["name"], "bench-run").labels()
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": CONTAINER, "image": pod["image"], "command": ["run"]}],
    }
    if pod.get("init_image"):
        spec["initContainers"] = [{"name": "setup", "image": pod["init_image"], "command": ["setup"]}]
    if pod.get("gate_seconds"):
        # Held unscheduled until the driver lifts the gate: the real backend's way of letting a pull
        # fail a while into the pod's life (KWOK plays no init containers).
        spec["schedulingGates"] = [{"name": GATE}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod["name"], "namespace": pod["namespace"], "labels": labels},
        "spec": spec,
    }


async def create_pods(
    kubeconfig: Path, pods: list[dict[str, Any]], concurrency: int = 32
) -> tuple[dict[str, Any], asyncio.Future[None]]:
    """Create every pod; returns ``{name: {"uid": ..., "t": ...}}`` and the gate lifting's future.

    A pod with ``gate_seconds`` is created with a scheduling gate that a task started here lifts
    that many seconds later (as the setup client, so it is not counted).
    """
    import aiohttp

    server, auth, ssl_context = _kube_target(kubeconfig)
    headers = {**auth, "User-Agent": SETUP_AGENT}
    created: dict[str, Any] = {}
    gate = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(ssl=ssl_context if ssl_context is not None else False)
    session = aiohttp.ClientSession(headers=headers, connector=connector)

    async def lift(pod: dict[str, Any]) -> None:
        await asyncio.sleep(float(pod["gate_seconds"]))
        url = f"{server}/api/v1/namespaces/{pod['namespace']}/pods/{pod['name']}"
        patch = [{"op": "remove", "path": "/spec/schedulingGates"}]
        async with session.patch(
            url, json=patch, headers={"Content-Type": "application/json-patch+json"}
        ) as response:
            if response.status != 200:
                raise RuntimeError(
                    f"lifting the gate of {pod['name']}: {response.status} {await response.text()}"
                )

    async def one(pod: dict[str, Any]) -> None:
        async with gate:
            url = f"{server}/api/v1/namespaces/{pod['namespace']}/pods"
            async with session.post(url, json=pod_body(pod)) as response:
                body = await response.json()
                if response.status != 201:
                    raise RuntimeError(f"creating pod {pod['name']}: {response.status} {body}")
                created[pod["name"]] = {"uid": body["metadata"]["uid"], "t": time.time()}

    await asyncio.gather(*(one(p) for p in pods))
    lifts = [asyncio.ensure_future(lift(p)) for p in pods if p.get("gate_seconds")]

    async def close() -> None:
        try:
            await asyncio.gather(*lifts)
        finally:
            await session.close()

    return created, asyncio.ensure_future(close())


async def evict_later(kubeconfig: Path, pod: dict[str, Any], uid: str, delay: float) -> None:
    """Post an Eviction (policy/v1) for ``pod`` ``delay`` seconds from now, as the setup client.

    A pod with ``evict_seconds`` is evicted this way, timed from its trigger's start: a disruption
    timed from the pod's creation can come, on a loaded machine, before a trigger's first look, and
    a trigger cannot detect a failure that happened before it looked (the pod is gone by then).
    """
    import aiohttp

    await asyncio.sleep(delay)
    server, auth, ssl_context = _kube_target(kubeconfig)
    url = f"{server}/api/v1/namespaces/{pod['namespace']}/pods/{pod['name']}/eviction"
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod["name"], "namespace": pod["namespace"]},
        "deleteOptions": {"preconditions": {"uid": uid}},
    }
    connector = aiohttp.TCPConnector(ssl=ssl_context if ssl_context is not None else False)
    headers = {**auth, "User-Agent": SETUP_AGENT}
    async with (
        aiohttp.ClientSession(headers=headers, connector=connector) as session,
        session.post(url, json=body) as response,
    ):
        if response.status != 201:
            raise RuntimeError(f"evicting {pod['name']}: {response.status} {await response.text()}")


async def wait_running(kubeconfig: Path, namespaces: set[str], count: int, limit: float) -> float:
    """Wait until ``count`` pods of ``namespaces`` are Running (as the setup client); returns seconds."""
    import aiohttp

    server, auth, ssl_context = _kube_target(kubeconfig)
    connector = aiohttp.TCPConnector(ssl=ssl_context if ssl_context is not None else False)
    started = time.monotonic()
    async with aiohttp.ClientSession(headers={**auth, "User-Agent": SETUP_AGENT}, connector=connector) as s:
        while True:
            running = 0
            for ns in namespaces:
                url = f"{server}/api/v1/namespaces/{ns}/pods?fieldSelector=status.phase%3DRunning"
                async with s.get(url) as response:
                    running += len((await response.json()).get("items") or [])
            if running >= count:
                return time.monotonic() - started
            if time.monotonic() - started > limit:
                raise RuntimeError(f"only {running} of {count} pods Running after {limit:.0f} s")
            await asyncio.sleep(2)


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far, from ``/proc/<pid>/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # After the command name: state is field 3, utime and stime are fields 14 and 15 (1-based).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def components_cpu(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of each named process (kube-apiserver, etcd)."""
    return {name: process_cpu_seconds(pid) for name, pid in pids.items()}


def make_trigger(side: str, spec: dict[str, Any], pod: dict[str, Any], uid: str) -> Any:
    """The trigger each operator would defer with, built from its own classes and defaults."""
    if side == "ours":
        from airflow_k8s_retry.kube.naming import TryIdentity
        from airflow_k8s_retry.triggers import PodStateTrigger

        return PodStateTrigger(
            kubernetes_conn_id="kubernetes_default",
            namespace=pod["namespace"],
            pod_name=pod["name"],
            pod_uid=uid,
            identity=TryIdentity("bench", pod["name"], "bench-run").to_payload(),
            policy=spec.get("policy"),
            logging_interval=spec.get("logging_interval"),
            base_container_name=CONTAINER,
        )
    from airflow.providers.cncf.kubernetes.triggers.pod import KubernetesPodTrigger

    kpo = spec.get("kpo") or {}
    return KubernetesPodTrigger(
        pod_name=pod["name"],
        pod_namespace=pod["namespace"],
        trigger_start_time=datetime.datetime.now(tz=datetime.UTC),
        base_container_name=CONTAINER,
        kubernetes_conn_id="kubernetes_default",
        poll_interval=kpo.get("poll_interval", 2),
        startup_check_interval=kpo.get("startup_check_interval", 5),
        get_logs=True,
        on_finish_action="delete_pod",
        logging_interval=spec.get("logging_interval"),
    )


#: The loggers each side copies a container's log lines into, as ``[base] <line>`` at INFO
#: (``logging_interval``); let through to the driver's output, where the analysis counts them.
STREAM_LOGGERS = "airflow_k8s_retry.triggers=INFO airflow.providers.cncf.kubernetes.utils.pod_manager=INFO"


def summarize(side: str, payload: dict[str, Any]) -> dict[str, Any]:
    if side == "ours":
        verdict = payload.get("verdict") or {}
        return {"status": verdict.get("outcome"), "reason": verdict.get("reason")}
    return {"status": payload.get("status"), "reason": str(payload.get("message", ""))[:120]}


class LoopMonitor:
    """Samples event-loop lag (how late a short sleep wakes up) and, from a thread, resident memory.

    Memory is sampled from a thread so that a starved event loop still gets its memory measured.
    Each lag sample is ``(wake time, lag)``; the sleep it measures spans
    ``[wake - lag - interval, wake]``.
    """

    def __init__(self, interval: float = 0.1, rss_interval: float = 0.5) -> None:
        self.interval = interval
        self.rss_interval = rss_interval
        self.lags: list[tuple[float, float]] = []
        self.rss: list[tuple[float, int]] = []
        self._task: asyncio.Task[None] | None = None
        self._sampled: asyncio.Event | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_rss, name="rss-sampler", daemon=True)

    def start(self) -> None:
        self._sampled = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())
        self._thread.start()

    def _sample_rss(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.wait(self.rss_interval):
            self.rss.append((time.time(), me.memory_info().rss))

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(self.interval)
            lag = loop.time() - before - self.interval
            self.lags.append((time.time(), max(lag, 0.0)))
            assert self._sampled is not None
            self._sampled.set()

    def lags_overlapping(self, start: float, end: float) -> list[float]:
        """Lag of every sleep that overlapped ``[start, end]`` (a sleep starved across it counts)."""
        return [lag for t, lag in self.lags if t >= start and t - lag - self.interval <= end]

    async def next_sample(self) -> None:
        """Wait until the sampler has woken once more (so a sleep spanning 'now' is recorded)."""
        assert self._sampled is not None
        self._sampled.clear()
        await self._sampled.wait()

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


async def measure_baseline(
    spec: dict[str, Any], kubeconfig: Path, pids: dict[str, int], result: dict[str, Any]
) -> None:
    """The components' CPU with every pod Running and no trigger yet: what the cluster costs anyway."""
    if not pids or spec["mode"] != "footprint":
        return
    namespaces = {p["namespace"] for p in spec["pods"]}
    result["settle_seconds"] = await wait_running(
        kubeconfig, namespaces, len(spec["pods"]), limit=float(spec.get("settle_timeout", 900))
    )
    await asyncio.sleep(float(spec.get("quiet", 5)))
    before, start = components_cpu(pids), time.time()
    await asyncio.sleep(float(spec["baseline"]))
    after, end = components_cpu(pids), time.time()
    result["baseline"] = {
        "start": start,
        "end": end,
        "components_cpu_seconds": {k: after[k] - before[k] for k in pids},
    }


async def drive(spec: dict[str, Any], out: Callable[[dict[str, Any]], None]) -> None:
    with contextlib.ExitStack() as stack:
        if spec["side"] == "ours" and spec.get("watch_timeout"):
            from airflow_k8s_retry.kube.watch_settings import HubSettings, use_settings

            low, high = spec["watch_timeout"]
            settings = dataclasses.replace(HubSettings.from_env(), watch_timeout=(int(low), int(high)))
            stack.enter_context(use_settings(settings))
        await _drive(spec, out)


async def _drive(spec: dict[str, Any], out: Callable[[dict[str, Any]], None]) -> None:
    side = spec["side"]
    mode = spec["mode"]
    result: dict[str, Any] = {"side": side, "mode": mode, "pid": os.getpid(), "errors": []}
    started_import = time.perf_counter()
    if side == "ours":
        import airflow_k8s_retry.triggers  # noqa: F401
    else:
        import airflow.providers.cncf.kubernetes.triggers.pod  # noqa: F401
    # A triggerer is a long-lived process: its imports are warm and its connection lookup code has
    # run before. Do the lookup once here, for both sides alike, so the first trigger's start does
    # not pay for lazy imports while its pod is already running.
    from airflow.providers.common.compat.connection import get_async_connection

    await get_async_connection("kubernetes_default")
    result["import_seconds"] = time.perf_counter() - started_import
    for name in ("airflow", "airflow_k8s_retry", "airflow.task", "kubernetes_asyncio", ""):
        logging.getLogger(name).setLevel(logging.WARNING)

    monitor = LoopMonitor()
    monitor.start()
    kubeconfig = Path(spec["kubeconfig"])
    pods: list[dict[str, Any]] = spec["pods"]
    result["rss_before_setup"] = _rss()
    created, lifted = await create_pods(kubeconfig, pods)
    result["created"] = created
    pids: dict[str, int] = spec.get("component_pids") or {}
    await measure_baseline(spec, kubeconfig, pids, result)
    rng = random.Random(spec.get("seed", 1))
    events: dict[str, Any] = {}
    started: dict[str, float] = {}
    evictions: list[asyncio.Future[None]] = []
    result["events"] = events
    result["started"] = started

    async def run_one(pod: dict[str, Any]) -> None:
        name = pod["name"]
        delay = pod.get("start_delay", 0.0)
        if delay == "jitter":
            delay = rng.uniform(0, spec.get("jitter", 2.0))
        if delay:
            await asyncio.sleep(delay)
        trigger = make_trigger(side, spec, pod, created[name]["uid"])
        started[name] = time.time()
        if pod.get("evict_seconds") is not None:
            evict = evict_later(kubeconfig, pod, created[name]["uid"], float(pod["evict_seconds"]))
            evictions.append(asyncio.ensure_future(evict))
        run = trigger.run()
        try:
            event = await run.__anext__()
            events[name] = {"t": time.time(), **summarize(side, dict(event.payload))}
        except Exception as exc:
            result["errors"].append(f"{name}: {type(exc).__name__}: {exc}")
        finally:
            await run.aclose()
            await trigger.cleanup()

    result["rss_before_triggers"] = _rss()
    cpu_start, t_start = time.process_time(), time.time()
    tasks = [asyncio.ensure_future(run_one(p)) for p in pods]
    result["t_triggers_started"] = t_start
    if mode == "complete":
        _done, pending = await asyncio.wait(tasks, timeout=spec.get("timeout", 300))
        result["unfinished"] = sorted(p["name"] for p, t in zip(pods, tasks, strict=True) if t in pending)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        result["cpu_seconds"] = time.process_time() - cpu_start  # the triggers' run, from start to end
        result["t_triggers_ended"] = time.time()
    else:
        await asyncio.sleep(spec["warmup"])
        cpu0, wall0, comp0 = time.process_time(), time.time(), components_cpu(pids)
        await asyncio.sleep(spec["window"])
        cpu1, wall1, comp1 = time.process_time(), time.time(), components_cpu(pids)
        result["window"] = {
            "start": wall0,
            "end": wall1,
            "cpu_seconds": cpu1 - cpu0,
            "components_cpu_seconds": {k: comp1[k] - comp0[k] for k in pids},
        }
        result["fired_early"] = len(events)
        result["running_tasks"] = sum(1 for t in tasks if not t.done())
        result["ru_maxrss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        result["rss"] = [rss for t, rss in monitor.rss if wall0 <= t <= wall1]
        await monitor.next_sample()
        result["lags"] = monitor.lags_overlapping(wall0, wall1)
        out(result)  # the measurement is complete; tearing down below is not measured
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks, timeout=60)
    await monitor.stop()
    for outcome in await asyncio.gather(*evictions, return_exceptions=True):
        if isinstance(outcome, BaseException):
            result["errors"].append(f"eviction: {type(outcome).__name__}: {outcome}")
    await lifted
    result["rss_end"] = _rss()
    out(result)


def _rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m bench.driver SPEC.json OUT.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[0]).read_text())
    if spec.get("logging_interval"):  # before Airflow configures its logging
        os.environ["AIRFLOW__LOGGING__NAMESPACE_LEVELS"] = STREAM_LOGGERS
    out_path = Path(argv[1])

    def out(result: dict[str, Any]) -> None:
        tmp = out_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result))
        tmp.replace(out_path)

    asyncio.run(drive(spec, out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
