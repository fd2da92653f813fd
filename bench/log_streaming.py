"""What ``logging_interval`` costs: API requests per pod-minute and triggerer CPU while each side's
trigger copies the base container's new log lines into its log, against the same pods without it.

Both triggers read the log themselves while the pod runs: ``PodStateTrigger`` one ``pods/log``
request per interval (``LogPosition`` in ``triggers/pod.py``), the cncf ``KubernetesPodTrigger``
one per interval on top of its ``get pods`` every 2 s (``fetch_container_logs_before_current_sec``).
Every variant (a side, with one interval or without) gets its own namespace, for the audit log's
counts, and its own driver process, for its CPU time; all run at once against one simulator at
real time (the interval is the thing measured, so it is not scaled). The containers write their
log over their whole run.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.driver import CONTAINER
from bench.harness import start_driver
from bench.phases import EXPECTED, SIDES, Backend, requests_of, side_kwargs
from bench.simulator import SimulatorProcess

#: One of the containers' log lines as a trigger logs it (each pod's lines are its own).
LINE = re.compile(rf"\[{CONTAINER}\] (line \d+-\d{{5}})\b")
LINES_PER_MINUTE = 60


@dataclass(frozen=True)
class Streaming:
    """The phase's size: pods of ``seconds`` run time, ``pods`` per variant, each interval in turn."""

    intervals: tuple[int, ...]
    seconds: float
    pods: int


def label(interval: int | None) -> str:
    return "off" if interval is None else f"{interval}s"


def namespace(side: str, interval: int | None) -> str:
    return f"{side}-log-{label(interval)}"


def streaming_scenario(plan: Streaming) -> dict[str, Any]:
    lines = max(1, round(plan.seconds * LINES_PER_MINUTE / 60))
    variants = (None, *plan.intervals)
    images = {
        image(pod): {
            "run": {
                "duration_seconds": plan.seconds,
                "log": "\n".join(f"line {pod}-{n:05d}" for n in range(1, lines + 1)),
            }
        }
        for pod in range(plan.pods)
    }
    return {
        "time_scale": 1.0,
        "namespaces": [namespace(side, i) for side in SIDES for i in variants],
        "images": images,
    }


def image(pod: int) -> str:
    return f"bench/log:{pod}"


def run_streaming(workdir: Path, plan: Streaming, *, backend: Backend = SimulatorProcess) -> dict[str, Any]:
    """Run every variant at once; per variant: requests per pod-minute, CPU, lines streamed."""
    scenario = streaming_scenario(plan)
    variants = (None, *plan.intervals)
    timeout = plan.seconds + 120
    with backend(workdir, scenario) as sim:
        drivers = {}
        for side in SIDES:
            for interval in variants:
                ns = namespace(side, interval)
                spec = {
                    "side": side,
                    "mode": "complete",
                    "pods": [
                        {"name": f"log-{i}", "namespace": ns, "image": image(i)} for i in range(plan.pods)
                    ],
                    "timeout": timeout,
                    "logging_interval": interval,
                    **side_kwargs(side, 1.0),
                }
                name = f"streaming-{side}-{label(interval)}"
                drivers[(side, interval)] = start_driver(
                    name, spec, workdir, sim.kubeconfig, timeout=timeout + 120
                )
        results = {key: d.result() for key, d in drivers.items()}
    records = sim.records()
    for key, driver in drivers.items():
        found = LINE.findall(driver.log.read_text(errors="replace"))
        results[key]["streamed_lines"], results[key]["streamed_distinct"] = len(found), len(set(found))
    rows = [
        summarize(side, interval, results[(side, interval)], records, plan)
        for side in SIDES
        for interval in variants
    ]
    lines = len(scenario["images"][image(0)]["run"]["log"].splitlines())
    return {"seconds": plan.seconds, "pods": plan.pods, "lines_per_pod": lines, "rows": rows}


