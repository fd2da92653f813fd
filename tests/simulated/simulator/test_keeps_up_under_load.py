"""Does the simulator keep up? Create many pods at once and measure how late everything happens.

Benchmarks run thousands of pods through the simulator; if its scripted kubelet fell behind, a
benchmark would measure the simulator instead of the code under test. This drives N concurrent
pods through the real ``kubernetes_asyncio`` client while one watch follows them, and reports:

* timer lag: how late each scripted lifecycle step fired versus when it was due;
* watch lag: from a lifecycle change (audit record) to the watch client receiving it;
* request latency: server-side handling time, and client-observed create latency;
* makespan: first create to last pod Succeeded, against the scripted minimum;
* CPU seconds used by the simulator's thread and by the whole process.

The test runs it small; ``python tests/simulated/simulator/test_keeps_up_under_load.py --pods 1000``
runs it at size (docs/simulator.md, "Performance").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from airflow_k8s_retry_testing.cluster import FakeCluster


@dataclass(frozen=True)
class Spread:
    """p50/p99/max of a sample, in milliseconds."""

    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, seconds: list[float]) -> Spread:
        if not seconds:
            return cls(0, 0.0, 0.0, 0.0)
        ordered = sorted(seconds)

        def pick(q: float) -> float:
            return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)

        return cls(len(ordered), pick(0.5), pick(0.99), round(ordered[-1] * 1000, 2))


@dataclass(frozen=True)
class LoadReport:
    pods: int
    time_scale: float
    run_seconds: float
    succeeded: int
    makespan_s: float
    scripted_minimum_s: float
    create_wall_s: float
    timer_lag: Spread
    watch_lag: Spread
    server_request: Spread
    client_create: Spread
    watch_events: int
    simulator_cpu_s: float
    process_cpu_s: float
    peak_concurrent_running: int

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def _pod(name: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"loadcheck": "true"}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "base", "image": image, "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}
            ],
        },
    }


def _thread_cpu(native_id: int | None) -> float:
    """CPU seconds of one OS thread of this process (0 when unknown)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a test/bench dependency
        return 0.0
    for thread in psutil.Process().threads():
        if thread.id == native_id:
            return float(thread.user_time + thread.system_time)
    return 0.0


async def _drive(kubeconfig: str, pods: int, image: str, concurrency: int, limit_s: float) -> dict[str, Any]:
    import kubernetes_asyncio

    configuration = kubernetes_asyncio.client.Configuration()
    await kubernetes_asyncio.config.load_kube_config(
        config_file=kubeconfig, client_configuration=configuration
    )
    configuration.connection_pool_maxsize = concurrency + 4
    client = kubernetes_asyncio.client.ApiClient(configuration)
    api = kubernetes_asyncio.client.CoreV1Api(client)
    received: dict[int, float] = {}
    succeeded: set[str] = set()
    running: set[str] = set()
    peak = 0
    done = asyncio.Event()
    rv = (await api.list_namespaced_pod("default", label_selector="loadcheck=true")).metadata.resource_version

    async def follow() -> None:
        # Raw lines, parsed with json only: the timestamps measure arrival, not model building.
        nonlocal peak
        response = await api.list_namespaced_pod(
            "default",
            label_selector="loadcheck=true",
            resource_version=rv,
            watch=True,
            timeout_seconds=int(limit_s) + 5,
            _preload_content=False,
        )
        async for line in response.content:
            arrived = time.time()
            obj = json.loads(line)["object"]
            received[int(obj["metadata"]["resourceVersion"])] = arrived
            name = obj["metadata"]["name"]
            phase = (obj.get("status") or {}).get("phase")
            if phase == "Running":
                running.add(name)
                peak = max(peak, len(running))
            elif phase in ("Succeeded", "Failed"):
                running.discard(name)
                if phase == "Succeeded":
                    succeeded.add(name)
            if len(succeeded) >= pods:
                done.set()
                response.close()
                return

    follower = asyncio.create_task(follow())
    await asyncio.sleep(0.05)  # let the watch connect before the first create
    gate = asyncio.Semaphore(concurrency)
    create_latency: list[float] = []

    async def create(i: int) -> None:
        async with gate:
            started = time.perf_counter()
            await api.create_namespaced_pod("default", _pod(f"load-{i:05d}", image))
            create_latency.append(time.perf_counter() - started)

    first = time.time()
    await asyncio.gather(*(create(i) for i in range(pods)))
    created = time.time()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), limit_s)
    finished = time.time()
    follower.cancel()
    await client.close()
    return {
        "first": first,
        "created": created,
        "finished": finished,
        "received": received,
        "succeeded": len(succeeded),
        "create_latency": create_latency,
        "peak": peak,
    }


