"""The whole-stack benchmark's figures (``bench/stack.py``): rows from a run's raw measurements, the
targets met or missed, the report in Markdown and the plots."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bench.phases import percentile
from bench.stack_measure import (
    PULL_GRACE,
    RUN_SECONDS,
    STAGES,
    Audit,
    kind_of,
    namespace,
    turnaround_stages,
    turnarounds,
)

LABELS = {
    "rpo": "RetryingPodOperator",
    "rpo_quiet": "RetryingPodOperator, logging_interval=None",
    "kpo_deferrable": "KPO deferrable",
    "kpo": "KPO (not deferrable)",
    "floor": "Airflow's floor",
}
#: The kinds of try in the order the report shows them.
KIND_ORDER = ("exit", "oom", "evict", "pull", "timer", "ok")
KIND_LABELS = {
    "exit": "exit 1",
    "oom": "OOM-killed",
    "evict": "evicted",
    "pull": "failed pull (after grace)",
    "timer": "timer, then fails",
    "ok": "success",
}
#: The operators whose failed tries the statement groups compare, in the report's order.
GROUPED = ("rpo", "kpo_deferrable", "floor", "kpo")


def _per(value: float, count: int) -> float | None:
    return round(value / count, 2) if count else None


def _states(tries: list[tuple[str, int, str | None]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for *_, state in tries:
        out[str(state)] = out.get(str(state), 0) + 1
    return dict(sorted(out.items()))


def summarize(
    sizes: Any,
    the_plan: dict[str, Any],
    phases: list[Any],
    tries: dict[str, list[tuple[str, int, str | None]]],
    audit: Audit,
    idle: float,
    worker_seconds: dict[str, float],
    seed_runs: dict[str, dict[str, Any]],
    logs: Path | None = None,
    idle_groups: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The run's rows: per kind of try (``rows``), per scale step (``scale``), and the seed's and
    rate-limit DAGs (``seed``); with ``logs`` (Airflow's task logs), where each failure phase's
    turnarounds went (``stages_p50``); with ``idle_groups`` (the idle deployment's statements per
    second by group), each phase's statements by group per try (``statement_groups_per_try``)."""
    idle_groups = idle_groups or {}
    from dataclasses import asdict

    by_dag = {d["dag_id"]: d for d in the_plan["dags"]}
    rows, scale = [], []
    for phase in phases:
        p = phase.summary()
        if " scale " in phase.name:
            scale.append(_scale_row(phase, p, by_dag, audit, idle))
            continue
        dag_id = phase.dag_ids[0]
        dag, mine = by_dag[dag_id], tries[dag_id]
        op, n = dag["operator"], len(mine)
        net = phase.statements - idle * phase.seconds
        kinds = sorted({kind_of(t["task_id"]) for t in dag["tasks"]}, key=KIND_ORDER.index)
        for kind in kinds:
            ns = next(t["namespace"] for t in dag["tasks"] if kind_of(t["task_id"]) == kind)
            its = [x for x in mine if kind_of(x[0]) == kind]
            turn = turnarounds(audit.pods, dag_id, kind, pull_grace=PULL_GRACE[op] if kind == "pull" else 0.0)
            rows.append(
                {
                    "phase": dag["kind"],
                    "operator": op,
                    "kind": kind,
                    "namespace": ns,
                    "tasks": sum(1 for t in dag["tasks"] if kind_of(t["task_id"]) == kind),
                    "tries": len(its),
                    "states": _states(its),
                    "pods": sum(
                        1 for x in audit.pods.values() if x.dag_id == dag_id and kind_of(x.task_id) == kind
                    ),
                    "run_state": phase.states.get(dag_id),
                    "turnarounds": turn,
                    "turnaround_p50": percentile(turn, 50),
                    "turnaround_p99": percentile(turn, 99),
                    "stages_p50": stage_medians(audit, logs, dag_id, kind)
                    if logs and staged(kind, turn)
                    else None,
                    "requests_per_try": _per(audit.count(ns), len(its)),
                    # An evicted task reruns and succeeds: in another try (the cncf operator) or
                    # in the same try (ours); its requests per task compare the two.
                    "requests_per_task": _per(audit.count(ns), len({x[0] for x in its})),
                    # The phase's figures, over all its tries (its kinds share them).
                    "statements_per_try": _per(net, n),
                    "statement_groups_per_try": {
                        group: _per(calls - idle_groups.get(group, 0.0) * phase.seconds, n)
                        for group, calls in phase.groups.items()
                    },
                    "worker_cpu_per_try": _per(phase.cpu.get("worker", 0.0), n),
                    "worker_seconds_per_try": _per(worker_seconds.get(dag_id, 0.0), n),
                    "seconds": p["seconds"],
                    "load_mean": p["load_mean"],
                    "load_max": p["load_max"],
                    "apiserver_cpu": p["cpu"].get("kube-apiserver"),
                    "etcd_cpu": p["cpu"].get("etcd"),
                }
            )
    seeds = []
    for dag_id, run in seed_runs.items():
        dag, mine = by_dag[dag_id], tries[dag_id]
        ns = dag["tasks"][0]["namespace"]
        seeds.append(
            {
                "dag": dag["kind"],
                "operator": dag["operator"],
                "namespace": ns,
                "seconds": run["seconds"],
                "state": run["state"],
                "tries": len(mine),
                "pods": sum(1 for x in audit.pods.values() if x.dag_id == dag_id),
                "requests": audit.count(ns),
                "turnarounds": turnarounds(audit.pods, dag_id),
            }
        )
    return {
        "sizes": asdict(sizes),
        "idle_statements_per_second": round(idle, 2),
        "idle_statement_groups": {g: round(rate, 3) for g, rate in idle_groups.items()},
        "cores": os.cpu_count(),
        "rows": rows,
        "scale": scale,
        "seed": seeds,
        "phases": [phase.summary() for phase in phases],
    }


