"""``make chaos``: seeded randomized runs in parallel processes, a summary, and the report.

Usage::

    python -m tests.chaos.run --runs 1000 --jobs 2 --report docs/reliability.md
    python -m tests.chaos.run --seed 17          # replay one run and explain it (make chaos SEED=17)

Each process keeps one simulator and runs its seeds one after another; the package's logs go to
``--logs`` (one file per process), so the terminal shows only results. Exit status 1 when any run
violated an invariant.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from tests.soak.section import section_of
from tools.airflow_home import use_throwaway_airflow_home

_ENV: Any = None


def _airflow_home() -> None:
    """A throw-away AIRFLOW_HOME (never the user's own), as the test suite uses."""
    use_throwaway_airflow_home("airflow-k8s-retry-chaos-")


def _init(logs: str) -> None:
    """In each worker process: logs to a file, then one simulator for all of its runs."""
    global _ENV  # noqa: PLW0603 - one simulator per worker process, made by its initializer
    _airflow_home()
    Path(logs).mkdir(parents=True, exist_ok=True)
    log = os.open(Path(logs) / f"chaos-{os.getpid()}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    from tests.chaos.harness import Environment

    _ENV = Environment()


def _one(seed: int) -> dict[str, Any]:
    from tests.chaos.harness import run_seed
    from tests.chaos.known import diagnose

    result = run_seed(_ENV, seed)
    data = result.to_json()
    data["explain"] = result.explain()
    data["causes"] = sorted({diagnose(v, result) for v in result.violations})
    return data


def run_many(seeds: list[int], jobs: int, logs: str, progress: bool = True) -> list[dict[str, Any]]:
    import multiprocessing

    results: list[dict[str, Any]] = []
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        max_workers=jobs, mp_context=context, initializer=_init, initargs=(logs,)
    ) as pool:
        futures = {pool.submit(_one, seed): seed for seed in seeds}
        for done, future in enumerate(as_completed(futures), 1):
            data = future.result()
            results.append(data)
            if data["violations"]:
                print(
                    f"seed {data['seed']}: {len(data['violations'])} violation(s) "
                    f"[{', '.join(data['causes'])}] -> make chaos SEED={data['seed']}",
                    flush=True,
                )
            if progress and done % 100 == 0:
                print(f"... {done}/{len(seeds)} runs", flush=True)
    return sorted(results, key=lambda d: d["seed"])


def summary(results: list[dict[str, Any]], wall: float, jobs: int) -> dict[str, Any]:
    faults: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    causes: Counter[str] = Counter()
    fate_kinds: Counter[str] = Counter()
    by_cause: dict[str, list[int]] = {}
    for data in results:
        for key, count in data["faults_hit"].items():
            faults[key] += count
        for v in data["violations"]:
            kinds[v["kind"]] += 1
        for cause in data["causes"]:
            causes[cause] += 1
            by_cause.setdefault(cause, []).append(data["seed"])
        fate_kinds[data["plan"].split()[0].removeprefix("fate=")] += 1
    slowest = max(results, key=lambda d: d["real_seconds"]) if results else None
    times = sorted(d["real_seconds"] for d in results)
    return {
        "runs": len(results),
        "failing_runs": sum(1 for d in results if d["violations"]),
        "violations": sum(kinds.values()),
        "violation_kinds": dict(kinds.most_common()),
        "causes": dict(causes.most_common()),
        "seeds_by_cause": {k: v[:8] for k, v in by_cause.items()},
        "faults_hit": dict(faults.most_common()),
        "fates": dict(fate_kinds.most_common()),
        "triggerer_events": Counter(
            w.split("=")[1].split("@")[0]
            for d in results
            for w in d["plan"].split()
            if w.startswith("triggerer=")
        ),
        "worker_events": Counter(
            w.split("=")[1].split("#")[0]
            for d in results
            for w in d["plan"].split()
            if w.startswith("worker=")
        ),
        "user_kills": Counter(
            w.split("=")[1].split("@")[0] for d in results for w in d["plan"].split() if w.startswith("user=")
        ),
        "faults_by_kind": dict(
            sum((Counter({k.split()[0]: n}) for d in results for k, n in d["faults_hit"].items()), Counter())
        ),
        "xcom_push_503": sum(1 for d in results if "airflow=xcom_push_503" in d["plan"]),
        "wall_seconds": round(wall, 1),
        "jobs": jobs,
        "median_run_seconds": round(times[len(times) // 2], 3) if times else 0.0,
        "slowest": {k: slowest[k] for k in ("seed", "plan", "real_seconds", "sim_seconds")}
        if slowest
        else None,
    }


def report(summary_data: dict[str, Any], first: int, command: str) -> str:
    from tests.chaos.known import CAUSES

    s = summary_data
    lines = [
        "# Reliability: the chaos suite",
        "",
        "Produced by `" + command + "` (`tests/chaos/run.py`); re-run it to refresh this page.",
        "Every run is seeded: `make chaos SEED=N` replays run N and explains what happened. The seed",
        "fixes everything the run draws (fate, arguments, faults and when they start, the triggerer",
        "event, the crash point, the kill), and the runs go on a discrete simulated clock that moves",
        "only while the worker, the triggerers and the simulator are all idle, so a replay gives the",
        "same verdicts, violations and simulated end time on a loaded machine as on an idle one.",
        "",
        "Each run drives one task the way Airflow does (execute, `TaskDeferred`, the trigger rebuilt from",
        "its `serialize()` kwargs in a triggerer, `resume_execution` with the event, `on_kill`, Airflow's",
        "retry rule) against `FakeCluster` on that clock, with a drawn pod fate, API faults, a",
        "triggerer restart, `kill -9` or stalled hand-over, a worker crash, a user's kill (while the",
        "task runs, while it is deferred, or while it waits for a worker after its trigger fired) or",
        "the worker's `execution_timeout` alarm, and checks the invariants from the simulator's audit",
        "log and the task's state afterwards. A kill of a running task is heard of by the worker 0-3",
        "calls later (its supervisor's heartbeat; a deferral meanwhile is refused, with no `on_kill`),",
        "then the SIGTERM lands while a call is under way: `on_kill` runs, and the task's code goes on",
        "for 0-3 calls before the supervisor's SIGKILL. Disrupted pods' containers take a drawn 0.5-29 s",
        "to stop after SIGTERM; half of the",
        "stalled hand-overs thaw the moment the other triggerer's verdict is accepted; a dead worker's",
        "last try gets Airflow's failure callbacks.",
        "",
        "## Totals",
        "",
        "| | |",
        "|---|---|",
        f"| runs | {s['runs']} (seeds {first}-{first + s['runs'] - 1}) |",
        f"| runs with a violation | {s['failing_runs']} |",
        f"| invariant violations | {s['violations']} |",
        f"| wall time | {s['wall_seconds']} s on {s['jobs']} processes |",
        f"| median run | {s['median_run_seconds']} s |",
    ]
    if s["slowest"]:
        slow = s["slowest"]
        lines.append(
            f"| slowest run | seed {slow['seed']}: {slow['real_seconds']} s real, "
            f"{slow['sim_seconds']:.0f} s simulated |"
        )
        lines += ["", f"Slowest run's plan: `{slow['plan']}`"]
    lines += ["", "## Violations by invariant", "", "| invariant broken | count |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in s["violation_kinds"].items()] or ["| (none) | 0 |"]
    lines += [
        "",
        "## Violations by cause",
        "",
        "| cause | review item | runs | example seeds |",
        "|---|---|---|---|",
    ]
    for cause, count in s["causes"].items():
        item, text = CAUSES.get(cause, ("?", cause))
        seeds = ", ".join(str(x) for x in s["seeds_by_cause"].get(cause, []))
        lines.append(f"| {text} | {item} | {count} | {seeds} |")
    if not s["causes"]:
        lines.append("| (none) | | 0 | |")
    lines += ["", "## Faults injected", "", "Requests that hit an injected API fault, by kind:", ""]
    lines += ["| fault | hits |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(s.get("faults_by_kind", {}).items(), key=lambda kv: -kv[1])]
    lines += [
        "",
        f"Runs in which the execution API failed one XCom push (an Airflow-side fault): "
        f"{s.get('xcom_push_503', 0)}.",
        "",
        "By kind and verb:",
        "",
        "| fault | hits |",
        "|---|---|",
    ]
    lines += [f"| {k} | {v} |" for k, v in s["faults_hit"].items()]
    lines += ["", "## What the runs drew", "", "| pod fate | runs |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in s["fates"].items()]
    lines += ["", "| triggerer event | runs |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in s["triggerer_events"].items()]
    lines += ["", "| worker event | runs |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in s["worker_events"].items()]
    lines += ["", "| user kill drawn while deferred or waiting for a worker | runs |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in s["user_kills"].items()]
    lines += ["", *INVARIANTS.splitlines(), "", *LIMITS.splitlines(), "", *MODEL.read_text().splitlines()]
    lines.append("")
    return "\n".join(lines)


INVARIANTS = """## Invariants checked after every run

| invariant | what breaks it |
|---|---|
| `two_pods_running` | two pods of the task ran at once (any tries) |
| `two_pods_running_in_one_try` | a relaunch ran beside the disrupted pod of the same try (review #8) |
| `duplicate_pod` | a second pod created for one try and relaunch |
| `leaked_pod` | a pod left behind, unless kept on purpose and stamped |
| `two_verdicts`, `no_verdict` | not exactly one verdict per pod |
| `conflicting_verdicts` | a stamp that disagrees with the verdict acted on |
| `deleted_under_the_worker` | a triggerer deleted a pod its worker was acting on (review #5) |
| `hang`, `not_terminal` | a task that did not end within its bound |
| `retries_skipped` | failed with retries left, for a cause that is not permanent (review #7) |
| `wrong_verdict` | a verdict the scripted fate does not allow |
| `wrong_end` | an undisturbed run that ended otherwise than its fate |"""


LIMITS = """## What the suite does not show

- A 403 fault here clears after one to three requests: an authorizer that failed for a moment
  (a webhook's timeout denies). A permanent RBAC denial is not drawn: without the verb nothing can
  delete a pod, and the package says so in one ERROR line naming the verb
  (`tests/simulated/watching/test_least_privilege_rbac.py`).
- A worker is killed whole here (its heartbeat stops): Airflow then fails the try and the DAG
  processor runs the task's `on_failure_callback`, which deletes a last try's pod. When only the
  task process dies and its supervisor lives, Airflow 3.3's supervisor reports the try failed
  itself and no failure callback runs anywhere: on the last try that pod is left (not drawn).
- The operator computes its deferral timeout from the wall clock while the trigger runs on the
  simulated one, so the simulated deferral timeout is longer than Airflow's would be; the trigger's
  own `execution_timeout` deadline (simulated) is what ends long pods here.
- A user action on a deferred task (mark failed, clear, delete the run) cancels its trigger. When
  that cancellation reaches a triggerer before the trigger's first turn, or no triggerer holds the
  trigger at all (all of them down, or a hand-over under way), Airflow runs no `on_kill`. For a
  task marked failed, successful or skipped, the package's listener in the api-server deletes the
  pod once `on_kill` has had 35 s (seed 107 leaked this way before it;
  `tests/chaos/test_chaos.py` replays it with a busy triggerer). Deleting a DAG run calls no
  listener: such a kill inside a hand-over still leaves the pod (`killed_before_first_turn`).
  Airflow's REST API deletes only a queued, successful or failed run; deleting the whole DAG is
  what reaches a deferred task. The runs time the user's action from the trigger's start, as on a
  real triggerer, which takes a new trigger within about a second; a kill inside a hand-over
  stays drawn. The pods carry the labels `airflow kubernetes cleanup-pods` selects on, so it
  deletes such a pod once it has finished, or once it has been pending for
  `--min-pending-minutes`.
- A run is judged by simulated time, and simulated time moves only between turns: once the
  worker's thread waits on the clock, every triggerer's loop and the simulator's have nothing
  ready, no request is on the way and the api-server's listener waits or has ended, the clock
  jumps to the next thing due (a simulator step, a wait of the package's) and wakes that alone.
  The package's own waits are on that clock (the trigger's clock, the worker's backoff, the watch
  hub's `HubSettings.clock`, the listener's pauses, and the worker client's wait for a 429's
  `Retry-After`); the code's work between them takes no simulated time, so a loaded machine
  changes how long a run takes, not what happens in it. What two actors do at one simulated
  instant (the worker's requests while a triggerer's feed reads) still interleaves as the
  machine runs them, and the simulator writes wall-clock times into objects, Events and logs. A
  trigger's hang bound counts from its first turn, and before that from its deferral (a slow
  earlier try does not use up a later trigger's time to start).
- The next try's pod starts only once earlier tries' pods are out of the way: the sweep deletes
  them with no grace (a graceful delete leaves containers running until they stop) and looks
  again, for about 30 s, before it gives up and fails the try rather than run two pods at once.
- A pod taken away before the trigger first looked leaves only its Events as evidence. A 403 on
  the Events' LIST is asked again after the backoff (four refusals in a row are RBAC), so a
  momentary denial does not cost the Events (seed 456 judged a preemption an external deletion
  while the feed took one for missing RBAC; `test_a_vanished_pod_is_judged_on_its_events.py`
  holds it on manual clocks)."""


#: The model's differences from Airflow 3.3, kept by hand beside this file and copied into the report.
MODEL = Path(__file__).with_name("model_differences.md")


def _rediagnose(saved: dict[str, Any]) -> None:
    """Place the saved violations again with the current ``known.diagnose`` and re-summarize."""
    from types import SimpleNamespace

    from tests.chaos.known import diagnose

    for data in saved["runs"]:
        result = SimpleNamespace(plan=data["plan"], notes=data["notes"], verdicts=data["verdicts"])
        violations = [SimpleNamespace(**v) for v in data["violations"]]
        data["causes"] = sorted({diagnose(v, result) for v in violations})
    old = saved["summary"]
    saved["summary"] = summary(saved["runs"], old["wall_seconds"], old["jobs"])


def _write_report(path: Path, text: str) -> None:
    """Write the chaos report, keeping the soak's section (``make soak`` writes that one)."""
    kept = section_of(path.read_text()) if path.exists() else ""
    path.write_text(text.rstrip("\n") + "\n\n" + kept if kept else text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.run", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--first", type=int, default=0, help="first seed")
    parser.add_argument("--seed", type=int, default=None, help="replay one seed and explain it")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--report", default=None, help="write the Markdown report here")
    parser.add_argument("--json", default=None, help="write every run's result here")
    parser.add_argument("--logs", default=".chaos-logs")
    parser.add_argument("--render", default=None, help="only rewrite --report from a --json file")
    args = parser.parse_args(argv)
    if args.render:
        saved = json.loads(Path(args.render).read_text())
        _rediagnose(saved)
        first = min((d["seed"] for d in saved["runs"]), default=0)
        command = f"make chaos CHAOS_RUNS={len(saved['runs'])}"
        _write_report(Path(args.report), report(saved["summary"], first, command))
        return 0
    _airflow_home()  # inherited by the worker processes

    if args.seed is not None:
        started = time.monotonic()
        [data] = run_many([args.seed], 1, args.logs, progress=False)
        print(data["explain"])
        print(
            f"causes: {', '.join(data['causes']) or 'none'}; {time.monotonic() - started:.1f} s; "
            f"logs in {args.logs}/"
        )
        return 1 if data["violations"] else 0

    seeds = list(range(args.first, args.first + args.runs))
    started = time.monotonic()
    results = run_many(seeds, args.jobs, args.logs)
    wall = time.monotonic() - started
    s = summary(results, wall, args.jobs)
    print(
        json.dumps({k: s[k] for k in ("runs", "failing_runs", "violations", "causes", "slowest")}, indent=1)
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": s, "runs": results}, indent=1, default=str))
    if args.report:
        command = f"make chaos CHAOS_RUNS={args.runs}" if args.first == 0 else " ".join(sys.argv)
        _write_report(Path(args.report), report(s, args.first, command))
        print(f"report written to {args.report}")
    return 1 if s["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
