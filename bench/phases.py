"""The measured phases: API requests per pod lifecycle, detection latency, triggerer footprint.

Each phase starts its own simulator process with its own scenario and audit log, runs one driver
process per side (ours: ``PodStateTrigger``; kpo: the cncf ``KubernetesPodTrigger``), and turns
the audit log plus what the drivers wrote into plain numbers. The sides use separate namespaces,
so every request in the audit log is attributed to a side (and a duration class) by its
namespace; pod creation by the drivers carries its own User-Agent and is left out of the counts.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_k8s_retry.kube.watch_settings import HubSettings
from bench.driver import SETUP_AGENT
from bench.harness import start_driver
from bench.simulator import SimulatorProcess

SIDES = ("ours", "kpo")
#: What each side's event must say for the run to count (a wrong answer is not a fast answer).
EXPECTED = {
    "success": {"ours": "succeed", "kpo": "success"},
    "pull": {"ours": "retry", "kpo": "error"},
    "term": {"ours": "retry", "kpo": "failed"},
    "evict": {"ours": "relaunch", "kpo": "failed"},
}
#: Lifecycle changes (audit ``change`` values) that first show each failure through the API.
SIGNALS = {
    "pull": ("waiting:ErrImagePull",),
    "term": ("terminated:", "phase:Failed"),
    "evict": ("disruption:",),
}
#: The cncf trigger's defaults, as the deferrable KubernetesPodOperator passes them.
KPO_POLL_INTERVAL = 2.0
KPO_STARTUP_CHECK_INTERVAL = 5.0
#: PodStateTrigger's server-side watch timeout range, as the package ships it.
HUB_WATCH_TIMEOUT = HubSettings().watch_timeout


def percentile(values: Iterable[float], q: float) -> float | None:
    """Percentile with linear interpolation between closest ranks (numpy's default); None for no values."""
    data = sorted(values)
    if not data:
        return None
    position = (len(data) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (position - low)


def requests_of(records: Iterable[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """API requests made in ``namespace`` by a trigger (the drivers' pod creation left out)."""
    return [
        r
        for r in records
        if r.get("kind") == "request"
        and r.get("namespace") == namespace
        and not str(r.get("user_agent", "")).startswith(SETUP_AGENT.split("/")[0])
    ]


def side_kwargs(side: str, scale: float) -> dict[str, Any]:
    """Every time constant of a side, multiplied by ``scale`` (1.0 = production defaults)."""
    if side == "kpo":
        return {
            "kpo": {
                "poll_interval": KPO_POLL_INTERVAL * scale,
                "startup_check_interval": KPO_STARTUP_CHECK_INTERVAL * scale,
            }
        }
    low, high = HUB_WATCH_TIMEOUT
    return {"watch_timeout": [max(1, round(low * scale)), max(2, round(high * scale))]}


# -- 1. API requests per pod lifecycle ---------------------------------------------------------


@dataclass(frozen=True)
class LifecycleClass:
    """Pods of one duration (simulated seconds), ``pods`` of them at once in one namespace."""

    label: str
    duration: float
    pods: int


def run_lifecycle(
    workdir: Path, classes: list[LifecycleClass], *, time_scale: float, timeout: float
) -> list[dict[str, Any]]:
    """Run every class on both sides at once; count each namespace's requests per pod."""
    images = {f"bench/run:{c.label}": {"run": {"duration_seconds": c.duration}} for c in classes}
    namespaces = [f"{side}-{c.label}" for side in SIDES for c in classes]
    scenario = {"time_scale": time_scale, "namespaces": namespaces, "images": images}
    with SimulatorProcess(workdir, scenario) as sim:
        drivers = []
        for side in SIDES:
            pods = [
                {
                    "name": f"life-{c.label}-{i}",
                    "namespace": f"{side}-{c.label}",
                    "image": f"bench/run:{c.label}",
                }
                for c in classes
                for i in range(c.pods)
            ]
            spec = {
                "side": side,
                "mode": "complete",
                "pods": pods,
                "timeout": timeout,
                **side_kwargs(side, time_scale),
            }
            drivers.append(
                start_driver(f"lifecycle-{side}", spec, workdir, sim.kubeconfig, timeout=timeout + 120)
            )
        results = {side: d.result() for side, d in zip(SIDES, drivers, strict=True)}
    records = sim.records()
    rows = []
    for c in classes:
        row: dict[str, Any] = {
            "label": c.label,
            "duration": c.duration,
            "pods": c.pods,
            "time_scale": time_scale,
            "real_seconds": c.duration * time_scale,
        }
        for side in SIDES:
            ns = f"{side}-{c.label}"
            reqs = requests_of(records, ns)
            names = [f"life-{c.label}-{i}" for i in range(c.pods)]
            events = results[side]["events"]
            answered = [n for n in names if events.get(n, {}).get("status") == EXPECTED["success"][side]]
            verbs = Counter(f"{r['verb']} {r['resource']}" for r in reqs)
            row[side] = {
                "total": len(reqs),
                "per_pod": len(reqs) / c.pods,
                "by_verb": dict(sorted(verbs.items())),
                "by_verb_per_pod": {k: v / c.pods for k, v in sorted(verbs.items())},
                "answered": len(answered),
                "statuses": dict(Counter(str(events.get(n, {}).get("status")) for n in names)),
            }
        rows.append(row)
    return rows


# -- 2. detection latency ----------------------------------------------------------------------


def latency_scenario(kinds: dict[str, int], after: float) -> dict[str, Any]:
    return {
        "time_scale": 1.0,
        "namespaces": list(SIDES),
        "images": {
            "bench/init:ok": {"run": {"duration_seconds": after}},
            "bench/missing:1": {"pull": "not_found"},
            "bench/fail:1": {"run": {"duration_seconds": after, "exit_code": 1}},
            "bench/run:long": {"run": {"duration_seconds": 100000}},
        },
        "disruptions": [
            {"pod_name_prefix": "evict-", "after_seconds": after, "kind": "evict", "count": "all"}
        ],
    }


def latency_pods(namespace: str, kinds: dict[str, int]) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = []
    for i in range(kinds.get("pull", 0)):
        pods.append(
            {
                "name": f"pull-{i}",
                "namespace": namespace,
                "image": "bench/missing:1",
                "init_image": "bench/init:ok",
                "start_delay": "jitter",
            }
        )
    for i in range(kinds.get("term", 0)):
        pods.append(
            {"name": f"term-{i}", "namespace": namespace, "image": "bench/fail:1", "start_delay": "jitter"}
        )
    for i in range(kinds.get("evict", 0)):
        pods.append(
            {"name": f"evict-{i}", "namespace": namespace, "image": "bench/run:long", "start_delay": "jitter"}
        )
    return pods


#: PodStateTrigger's policy in the latency phase: act on a missing image at the first sighting, as
#: the cncf trigger does. By default it confirms "not found" for 90 s on purpose (registries flap).
LATENCY_POLICY = {"grace": {"image.not_found": 0}}


def run_latency(
    workdir: Path, kinds: dict[str, int], *, after: float = 6.0, timeout: float = 120
) -> dict[str, Any]:
    """Each failure ``after`` seconds into a pod's life; time from the change to each side's event."""
    with SimulatorProcess(workdir, latency_scenario(kinds, after)) as sim:
        drivers = []
        for side in SIDES:
            spec: dict[str, Any] = {
                "side": side,
                "mode": "complete",
                "pods": latency_pods(side, kinds),
                "timeout": timeout,
                "jitter": KPO_POLL_INTERVAL,
                "seed": 7,
                **side_kwargs(side, 1.0),
            }
            if side == "ours":
                spec["policy"] = LATENCY_POLICY
            drivers.append(
                start_driver(f"latency-{side}", spec, workdir, sim.kubeconfig, timeout=timeout + 120)
            )
        results = {side: d.result() for side, d in zip(SIDES, drivers, strict=True)}
    records = sim.records()
    out: dict[str, Any] = {"after": after, "kinds": {}}
    for kind in kinds:
        entry: dict[str, Any] = {}
        for side in SIDES:
            res = results[side]
            latencies, wrong, missing = [], [], []
            for name, info in res["created"].items():
                if not name.startswith(f"{kind}-"):
                    continue
                change = first_change(records, info["uid"], SIGNALS[kind])
                event = res["events"].get(name)
                if event is None or change is None:
                    missing.append(name)
                    continue
                if event["status"] != EXPECTED[kind][side]:
                    wrong.append(f"{name}: {event['status']} {event['reason']}")
                    continue
                latencies.append(event["t"] - change)
            entry[side] = {
                "n": len(latencies),
                "p50": percentile(latencies, 50),
                "p99": percentile(latencies, 99),
                "max": max(latencies) if latencies else None,
                "mean": statistics.fmean(latencies) if latencies else None,
                "samples": sorted(latencies),
                "wrong": wrong,
                "missing": missing,
            }
        out["kinds"][kind] = entry
    return out


def first_change(records: Iterable[dict[str, Any]], uid: str, prefixes: tuple[str, ...]) -> float | None:
    """Audit time of the first lifecycle change of pod ``uid`` that starts with one of ``prefixes``."""
    for r in records:
        if (
            r.get("kind") == "lifecycle"
            and r.get("uid") == uid
            and str(r.get("change", "")).startswith(prefixes)
        ):
            return float(r["t"])
    return None


# -- 3. triggerer footprint ---------------------------------------------------------------------


def footprint_scenario(namespaces: list[str]) -> dict[str, Any]:
    return {
        "time_scale": 1.0,
        "namespaces": namespaces,
        "images": {"bench/run:long": {"run": {"duration_seconds": 1_000_000}}},
    }


def footprint_spec(side: str, n: int, warmup: float, window: float) -> dict[str, Any]:
    pods = [{"name": f"steady-{i}", "namespace": side, "image": "bench/run:long"} for i in range(n)]
    return {
        "side": side,
        "mode": "footprint",
        "pods": pods,
        "warmup": warmup,
        "window": window,
        **side_kwargs(side, 1.0),
    }


def summarize_footprint(
    side: str, n: int, res: dict[str, Any], records: list[dict[str, Any]]
) -> dict[str, Any]:
    window = res["window"]
    seconds = window["end"] - window["start"]
    in_window = [r for r in requests_of(records, side) if window["start"] <= r["t"] <= window["end"]]
    lags = res.get("lags") or []
    rss = res.get("rss") or []
    errors = [r for r in in_window if int(r.get("status") or 0) >= 400 or r.get("status") == 0]
    return {
        "side": side,
        "n": n,
        "window_seconds": seconds,
        "cpu_seconds_per_minute": window["cpu_seconds"] / seconds * 60,
        "cpu_cores": window["cpu_seconds"] / seconds,
        "rss_peak_mb": (max(rss) if rss else res["rss_end"]) / 2**20,
        "rss_before_triggers_mb": res["rss_before_triggers"] / 2**20,
        "ru_maxrss_mb": res["ru_maxrss_bytes"] / 2**20,
        "loop_lag_p99_ms": percentile(lags, 99) * 1000 if lags else None,
        "loop_lag_max_ms": max(lags) * 1000 if lags else None,
        "loop_lag_samples": len(lags),
        "requests_per_second": len(in_window) / seconds,
        # What a poller asks for if it keeps up: one GET per pod per poll interval.
        "requests_per_second_nominal": n / KPO_POLL_INTERVAL if side == "kpo" else None,
        "pods_read_in_window": len({r.get("name") for r in in_window if r.get("verb") == "get"}),
        "request_errors": len(errors),
        "by_verb": dict(Counter(f"{r['verb']} {r['resource']}" for r in in_window)),
        "running_triggers": res["running_tasks"],
        "fired_early": res["fired_early"],
        "driver_errors": res["errors"][:5],
    }


def run_footprint(
    workdir: Path,
    n: int,
    *,
    warmup: float,
    window: float,
    sides: tuple[str, ...] = SIDES,
    concurrent: bool = False,
) -> list[dict[str, Any]]:
    """``n`` long-running pods watched by one process per side; one side at a time unless ``concurrent``."""
    limit = warmup + window + 180 + n / 20
    out = []
    groups = [sides] if concurrent else [(s,) for s in sides]
    for group in groups:
        sub = workdir / f"n{n}-{'-'.join(group)}"
        with SimulatorProcess(sub, footprint_scenario(list(group))) as sim:
            drivers = [
                start_driver(
                    f"footprint-{side}-{n}",
                    footprint_spec(side, n, warmup, window),
                    sub,
                    sim.kubeconfig,
                    timeout=limit,
                )
                for side in group
            ]
            results = [d.result() for d in drivers]
        records = sim.records()
        out.extend(
            summarize_footprint(side, n, res, records) for side, res in zip(group, results, strict=True)
        )
    return out
