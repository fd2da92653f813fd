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
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_k8s_retry.kube.watch_settings import HubSettings
from bench.driver import SETUP_AGENT
from bench.harness import start_driver
from bench.simulator import SimulatorProcess

#: A phase's cluster: ``SimulatorProcess`` (the default) or
#: ``tools.controlplane.realcluster.RealCluster``, built from a work folder and a scenario dict, used
#: as a context manager with ``kubeconfig`` and ``records()``.
Backend = Callable[[Path, dict[str, Any]], Any]

SIDES = ("ours", "kpo")
#: What each side's event must say for the run to count (a wrong answer is not a fast answer).
EXPECTED = {
    "success": {"ours": "succeed", "kpo": "success"},
    "pull": {"ours": "retry", "kpo": "error"},
    "term": {"ours": "retry", "kpo": "failed"},
    "evict": {"ours": "relaunch", "kpo": "failed"},
}


def answers(kind: str, side: str, event: dict[str, Any]) -> bool:
    """Whether ``event`` is the right answer for a ``kind`` pod.

    An evicted pod with no termination grace is gone on a real API server before the cncf trigger's
    next GET, which then ends with ``error`` (404 Not Found): its way of reporting that pod, so it
    counts (on the simulator the pod is still readable and the trigger says ``failed``).
    """
    if event["status"] == EXPECTED[kind][side]:
        return True
    return kind == "evict" and side == "kpo" and event["status"] == "error" and "404" in str(event["reason"])


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
    workdir: Path,
    classes: list[LifecycleClass],
    *,
    time_scale: float,
    timeout: float,
    backend: Backend = SimulatorProcess,
) -> list[dict[str, Any]]:
    """Run every class on both sides at once; count each namespace's requests per pod."""
    images = {f"bench/run:{c.label}": {"run": {"duration_seconds": c.duration}} for c in classes}
    namespaces = [f"{side}-{c.label}" for side in SIDES for c in classes]
    scenario = {"time_scale": time_scale, "namespaces": namespaces, "images": images}
    with backend(workdir, scenario) as sim:
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


def latency_pods(
    namespace: str, kinds: dict[str, int], *, gated_after: float | None = None
) -> list[dict[str, Any]]:
    """The latency phase's pods; ``gated_after`` (the real backend): hold the pull pods by a
    scheduling gate for that long instead of an init container (its KWOK nodes play no init
    containers), and evict the evict pods from the driver that long after their trigger started
    (the disruptor counts from a pod's creation: under load a trigger could first look after the
    pod was already gone)."""
    pods: list[dict[str, Any]] = []
    for i in range(kinds.get("pull", 0)):
        pull: dict[str, Any] = {
            "name": f"pull-{i}",
            "namespace": namespace,
            "image": "bench/missing:1",
            "start_delay": "jitter",
        }
        if gated_after is None:
            pull["init_image"] = "bench/init:ok"
        else:
            pull["gate_seconds"] = gated_after
        pods.append(pull)
    for i in range(kinds.get("term", 0)):
        pods.append(
            {"name": f"term-{i}", "namespace": namespace, "image": "bench/fail:1", "start_delay": "jitter"}
        )
    for i in range(kinds.get("evict", 0)):
        evict: dict[str, Any] = {
            "name": f"evict-{i}",
            "namespace": namespace,
            "image": "bench/run:long",
            "start_delay": "jitter",
        }
        if gated_after is not None:
            evict["evict_seconds"] = gated_after
        pods.append(evict)
    return pods


#: PodStateTrigger's policy in the latency phase: act on a missing image at the first sighting, as
#: the cncf trigger does. By default it confirms "not found" for 90 s on purpose (registries flap).
LATENCY_POLICY = {"grace": {"image.not_found": 0}}