def staged(kind: str, turns: list[float]) -> bool:
    """Whether a row's turnarounds are split into stages: a kind with turnarounds, but a failed
    pull (its turnaround counts from the end of each operator's grace, its stages would not)."""
    return bool(turns) and kind != "pull"


def stage_medians(audit: Audit, logs: Path, dag_id: str, kind: str) -> dict[str, float | None]:
    """The median of each stage of the kind's turnarounds (``turnaround_stages``), None for a
    stage none of them has."""
    stages = turnaround_stages(audit.pods, logs, dag_id, kind)
    out: dict[str, float | None] = {}
    for stage in STAGES:
        values = [x[stage] for x in stages if x[stage] is not None]
        out[stage] = percentile(values, 50) if values else None
    return out


def _scale_row(
    phase: Any, p: dict[str, Any], by_dag: dict[str, Any], audit: Audit, idle: float
) -> dict[str, Any]:
    op = by_dag[phase.dag_ids[0]]["operator"]
    ns = by_dag[phase.dag_ids[0]]["tasks"][0]["namespace"]
    seconds = phase.seconds

    def cores(name: str) -> float:
        return round(phase.cpu.get(name, 0.0) / seconds, 3)

    return {
        "operator": op,
        "namespace": ns,
        "started": phase.started,
        "ended": phase.ended,
        "tasks": sum(len(by_dag[d]["tasks"]) for d in phase.dag_ids),
        "deferred": p["deferred"],
        "failed": p.get("failed", 0),
        "ramp_seconds": p["ramp_seconds"],
        "window_seconds": round(seconds, 1),
        "requests_per_second": round(audit.count(ns, phase.started, phase.ended) / seconds, 2),
        "cores": {
            name: cores(name)
            for name in ("kube-apiserver", "etcd", "triggerer", "scheduler", "api-server", "worker")
        },
        "rss_mib": p["rss"],
        "statements_per_second": round(phase.statements / seconds, 1),
        "statements_per_second_over_idle": round(phase.statements / seconds - idle, 1),
        "load_mean": p["load_mean"],
        "load_max": p["load_max"],
    }


# -- targets -------------------------------------------------------------------------------------


def _ratio(ours: float | None, theirs: float | None) -> float | None:
    return None if ours is None or not theirs else ours / theirs


