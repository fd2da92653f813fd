"""``make bench``: run every phase for both triggers and write ``bench/results/``.

Usage::

    .venv/bin/python -m bench.run            # the full run (about 15-20 minutes on 2 cores)
    .venv/bin/python -m bench.run --quick    # smaller N, scaled time, shortened grace (~5 minutes)
    .venv/bin/python -m bench.run --cluster real   # the same phases on a real kube-apiserver

Phases run in an order that keeps CPU measurements clean: the footprint runs first, one process
at a time, then detection latency; the classic Airflow failure runs in the background while the
request-count phases (which count requests, not CPU time) run, and so does ``logging_interval``'s
cost (it starts once the lifecycle's drivers are up and its pods end before the longest
lifecycle's, so it adds no time).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.log_streaming import Streaming
from bench.phases import Backend, LifecycleClass, run_footprint, run_latency, run_lifecycle
from bench.simulator import SimulatorProcess

RESULTS = Path(__file__).resolve().parent / "results"
PHASES = ("footprint", "latency", "lifecycle", "classic", "streaming")
#: Seconds the streaming phase waits when it runs beside the lifecycle phase: six driver processes
#: starting together with the lifecycle's on 2 cores delay those by some 15 s, and the lifecycle
#: phase is the run's tail.
STREAMING_AFTER = 30.0


@dataclass(frozen=True)
class Plan:
    """What one benchmark run measures, and how big."""

    name: str
    footprint_sizes: tuple[int, ...]
    footprint_window: float
    footprint_concurrent: bool
    latency_kinds: dict[str, int]
    latency_after: float
    lifecycle_real: tuple[LifecycleClass, ...]
    lifecycle_scaled: tuple[LifecycleClass, ...]
    lifecycle_scale: float
    classic: bool
    classic_grace: float | None
    #: ``logging_interval``'s cost (``bench/log_streaming.py``); None: not measured.
    streaming: Streaming | None = None
    notes: list[str] = field(default_factory=list)

    def warmup(self, n: int) -> float:
        base = 3.0 if self.name == "smoke" else 10.0
        return base + n / 100


FULL = Plan(
    name="full",
    footprint_sizes=(100, 1000, 5000),
    footprint_window=30.0,
    footprint_concurrent=False,
    latency_kinds={"pull": 20, "term": 20, "evict": 20},
    latency_after=6.0,
    lifecycle_real=(
        LifecycleClass("10s", 10, 10),
        LifecycleClass("60s", 60, 10),
        LifecycleClass("60s-alone", 60, 1),
        LifecycleClass("600s", 600, 10),
        LifecycleClass("600s-alone", 600, 1),
    ),
    # Everything at real time: scaling the cncf trigger's 2 s poll down to 0.2 s undercounts it
    # (each GET opens a new TLS connection, which then weighs as much as the interval itself).
    lifecycle_scaled=(),
    lifecycle_scale=1.0,
    classic=True,
    classic_grace=None,
    streaming=Streaming(intervals=(30, 60), seconds=510, pods=3),
)

QUICK = Plan(
    name="quick",
    footprint_sizes=(100, 1000),
    footprint_window=10.0,
    footprint_concurrent=False,
    latency_kinds={"pull": 5, "term": 5, "evict": 5},
    latency_after=6.0,
    lifecycle_real=(LifecycleClass("10s", 10, 3),),
    lifecycle_scaled=(
        LifecycleClass("60s", 60, 3),
        LifecycleClass("600s", 600, 3),
        LifecycleClass("600s-alone", 600, 1),
    ),
    lifecycle_scale=0.05,
    classic=True,
    classic_grace=3.0,
    streaming=Streaming(intervals=(30, 60), seconds=120, pods=2),
    notes=[
        "quick mode: smaller N, shorter windows, PodStateTrigger's not-found grace shortened to 3 s; "
        "the 60 s and 600 s pods run at time scale 0.05, which undercounts KubernetesPodTrigger's "
        "requests (see docs/benchmark.md, Time scaling)"
    ],
)

SMOKE = Plan(
    name="smoke",
    footprint_sizes=(20,),
    footprint_window=3.0,
    footprint_concurrent=True,
    latency_kinds={"pull": 2, "term": 2, "evict": 2},
    latency_after=4.0,
    lifecycle_real=(),
    lifecycle_scaled=(LifecycleClass("60s", 60, 2),),
    lifecycle_scale=0.1,
    classic=False,
    classic_grace=None,
    # The cncf trigger checks a starting pod every 5 s, then polls every 2 s and reads the log an
    # interval after its first poll of the running pod: a 30 s run leaves it 20 s of margin for
    # its first read on a busy machine (8 s left it none).
    streaming=Streaming(intervals=(2,), seconds=30, pods=1),
    notes=["smoke run: tiny N, both footprint processes at once (CPU figures not meaningful)"],
)

PLANS = {"full": FULL, "quick": QUICK, "smoke": SMOKE}


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def environment() -> dict[str, Any]:
    from importlib.metadata import version

    import psutil

    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": psutil.cpu_count(),
        "load_average_at_start": list(psutil.getloadavg()),
        "niceness": os.nice(0),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "apache-airflow": version("apache-airflow"),
        "apache-airflow-providers-cncf-kubernetes": version("apache-airflow-providers-cncf-kubernetes"),
        "kubernetes_asyncio": version("kubernetes_asyncio"),
    }


def run_plan(
    plan: Plan,
    workdir: Path,
    *,
    parallel_phases: bool = False,
    backend: Backend = SimulatorProcess,
    phases: tuple[str, ...] = PHASES,
) -> dict[str, Any]:
    """Run the ``phases`` of ``plan`` on ``backend``; returns the raw results (``results.json``)."""
    real = bool(getattr(backend, "real", False))
    results: dict[str, Any] = {
        "plan": asdict(plan),
        "backend": "real" if real else "simulator",
        "environment": environment(),
        "started": time.time(),
        "footprint": [],
        "errors": [],
        "load_average": {},
    }

    def footprint() -> list[dict[str, Any]]:
        return run_footprints(plan, workdir, backend, results)

    def latency() -> dict[str, Any]:
        log(f"latency: {plan.latency_kinds}")
        return run_latency(workdir / "latency", plan.latency_kinds, after=plan.latency_after, backend=backend)

    def lifecycle() -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        if plan.lifecycle_real:
            log("lifecycle at real time: " + ", ".join(c.label for c in plan.lifecycle_real))
            rows += run_lifecycle(
                workdir / "lifecycle-real",
                list(plan.lifecycle_real),
                time_scale=1.0,
                timeout=max_duration(plan),
                backend=backend,
            )
        if plan.lifecycle_scaled:
            log(
                f"lifecycle at time scale {plan.lifecycle_scale}: "
                + ", ".join(c.label for c in plan.lifecycle_scaled)
            )
            rows += run_lifecycle(
                workdir / "lifecycle-scaled",
                list(plan.lifecycle_scaled),
                time_scale=plan.lifecycle_scale,
                timeout=max(c.duration for c in plan.lifecycle_scaled) * plan.lifecycle_scale + 90,
                backend=backend,
            )
        return rows

    def classic() -> dict[str, Any]:
        from bench.classic import run_classic

        log("classic failure under airflow dags test (both operators)")
        return run_classic(workdir / "classic", not_found_grace=plan.classic_grace, backend=backend)

    def streaming() -> dict[str, Any]:
        from bench.log_streaming import run_streaming

        assert plan.streaming is not None
        if not parallel_phases and "lifecycle" in phases:
            time.sleep(STREAMING_AFTER)
        log(f"logging_interval's cost: intervals {plan.streaming.intervals} s, both sides")
        return run_streaming(workdir / "streaming", plan.streaming, backend=backend)

    wanted = {
        "classic": plan.classic,
        # KWOK nodes serve no logs (every pods/log read answers 500): nothing to stream on real.
        "streaming": plan.streaming is not None and not real,
    }
    with ThreadPoolExecutor(max_workers=4) as pool:
        if parallel_phases:
            futures = {"footprint": pool.submit(footprint), "latency": pool.submit(latency)}
            futures["lifecycle"] = pool.submit(lifecycle)
            if wanted["streaming"]:
                futures["streaming"] = pool.submit(streaming)
        else:
            # In this order, classic and streaming in the background of lifecycle (which counts
            # requests only).
            steps: dict[str, Callable[[], Any]] = {"footprint": footprint, "latency": latency}
            steps["classic"], steps["streaming"], steps["lifecycle"] = classic, streaming, lifecycle
            futures = {}
            for phase in (p for p in steps if p in phases and wanted.get(p, True)):
                if phase in ("classic", "streaming"):
                    futures[phase] = pool.submit(_with_load_average, results, phase, steps[phase])
                else:
                    results[phase] = _with_load_average(results, phase, steps[phase])
        for key, future in futures.items():
            results[key] = _outcome(key, future, results["errors"])
    results["finished"] = time.time()
    return results


def run_footprints(
    plan: Plan, workdir: Path, backend: Backend, results: dict[str, Any]
) -> list[dict[str, Any]]:
    """The footprint phase at every size of ``plan``; a size that fails is an error, not a row."""
    rows: list[dict[str, Any]] = []
    for n in plan.footprint_sizes:
        log(f"footprint: {n} pods per side")
        _load_average(results, f"footprint N={n}", "start")
        try:
            rows.extend(
                run_footprint(
                    workdir / "footprint",
                    n,
                    warmup=plan.warmup(n),
                    window=plan.footprint_window,
                    concurrent=plan.footprint_concurrent,
                    backend=backend,
                )
            )
        except Exception as exc:  # a size the machine cannot carry is reported, not faked
            log(f"footprint {n} failed: {exc}")
            results["errors"].append(f"footprint N={n}: {type(exc).__name__}: {str(exc)[:500]}")
        _load_average(results, f"footprint N={n}", "end")
    return rows


def _load_average(results: dict[str, Any], phase: str, when: str) -> None:
    results["load_average"].setdefault(phase, {})[when] = [round(x, 2) for x in os.getloadavg()]


def _with_load_average(results: dict[str, Any], phase: str, step: Callable[[], Any]) -> Any:
    """``step()``, with the load average noted at its start and end (footprint notes its own per N),
    and its wall time in ``results["phase_seconds"]``."""
    if phase != "footprint":
        _load_average(results, phase, "start")
    started = time.monotonic()
    try:
        return step()
    finally:
        results.setdefault("phase_seconds", {})[phase] = round(time.monotonic() - started, 1)
        if phase != "footprint":
            _load_average(results, phase, "end")


def merge(old: dict[str, Any], new: dict[str, Any], phases: tuple[str, ...]) -> dict[str, Any]:
    """``new``'s phases over ``old``'s; footprint rows are kept per (side, N) unless re-run."""
    out = {**old, "finished": new["finished"], "environment": new["environment"], "plan": new["plan"]}
    out["errors"] = [*old.get("errors", []), *new["errors"]]
    out["load_average"] = {**old.get("load_average", {}), **new.get("load_average", {})}
    out["phase_seconds"] = {**old.get("phase_seconds", {}), **new.get("phase_seconds", {})}
    out["runs"] = [*old.get("runs", [_span(old)]), _span(new)]
    for phase in phases:
        if phase == "footprint":
            redone = {r["n"] for r in new["footprint"]}
            out["footprint"] = [r for r in old.get("footprint", []) if r["n"] not in redone] + new[
                "footprint"
            ]
        elif phase in new:
            out[phase] = new[phase]
    out["started"] = old["started"]
    return out


def _span(results: dict[str, Any]) -> dict[str, Any]:
    return {
        "started": results["started"],
        "finished": results["finished"],
        "load_average_at_start": results["environment"]["load_average_at_start"],
    }


def max_duration(plan: Plan) -> float:
    return max(c.duration for c in plan.lifecycle_real) + 90


def _outcome(key: str, future: Future[Any], errors: list[str]) -> Any:
    try:
        return future.result()
    except Exception as exc:
        log(f"{key} failed: {exc}")
        errors.append(f"{key}: {type(exc).__name__}: {str(exc)[:500]}")
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller N and scaled time (about 5 minutes)")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"results directory (default {RESULTS})")
    parser.add_argument(
        "--keep-work", action="store_true", help="keep the work directory (audit logs, driver logs)"
    )
    parser.add_argument(
        "--cluster",
        choices=("sim", "real"),
        default="sim",
        help="sim: the simulator (default); real: kube-apiserver, etcd and KWOK nodes "
        "('make controlplane' first); results in bench/results/real/ unless --out",
    )
    parser.add_argument("--sizes", help="footprint sizes, comma-separated (default: the plan's)")
    parser.add_argument(
        "--phases",
        default=",".join(PHASES),
        help=f"phases to run, comma-separated (default {','.join(PHASES)})",
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the figures of the phases not run (and footprint sizes not re-run) from OUT/results.json",
    )
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.sizes:
        plan = replace(plan, footprint_sizes=tuple(int(x) for x in args.sizes.split(",")))
    phases = tuple(p.strip() for p in args.phases.split(",") if p.strip())
    unknown = sorted(set(phases) - set(PHASES))
    if unknown:
        parser.error(f"--phases: unknown {', '.join(unknown)}; choose from {', '.join(PHASES)}")
    backend: Backend = SimulatorProcess
    out_dir: Path = args.out
    if args.cluster == "real":
        from tools.controlplane.realcluster import RealCluster, binaries

        binaries()  # fails at once, saying what to do, if the control plane is not built
        backend = RealCluster
        if out_dir == RESULTS:
            out_dir = RESULTS / "real"
    work = Path(tempfile.mkdtemp(prefix="bench-work-"))
    log(f"plan {plan.name} on {args.cluster}; phases {', '.join(phases)}; work directory {work}")
    try:
        results = run_plan(plan, work, backend=backend, phases=phases)
    finally:
        if not args.keep_work:
            shutil.rmtree(work, ignore_errors=True)
    from bench.report import write_report

    out_dir.mkdir(parents=True, exist_ok=True)
    if args.merge and (out_dir / "results.json").exists():
        results = merge(json.loads((out_dir / "results.json").read_text()), results, phases)
    (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=str))
    written = write_report(results, out_dir)
    if results.get("streaming"):
        from bench.log_streaming import section

        log("logging_interval's cost:\n" + "\n".join(section(results["streaming"])))
    log("wrote " + ", ".join(str(p) for p in written))
    log(f"total {results['finished'] - results['started']:.0f} s; errors: {results['errors'] or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