def run_loadcheck(
    pods: int = 1000,
    *,
    time_scale: float = 0.5,
    run_seconds: float = 20.0,
    concurrency: int = 64,
    timeout: float = 300.0,
    in_process_client: bool = False,
) -> LoadReport:
    """Drive ``pods`` concurrent pods (each running ``run_seconds`` simulated) and measure lag.

    The client runs in a subprocess by default, as Airflow's workers and triggerers would, so
    the numbers describe the simulator rather than contention with the client for the GIL.
    """
    image = "example.com/loadcheck:1"
    lines = "\n".join(f"step {i}" for i in range(5))
    scenario = {
        "images": {image: {"run": {"duration_seconds": run_seconds, "log": lines}}},
        "time_scale": time_scale,
    }
    with FakeCluster(scenario, history=max(50_000, pods * 20)) as cluster:
        native_id = cluster.thread_id
        import resource

        cpu_before = _thread_cpu(native_id)
        usage_before = resource.getrusage(resource.RUSAGE_SELF)
        if in_process_client:
            outcome = asyncio.run(_drive(str(cluster.kubeconfig), pods, image, concurrency, timeout))
        else:
            outcome = _drive_in_subprocess(str(cluster.kubeconfig), pods, image, concurrency, timeout)
        usage_after = resource.getrusage(resource.RUSAGE_SELF)
        cpu_after = _thread_cpu(native_id)
        records = cluster.audit_records()
        timer_lag = cluster.timer_lag()
        server = cluster.request_latencies()
    changed_at = {
        int(r["resourceVersion"]): r["t"]
        for r in records
        if r["kind"] == "lifecycle" and r.get("resourceVersion") and r["change"] != "created"
    }
    watch_lag = [outcome["received"][rv] - t for rv, t in changed_at.items() if rv in outcome["received"]]
    # Scripted path of one pod: schedule, admit, pull, run.
    scripted = (0.02 + 0.05 + 0.2 + run_seconds) * time_scale
    process_cpu = (usage_after.ru_utime + usage_after.ru_stime) - (
        usage_before.ru_utime + usage_before.ru_stime
    )
    return LoadReport(
        pods=pods,
        time_scale=time_scale,
        run_seconds=run_seconds,
        succeeded=outcome["succeeded"],
        makespan_s=round(outcome["finished"] - outcome["first"], 3),
        scripted_minimum_s=round(scripted, 3),
        create_wall_s=round(outcome["created"] - outcome["first"], 3),
        timer_lag=Spread.of(timer_lag),
        watch_lag=Spread.of([max(0.0, lag) for lag in watch_lag]),
        server_request=Spread.of(server),
        client_create=Spread.of(outcome["create_latency"]),
        watch_events=len(outcome["received"]),
        simulator_cpu_s=round(cpu_after - cpu_before, 3),
        process_cpu_s=round(process_cpu, 3),
        peak_concurrent_running=outcome["peak"],
    )


def _drive_in_subprocess(
    kubeconfig: str, pods: int, image: str, concurrency: int, limit_s: float
) -> dict[str, Any]:
    command = [
        sys.executable,
        __file__,
        "--client-of",
        kubeconfig,
        "--pods",
        str(pods),
        "--image",
        image,
        "--concurrency",
        str(concurrency),
        "--limit",
        str(limit_s),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=limit_s + 120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"load client failed ({done.returncode}): {done.stderr[-2000:]}")
    outcome: dict[str, Any] = json.loads(done.stdout)
    outcome["received"] = {int(k): v for k, v in outcome["received"].items()}
    return outcome


def test_fifty_concurrent_pods_finish_without_falling_behind() -> None:
    # Each pod runs 3 real seconds, long enough for all 50 creates to land while the first still run.
    report = run_loadcheck(50, time_scale=0.05, run_seconds=60.0, concurrency=16, timeout=60)
    assert report.succeeded == 50
    assert report.peak_concurrent_running == 50, "every pod ran at the same time"
    # Each pod's lifecycle changes (scheduled, creating, running, succeeded) reached the watch.
    assert report.watch_lag.count == 4 * 50
    assert report.timer_lag.count >= 50 * 8
    # The makespan is creation plus the scripted minimum, with slack for a loaded CI machine.
    assert report.makespan_s < report.create_wall_s + report.scripted_minimum_s + 5
    assert report.server_request.p50_ms < 50


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--time-scale", type=float, default=0.5)
    parser.add_argument("--run-seconds", type=float, default=20.0, help="simulated run time of each pod")
    parser.add_argument("--concurrency", type=int, default=64, help="concurrent create requests")
    parser.add_argument("--in-process-client", action="store_true", help="run the client in this process")
    parser.add_argument("--client-of", help=argparse.SUPPRESS)  # internal: be the load client only
    parser.add_argument("--image", default="example.com/loadcheck:1", help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=float, default=300.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client_of:
        outcome = asyncio.run(_drive(args.client_of, args.pods, args.image, args.concurrency, args.limit))
        print(json.dumps(outcome))
        return 0
    if args.pods < 1:
        parser.error("--pods must be at least 1")
    # Like ``serve()``: this process is the simulator's, so garbage is collected in larger batches.
    gc.freeze()
    gc.set_threshold(50_000, 20, 1_000)
    report = run_loadcheck(
        args.pods, time_scale=args.time_scale, run_seconds=args.run_seconds, concurrency=args.concurrency
    )
    print(report.to_json())
    return 0 if report.succeeded == report.pods else 1


if __name__ == "__main__":
    sys.exit(main())