def targets(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(target, figure, met / missed) for what the run measured."""
    rows = {(r["operator"], r["kind"]): r for r in result["rows"]}
    out: list[tuple[str, str, str]] = []
    for kind in KIND_ORDER[:-1]:
        ours, theirs = rows.get(("rpo", kind)), rows.get(("kpo_deferrable", kind))
        ratio = _ratio(ours and ours["turnaround_p99"], theirs and theirs["turnaround_p99"])
        if ours and theirs and ratio is not None:
            out.append(
                (
                    f"retry turnaround p99 ({KIND_LABELS[kind]}) at most 1/5 of KPO deferrable's",
                    f"{ours['turnaround_p99']:.2f} s against {theirs['turnaround_p99']:.2f} s ({ratio:.2f}x)",
                    "met" if ratio <= 0.2 else "missed",
                )
            )
    for phase in ("failure", "evict", "pull", "success"):
        ours = next((r for r in result["rows"] if r["operator"] == "rpo" and r["phase"] == phase), None)
        theirs = next(
            (r for r in result["rows"] if r["operator"] == "kpo_deferrable" and r["phase"] == phase), None
        )
        figures = [("statements_per_try", "database statements", "{:.0f}")]
        if phase == "failure":
            figures.append(("worker_cpu_per_try", "worker CPU (s)", "{:.2f}"))
        for key, what, form in figures:
            if ours and theirs and ours.get(key) is not None and theirs.get(key) is not None:
                out.append(
                    (
                        f"{what} per try ({phase} phase) no more than KPO deferrable's",
                        f"{form.format(ours[key])} against {form.format(theirs[key])}",
                        "met" if ours[key] <= theirs[key] else "missed",
                    )
                )
    for kind in ("exit", "oom", "pull"):  # an evicted pod of ours fails no try: it is relaunched
        ours = rows.get(("rpo", kind))
        if ours and ours["requests_per_try"] is not None:
            out.append(
                (
                    f"one failed try ({KIND_LABELS[kind]}) at most 8 API requests in all",
                    f"{ours['requests_per_try']:.1f} per try",
                    "met" if ours["requests_per_try"] <= 8 else "missed",
                )
            )
    # At scale, each of ours against the deferrable KPO of the same run (a merged result may hold
    # several runs' steps, each step naming its run).
    for run in sorted({r.get("run", "") for r in result.get("scale", [])}):
        steps = [r for r in result["scale"] if r.get("run", "") == run]
        top = {r["operator"]: r for r in steps if r["tasks"] == max(x["tasks"] for x in steps)}
        for mine in ("rpo", "rpo_quiet"):
            if mine in top and "kpo_deferrable" in top:
                out += _scale_targets(
                    top[mine], top["kpo_deferrable"], LABELS[mine] + (f", {run}" if run else "")
                )
    return out


def _scale_targets(ours: dict[str, Any], theirs: dict[str, Any], label: str) -> list[tuple[str, str, str]]:
    fewer = theirs["requests_per_second"] / max(ours["requests_per_second"], 1e-9)
    less = theirs["cores"]["triggerer"] / max(ours["cores"]["triggerer"], 1e-9)
    at = f"at {ours['tasks']} deferred tasks ({label})"
    return [
        (
            f"{at} at least 100x fewer API requests per second",
            f"{ours['requests_per_second']:.2f} against {theirs['requests_per_second']:.2f} "
            f"({fewer:.0f}x fewer)",
            "met" if fewer >= 100 else "missed",
        ),
        (
            f"{at} at least 20x less triggerer CPU",
            f"{ours['cores']['triggerer']:.3f} cores against {theirs['cores']['triggerer']:.3f} "
            f"({less:.1f}x less)",
            "met" if less >= 20 else "missed",
        ),
    ]


# -- the report ----------------------------------------------------------------------------------


def _fmt(value: Any) -> str:
    return "-" if value is None else (f"{value:.2f}" if isinstance(value, float) else str(value))


def _size_line(sizes: dict[str, Any]) -> str:
    """A resized run's failure-phase and evict-phase sizes, in words."""
    return (
        f"{sizes['exits']} tasks exiting 1 and {sizes['ooms']} OOM-killed per operator, each with "
        f"{sizes['failure_retries']} retries; {sizes['evictions']} evicted tasks per operator"
    )


def report(result: dict[str, Any], plan_name: str) -> str:
    lines = [
        "# Whole-stack benchmark",
        "",
        f"`make bench-stack PLAN={plan_name}` (`bench/stack.py`): Airflow 3.3 with PostgreSQL,",
        "CeleryExecutor (two workers, four slots each), two schedulers, two triggerers and the",
        "api-server, against kube-apiserver, etcd, kube-scheduler, kube-controller-manager and KWOK",
        f"nodes, on {result['cores']} cores, one DAG file per DAG. Each operator's DAGs ran one phase",
        "after another in the same deployment, after an unmeasured warm-up; every argument at its",
        f"default but the image, the namespace, `retries` and `retry_delay`. Pods run {RUN_SECONDS} s,",
        "then exit 1, are OOM-killed or exit 0; evicted pods are evicted 5 s after their create.",
        *(
            [
                f"Paced: the failing tasks in a pool of {result['sizes']['lanes']} slots that counts",
                'deferred tasks, each lighter (`priority_weight`, `weight_rule="absolute"`) than the one',
                "before, so a retry goes ahead of every task not started and no retry waits for a slot.",
            ]
            if result.get("sizes", {}).get("lanes")
            else []
        ),
        *(
            [
                "",
                f"Smaller than the plan: `{' '.join('--size ' + s for s in result['size_settings'])}`"
                f" ({_size_line(result['sizes'])}).",
            ]
            if result.get("size_settings")
            else []
        ),
        "",
        "Retry turnaround: from the API server's first write showing a pod failed (for an eviction,",
        "the eviction's request) to the create of the task's next pod (`retry_delay=0`): the next",
        "try's, or for an evicted pod of ours the relaunch in the same try; for",
        "a failed pull, from the end of the operator's grace (ours: 90 s after the first failed pull;",
        "the cncf operator fails the try at the first `ErrImagePull`, no grace).",
        "Requests: every request Airflow's processes made in the kind's namespace (the audit log),",
        "over its tries. Statements: the phase's database statements less the idle deployment's",
        f"{result['idle_statements_per_second']} per second over the phase's length, over the",
        "phase's tries. Worker CPU: the Celery workers' CPU (their task processes included) over the",
        "phase's tries; worker seconds: from the task logs, each stretch a try ran in a worker.",
        "Load: the 1-minute load average during the phase (mean / max).",
        "",
        *[f"- {run['part']}: commit {run['commit']}, {run['date']}." for run in result.get("runs", [])],
        *([""] if result.get("runs") else []),
        "| phase | operator | kind | tasks | tries | pods | turnaround p50 / p99 (s) "
        "| requests per try / task | statements per try | worker CPU / seconds per try | phase (s) | load "
        "| kube-apiserver / etcd CPU (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['phase']} | {LABELS[r['operator']]} | {KIND_LABELS[r['kind']]} | {r['tasks']} "
            f"| {r['tries']} "
            f"| {r['pods']} | {_fmt(r['turnaround_p50'])} / {_fmt(r['turnaround_p99'])} "
            f"| {_fmt(r['requests_per_try'])} / {_fmt(r['requests_per_task'])} "
            f"| {_fmt(r['statements_per_try'])} "
            f"| {_fmt(r['worker_cpu_per_try'])} / {_fmt(r['worker_seconds_per_try'])} | {r['seconds']} "
            f"| {r['load_mean']} / {r['load_max']} | {_fmt(r['apiserver_cpu'])} / {_fmt(r['etcd_cpu'])} |"
        )
    lines += statement_group_table(result)
    staged = [r for r in result["rows"] if r.get("stages_p50")]
    if staged:
        lines += [
            "",
            "## Where the turnaround goes",
            "",
            "Each stage's median over the kind's turnarounds, in seconds (`turnaround_stages` in",
            "`bench/stack_measure.py`), from the audit log and the task logs: the failure to the trigger's",
            "event (detected); to the first line of the worker that resumes the try (worker resumed); to",
            "the try's last line, or for a relaunch in the same try to the relaunch's create (try ended);",
            "to the first line of the next try's worker (next try started); to the next pod's create.",
            "Without a trigger the worker waiting on the pod finds the failure: try ended runs from the",
            "failure. A relaunch's trigger replaces the first pod's trigger log, so for an evicted pod of",
            "ours worker resumed runs from the failure.",
            "",
            "| operator | kind | " + " | ".join(STAGES) + " | turnaround p50 |",
            "|---|---|" + "---|" * (len(STAGES) + 1),
        ]
        for r in staged:
            cells = " | ".join(_fmt(r["stages_p50"][k]) for k in STAGES)
            label = f"{LABELS[r['operator']]} | {KIND_LABELS[r['kind']]}"
            lines.append(f"| {label} | {cells} | {_fmt(r['turnaround_p50'])} |")
    if result.get("scale"):
        lines += [
            "",
            "## At scale",
            "",
            "Deferred tasks whose pods run on; at each step, once every task is deferred, a window of",
            "the figures below (CPU in cores, memory the most resident seen, each role's processes with",
            "their children). Ramp: from triggering the step's DAGs to every task deferred, or to",
            "none on its way any more: a step whose tasks failed instead is measured at the deferred",
            "tasks it has, its failed ones in brackets.",
            "",
            "| operator | deferred tasks | ramp (s) | window (s) | API requests/s "
            "| kube-apiserver / etcd cores | triggerer cores / MiB | scheduler cores / MiB "
            "| api-server cores | statements/s (over idle) | load |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for s in result["scale"]:
            c, m = s["cores"], s["rss_mib"]
            run = f" ({s['run']})" if s.get("run") else ""
            fell = f" ({s['failed']} failed)" if s.get("failed") else ""
            lines.append(
                f"| {LABELS[s['operator']]}{run} | {s['deferred'][0]}{fell} | {s['ramp_seconds']} "
                f"| {s['window_seconds']} "
                f"| {s['requests_per_second']} | {c['kube-apiserver']} / {c['etcd']} "
                f"| {c['triggerer']} / {m.get('triggerer', 0):.0f} "
                f"| {c['scheduler']} / {m.get('scheduler', 0):.0f} "
                f"| {c['api-server']} | {s['statements_per_second']} "
                f"({s['statements_per_second_over_idle']}) "
                f"| {s['load_mean']} / {s['load_max']} |"
            )
    if result.get("seed"):
        lines += [
            "",
            "## The seed's DAG and the rate-limit DAG",
            "",
            "| DAG | operator | run (s) | outcome | tries | pods | requests | failure to next pod (s) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for s in result["seed"]:
            turn = ", ".join(f"{t:.1f}" for t in s["turnarounds"]) or "-"
            lines.append(
                f"| {s['dag']} | {LABELS[s['operator']]} | {s['seconds']} | {s['state']} | {s['tries']} "
                f"| {s['pods']} | {s['requests']} | {turn} |"
            )
    lines += ["", "## Targets", "", "| target | figure | |", "|---|---|---|"]
    lines += [f"| {t} | {f} | {m} |" for t, f, m in targets(result)]
    lines.append("")
    return "\n".join(lines)


#: The database users the deployment's processes connect as (one per role), as the report names them.
ROLES = {
    "scheduler": "schedulers",
    "triggerer": "triggerers (their loop; a trigger's execution API calls, served in process)",
    "api_server": "api-server (the execution API: the task processes' calls)",
    "worker": "Celery workers (the result backend)",
    "airflow": "the benchmark's own reads",
}


def statement_group_table(result: dict[str, Any], shown: int = 30) -> list[str]:
    """The failure phase's statements per failed try, by the role that ran them and by group
    (``statement_group``), an operator per column (:data:`GROUPED`); the rest in one row."""
    rows = {
        r["operator"]: r
        for r in result["rows"]
        if r["phase"] == "failure" and r.get("statement_groups_per_try") and r["operator"] in GROUPED
    }
    ops = [op for op in GROUPED if op in rows]
    if not ops:
        return []
    per = {op: rows[op]["statement_groups_per_try"] for op in ops}
    by_role: dict[str, dict[str, float]] = {op: {} for op in ops}
    for op in ops:
        for key, value in per[op].items():
            role = key.partition(": ")[0]
            by_role[op][role] = by_role[op].get(role, 0.0) + (value or 0.0)
    seen = {r for op in ops for r in by_role[op]}
    roles = [r for r in ROLES if r in seen] + sorted(seen - set(ROLES))
    header = " | ".join(LABELS[op] for op in ops)
    lines = [
        "",
        "## Where a failed try's statements go",
        "",
        "The failure phase's statements per try (every try of the phase fails), by the process role",
        "that ran them (each role connects to the database as a user of its own) and by group",
        "(`statement_group` in `bench/stack_measure.py`: the verb and the first table a statement",
        "names), each less the idle deployment's rate. Airflow's floor: a task that defers once to",
        "Airflow's own timer (`TimeDeltaTrigger`) for as long as the pods run, then raises.",
        "",
        f"| statements per failed try, by role | {header} |",
        "|---|" + "---:|" * len(ops),
    ]
    for role in roles:
        cells = " | ".join(_fmt(round(by_role[op].get(role, 0.0), 2)) for op in ops)
        lines.append(f"| {ROLES.get(role, role)} | {cells} |")
    lines.append("| all | " + " | ".join(_fmt(rows[op]["statements_per_try"]) for op in ops) + " |")
    groups = sorted(
        {g for p in per.values() for g in p}, key=lambda g: (-max(p.get(g) or 0.0 for p in per.values()), g)
    )
    lines += ["", f"| statements per failed try, by role: group | {header} |", "|---|" + "---:|" * len(ops)]
    for group in groups[:shown]:
        lines.append(f"| `{group}` | " + " | ".join(_fmt(per[op].get(group, 0.0)) for op in ops) + " |")
    rest = groups[shown:]
    if rest:
        cells = " | ".join(_fmt(round(sum(per[op].get(g) or 0.0 for g in rest), 2)) for op in ops)
        lines.append(f"| {len(rest)} other groups | {cells} |")
    return lines


def plot(result: dict[str, Any], folder: Path, name: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = [k for k in KIND_ORDER[:-1] if any(r["kind"] == k and r["turnarounds"] for r in result["rows"])]
    if kinds:
        fig, axes = plt.subplots(1, len(kinds), figsize=(4 * len(kinds), 3.5), squeeze=False)
        for ax, kind in zip(axes[0], kinds, strict=True):
            for r in result["rows"]:
                if r["kind"] == kind and r["turnarounds"]:
                    values = r["turnarounds"]
                    ax.plot(
                        values,
                        [(i + 1) / len(values) for i in range(len(values))],
                        label=LABELS[r["operator"]],
                    )
            ax.set_title(KIND_LABELS[kind])
            ax.set_xlabel("retry turnaround (s)")
            ax.set_ylabel("share of failed tries")
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(folder / f"turnaround-{name}.png", dpi=100)
        plt.close(fig)
    if result.get("scale"):
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
        for op, label in LABELS.items():
            steps = [s for s in result["scale"] if s["operator"] == op]
            if steps:
                x = [s["deferred"][0] for s in steps]
                axes[0].plot(x, [s["requests_per_second"] for s in steps], marker="o", label=label)
                axes[1].plot(x, [s["cores"]["triggerer"] for s in steps], marker="o", label=label)
        for ax, what in zip(axes, ("API requests per second", "triggerer CPU (cores)"), strict=True):
            ax.set_xlabel("deferred tasks")
            ax.set_ylabel(what)
            ax.set_yscale("log")
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(folder / f"scale-{name}.png", dpi=100)
        plt.close(fig)


def recount(result: dict[str, Any], audit: Audit, logs: Path | None = None) -> dict[str, Any]:
    """``result``'s request figures counted again from its run's audit log (kept with
    ``--workdir``), as :func:`summarize` counts them now; with ``logs``, the turnarounds' stages."""
    for r in result["rows"]:
        if logs is not None and staged(r["kind"], r["turnarounds"]):
            r["stages_p50"] = stage_medians(audit, logs, f"stack_{r['operator']}_{r['phase']}", r["kind"])
        ns = r.get("namespace") or namespace(r["operator"], r["kind"])
        r["namespace"] = ns
        r["requests_per_try"] = _per(audit.count(ns), r["tries"])
        r["requests_per_task"] = _per(audit.count(ns), r["tasks"])
    windows = {p["name"]: p for p in result.get("phases", [])}
    for s in result.get("scale", []):
        ns = s.get("namespace") or namespace(s["operator"], "scale")
        window = windows[f"{s['operator']} scale {s['tasks']}"]
        s.update(namespace=ns, started=window["started"], ended=window["ended"])
        s["requests_per_second"] = round(audit.count(ns, s["started"], s["ended"]) / s["window_seconds"], 2)
    for s in result.get("seed", []):
        s["namespace"] = s.get("namespace") or namespace(s["operator"], s["dag"])
        s["requests"] = audit.count(s["namespace"])
    return result


def main(argv: list[str] | None = None) -> int:
    """Count a kept run's requests again from its audit log and write its report anew."""
    import argparse
    import json

    from bench.stack_measure import read_audit

    parser = argparse.ArgumentParser(prog="python -m bench.stack_report", description=main.__doc__)
    parser.add_argument("results", help="results-PLAN.json of the run")
    parser.add_argument("audit", help="the run's audit log: WORKDIR/kube/audit.log")
    parser.add_argument("--name", required=True, help="the results' name, e.g. full")
    parser.add_argument("--logs", default=None, help="the run's task logs: WORKDIR/airflow/home/logs")
    args = parser.parse_args(argv)
    path = Path(args.results)
    result = json.loads(path.read_text())
    # The benchmark's own set-up requests (its namespaces' ServiceAccounts) come minutes before.
    first = min(p["started"] for p in result["phases"]) - 60
    result = recount(
        result, read_audit(Path(args.audit), since=first), Path(args.logs) if args.logs else None
    )
    path.write_text(json.dumps(result, indent=1) + "\n")
    (path.parent / f"RESULTS-{args.name}.md").write_text(report(result, args.name.split("-")[0]))
    plot(result, path.parent, args.name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