def run_latency(
    workdir: Path,
    kinds: dict[str, int],
    *,
    after: float = 6.0,
    timeout: float = 120,
    backend: Backend = SimulatorProcess,
) -> dict[str, Any]:
    """Each failure ``after`` seconds into a pod's life; time from the change to each side's event."""
    real = bool(getattr(backend, "real", False))
    scenario = latency_scenario(kinds, after)
    if real:
        del scenario["images"]["bench/init:ok"]
        del scenario["disruptions"]  # the drivers evict (latency_pods)
    with backend(workdir, scenario) as sim:
        drivers = []
        for side in SIDES:
            spec: dict[str, Any] = {
                "side": side,
                "mode": "complete",
                "pods": latency_pods(side, kinds, gated_after=after if real else None),
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
                if not answers(kind, side, event):
                    wrong.append(f"{name}: {event['status']} {event['reason']}")
                    continue
                latencies.append(event["t"] - change)
            statuses = Counter(str(e["status"]) for n, e in res["events"].items() if n.startswith(f"{kind}-"))
            entry[side] = {
                "statuses": dict(sorted(statuses.items())),
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


def footprint_spec(
    side: str, n: int, warmup: float, window: float, component_pids: dict[str, int] | None = None
) -> dict[str, Any]:
    """``component_pids``: also read those processes' CPU in the window and in an idle baseline
    window as long, taken once every pod runs and before any trigger starts."""
    pods = [{"name": f"steady-{i}", "namespace": side, "image": "bench/run:long"} for i in range(n)]
    spec = {
        "side": side,
        "mode": "footprint",
        "pods": pods,
        "warmup": warmup,
        "window": window,
        **side_kwargs(side, 1.0),
    }
    if component_pids:
        spec.update(component_pids=component_pids, baseline=window)
    return spec


def components_summary(res: dict[str, Any]) -> dict[str, Any]:
    """kube-apiserver's and etcd's CPU seconds per minute in the window, idle baseline, and the
    difference (what this side's triggers caused); empty on the simulator."""
    window, baseline = res["window"], res.get("baseline")
    used = window.get("components_cpu_seconds") or {}
    if not used or baseline is None:
        return {}
    seconds = window["end"] - window["start"]
    base_seconds = baseline["end"] - baseline["start"]
    out: dict[str, Any] = {}
    for name, cpu in used.items():
        per_minute = cpu / seconds * 60
        idle = baseline["components_cpu_seconds"][name] / base_seconds * 60
        out[name] = {
            "cpu_seconds_per_minute": per_minute,
            "baseline_cpu_seconds_per_minute": idle,
            "caused_cpu_seconds_per_minute": per_minute - idle,
        }
    out["settle_seconds"] = res.get("settle_seconds")
    out["baseline_seconds"] = base_seconds
    return out


def summarize_footprint(
    side: str, n: int, res: dict[str, Any], records: list[dict[str, Any]]
) -> dict[str, Any]:
    window = res["window"]
    seconds = window["end"] - window["start"]
    mine = requests_of(records, side)
    in_window = [r for r in mine if window["start"] <= r["t"] <= window["end"]]
    since_start = [r for r in mine if res["t_triggers_started"] <= r["t"] <= window["end"]]
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
        # Warm-up included: the LIST and WATCH a shared watch opens with count here.
        "requests_since_start": len(since_start),
        "seconds_since_start": window["end"] - res["t_triggers_started"],
        # What a poller asks for if it keeps up: one GET per pod per poll interval.
        "requests_per_second_nominal": n / KPO_POLL_INTERVAL if side == "kpo" else None,
        "pods_read_in_window": len({r.get("name") for r in in_window if r.get("verb") == "get"}),
        "request_errors": len(errors),
        "by_verb": dict(Counter(f"{r['verb']} {r['resource']}" for r in in_window)),
        "running_triggers": res["running_tasks"],
        "fired_early": res["fired_early"],
        "driver_errors": res["errors"][:5],
        "components": components_summary(res),
    }


def run_footprint(
    workdir: Path,
    n: int,
    *,
    warmup: float,
    window: float,
    sides: tuple[str, ...] = SIDES,
    concurrent: bool = False,
    backend: Backend = SimulatorProcess,
) -> list[dict[str, Any]]:
    """``n`` long-running pods watched by one process per side; one side at a time unless ``concurrent``."""
    limit = warmup + window + 180 + n / 20
    if getattr(backend, "real", False):
        limit += 900 + window + n / 10  # pods scheduled and Running, then the idle baseline
    out = []
    groups = [sides] if concurrent else [(s,) for s in sides]
    for group in groups:
        sub = workdir / f"n{n}-{'-'.join(group)}"
        with backend(sub, footprint_scenario(list(group))) as sim:
            pids = sim.component_pids() if hasattr(sim, "component_pids") else None
            drivers = [
                start_driver(
                    f"footprint-{side}-{n}",
                    footprint_spec(side, n, warmup, window, pids),
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
