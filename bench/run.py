"""``make bench``: run every phase for both triggers and write ``bench/results/``.

Usage::

    .venv/bin/python -m bench.run            # the full run (about 15-20 minutes on 2 cores)
    .venv/bin/python -m bench.run --quick    # smaller N, scaled time, shortened grace (~5 minutes)

Phases run in an order that keeps CPU measurements clean: the footprint runs first, one process
at a time, then detection latency; the classic Airflow failure runs in the background while the
request-count phases (which count requests, not CPU time) run.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.phases import LifecycleClass, run_footprint, run_latency, run_lifecycle

RESULTS = Path(__file__).resolve().parent / "results"


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
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "apache-airflow": version("apache-airflow"),
        "apache-airflow-providers-cncf-kubernetes": version("apache-airflow-providers-cncf-kubernetes"),
        "kubernetes_asyncio": version("kubernetes_asyncio"),
    }


def run_plan(plan: Plan, workdir: Path, *, parallel_phases: bool = False) -> dict[str, Any]:
    """Run every phase of ``plan``; returns the raw results (what ``results.json`` holds)."""
    results: dict[str, Any] = {
        "plan": asdict(plan),
        "environment": environment(),
        "started": time.time(),
        "footprint": [],
        "errors": [],
    }

    def footprint() -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for n in plan.footprint_sizes:
            log(f"footprint: {n} pods per side")
            try:
                rows.extend(
                    run_footprint(
                        workdir / "footprint",
                        n,
                        warmup=plan.warmup(n),
                        window=plan.footprint_window,
                        concurrent=plan.footprint_concurrent,
                    )
                )
            except Exception as exc:  # a size the machine cannot carry is reported, not faked
                log(f"footprint {n} failed: {exc}")
                results["errors"].append(f"footprint N={n}: {type(exc).__name__}: {str(exc)[:500]}")
        return rows

    def latency() -> dict[str, Any]:
        log(f"latency: {plan.latency_kinds}")
        return run_latency(workdir / "latency", plan.latency_kinds, after=plan.latency_after)

    def lifecycle() -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        if plan.lifecycle_real:
            log("lifecycle at real time: " + ", ".join(c.label for c in plan.lifecycle_real))
            rows += run_lifecycle(
                workdir / "lifecycle-real",
                list(plan.lifecycle_real),
                time_scale=1.0,
                timeout=max_duration(plan),
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
            )
        return rows

    def classic() -> dict[str, Any]:
        from bench.classic import run_classic

        log("classic failure under airflow dags test (both operators)")
        return run_classic(workdir / "classic", not_found_grace=plan.classic_grace)

    with ThreadPoolExecutor(max_workers=4) as pool:
        if parallel_phases:
            futures = {"footprint": pool.submit(footprint), "latency": pool.submit(latency)}
            futures["lifecycle"] = pool.submit(lifecycle)
        else:
            results["footprint"] = footprint()
            results["latency"] = latency()
            futures = {}
            if plan.classic:
                futures["classic"] = pool.submit(classic)
            results["lifecycle"] = lifecycle()
        for key, future in futures.items():
            results[key] = _outcome(key, future, results["errors"])
    results["finished"] = time.time()
    return results


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
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    work = Path(tempfile.mkdtemp(prefix="bench-work-"))
    log(f"plan {plan.name}; work directory {work}")
    try:
        results = run_plan(plan, work)
    finally:
        if not args.keep_work:
            shutil.rmtree(work, ignore_errors=True)
    from bench.report import write_report

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    written = write_report(results, args.out)
    log("wrote " + ", ".join(str(p) for p in written))
    log(f"total {results['finished'] - results['started']:.0f} s; errors: {results['errors'] or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