def summarize(
    side: str, interval: int | None, res: dict[str, Any], records: list[dict[str, Any]], plan: Streaming
) -> dict[str, Any]:
    reqs = requests_of(records, namespace(side, interval))
    events, started = res["events"], res["started"]
    # Pod-minutes: each trigger from its start to its event (the pod's whole watched life).
    seconds = sum(events[n]["t"] - started[n] for n in events if n in started)
    minutes = seconds / 60 if seconds > 0 else None
    verbs = Counter(f"{r['verb']} {r['resource']}" for r in reqs)
    statuses = Counter(str(e.get("status")) for e in events.values())
    cpu = res.get("cpu_seconds")
    return {
        "side": side,
        "logging_interval": interval,
        "pods": plan.pods,
        "answered": statuses.get(EXPECTED["success"][side], 0),
        "statuses": dict(statuses),
        "errors": res.get("errors", []),
        "pod_minutes": minutes,
        "requests": len(reqs),
        "by_verb": dict(sorted(verbs.items())),
        "log_requests": verbs.get("get pods/log", 0),
        "requests_per_pod_minute": len(reqs) / minutes if minutes else None,
        "cpu_seconds": cpu,
        "cpu_ms_per_pod_minute": cpu * 1000 / minutes if minutes and cpu is not None else None,
        "streamed_lines": res.get("streamed_lines", 0),
        "streamed_distinct": res.get("streamed_distinct", 0),
    }


# -- the report --------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _times(top: float | None, bottom: float | None) -> str:
    if top is None or bottom is None or bottom <= 0:
        return "n/a"
    ratio = top / bottom
    return f"{ratio:,.0f}x" if ratio >= 10 else f"{ratio:.2f}x"


def _copied(row: dict[str, Any]) -> str:
    """Lines the trigger logged, and how many different ones when some were logged twice."""
    total, distinct = row["streamed_lines"], row.get("streamed_distinct", row["streamed_lines"])
    return str(total) if total == distinct else f"{total} ({distinct} different)"


def table(streaming: dict[str, Any]) -> list[str]:
    """The phase's table: one row per interval, both sides, with the ratios."""
    by = {(r["side"], r["logging_interval"]): r for r in streaming["rows"]}
    intervals = sorted({r["logging_interval"] for r in streaming["rows"]}, key=lambda i: (i is not None, i))
    lines = [
        "| `logging_interval` | PodStateTrigger req/pod-min (`pods/log`) | vs off | "
        "KubernetesPodTrigger req/pod-min (`pods/log`) | vs off | cncf / ours | "
        "PodStateTrigger CPU ms/pod-min | vs off | KubernetesPodTrigger CPU ms/pod-min | vs off | "
        "lines copied by the trigger (ours / cncf) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    off = {side: by.get((side, None)) for side in SIDES}
    expected = streaming["lines_per_pod"] * streaming["pods"]
    for interval in intervals:
        ours, kpo = by.get(("ours", interval)), by.get(("kpo", interval))
        if ours is None or kpo is None:
            continue
        cells = [f"{interval} s" if interval is not None else "off"]
        for row in (ours, kpo):
            base = off[row["side"]]
            rate = row["requests_per_pod_minute"]
            cells += [
                f"{_fmt(rate)} ({row['log_requests']})",
                "1" if interval is None else _times(rate, base and base["requests_per_pod_minute"]),
            ]
        cells.append(_times(kpo["requests_per_pod_minute"], ours["requests_per_pod_minute"]))
        for row in (ours, kpo):
            base = off[row["side"]]
            cpu = row["cpu_ms_per_pod_minute"]
            cells += [
                _fmt(cpu, 1),
                "1" if interval is None else _times(cpu, base and base["cpu_ms_per_pod_minute"]),
            ]
        cells.append("-" if interval is None else f"{_copied(ours)} / {_copied(kpo)} of {expected}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def section(streaming: dict[str, Any]) -> list[str]:
    """The report's section for this phase (``RESULTS.md`` and what ``make bench`` prints)."""
    unanswered = [
        f"{r['side']} {label(r['logging_interval'])}: {r['statuses']} {r['errors'][:2]}"
        for r in streaming["rows"]
        if r["answered"] != r["pods"]
    ]
    out = [
        f"{streaming['pods']} pods per variant, {streaming['seconds']:.0f} s each at real time, writing "
        f"{streaming['lines_per_pod']} log lines over their run; every variant in its own namespace "
        "and driver process, all at once. Requests from the simulator's audit log (pod creation "
        "excluded), per pod-minute of watched run time (the trigger's start to its event); in "
        "brackets the `pods/log` reads among them. CPU: the driver process from the triggers' start "
        'to their end. "vs off": the same side without `logging_interval`; "cncf / ours": '
        "KubernetesPodTrigger's requests divided by PodStateTrigger's. Lines copied: what the "
        "trigger logged while the pod ran (the worker writes the rest when the pod has ended), and, if "
        "some were logged twice, how many different ones.",
        "",
        *table(streaming),
    ]
    if unanswered:
        out += ["", "Pods without the expected event (figures not comparable): " + "; ".join(unanswered)]
    return out
