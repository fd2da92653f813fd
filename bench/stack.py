"""``make bench-stack``: the whole stack, ``RetryingPodOperator`` against the cncf
``KubernetesPodOperator``, under a real Airflow deployment on the real control plane.

One run, one deployment: PostgreSQL (counting its statements with ``pg_stat_statements``),
CeleryExecutor with Redis and two workers, two schedulers, two triggerers and the api-server
(``tests/support/deployment.py``), against kube-apiserver, etcd, kube-scheduler,
kube-controller-manager and KWOK nodes with the API server's audit log on. The same DAGs run with
each operator (``bench/stack_dags/stack.py``), one phase after another so that each phase's load
average, database statements and API server CPU are its own:

* ``failure``: pods that run 10 s and exit 1 or are OOM-killed, ``retries=1``, ``retry_delay=0``;
* ``success``: pods that run 10 s and exit 0;
* ``seed``: the seed's DAG, ``image="notavalidimage"`` with ``retries=3``, both deferrable
  operators at once (its requests are told apart by namespace).

What is measured, from the audit log and the database:

* the retry turnaround: from the API server's first write that shows a try's pod failed (KWOK's
  status write) to the create of the next try's pod, per task;
* API requests per try: every request Airflow's processes made in the phase's namespaces (each
  operator's tasks run in namespaces of their own), over the tries there;
* database statements per try: the phase's statements less the idle deployment's rate over the
  phase's length, over the phase's tries;
* the load average during each phase (1-minute, sampled every 2 s), and kube-apiserver and etcd CPU.

::

    python -m bench.stack --plan quick        # about 25 minutes on 2 cores

Results go to ``bench/results/stack/`` (``results.json``, ``RESULTS.md``, ``turnaround.png``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.realcluster import RealCluster, process_cpu_seconds, read_audit_events

DAGS = Path(__file__).with_name("stack_dags")
RESULTS = Path(__file__).with_name("results") / "stack"
ADMIN = "kubernetes-admin"
#: The operators compared: ours, then KPO deferrable, then KPO in the worker.
OPERATORS = ("rpo", "kpo_deferrable", "kpo")
LABELS = {
    "rpo": "RetryingPodOperator",
    "kpo_deferrable": "KPO deferrable",
    "kpo": "KPO (not deferrable)",
}
#: The seed's DAG runs with the two deferrable operators.
SEED_OPERATORS = ("rpo", "kpo_deferrable")
RUN_SECONDS = 10
IMAGES: dict[str, dict[str, Any]] = {
    "bench.example.com/exit-1:1": {"run": {"duration_seconds": RUN_SECONDS, "exit_code": 1}},
    "bench.example.com/oom:1": {"run": {"duration_seconds": RUN_SECONDS, "oom": True}},
    "bench.example.com/ok:1": {"run": {"duration_seconds": RUN_SECONDS}},
    "notavalidimage": {"pull": "not_found"},
}


@dataclass(frozen=True)
class Sizes:
    exits: int  # failing tasks that exit 1, per operator
    ooms: int  # failing tasks that are OOM-killed, per operator
    successes: int
    seed_retry_delay: int  # seconds between the seed DAG's tries


PLANS = {
    "quick": Sizes(exits=8, ooms=4, successes=6, seed_retry_delay=10),
    "full": Sizes(exits=50, ooms=50, successes=20, seed_retry_delay=300),
}


def namespace(operator: str, kind: str) -> str:
    return f"{kind}-{operator}".replace("_", "-")


def plan(sizes: Sizes) -> dict[str, Any]:
    """The DAGs of a run (JSON for the DAG file): one per operator and kind, and the seed's."""

    def task(task_id: str, image: str, ns: str, retries: int, delay: int = 0) -> dict[str, Any]:
        return {"task_id": task_id, "image": image, "namespace": ns, "retries": retries, "retry_delay": delay}

    dags: list[dict[str, Any]] = []
    for op in OPERATORS:
        ns = namespace(op, "failure")
        failing = [task(f"exit_{i:02d}", "bench.example.com/exit-1:1", ns, 1) for i in range(sizes.exits)]
        failing += [task(f"oom_{i:02d}", "bench.example.com/oom:1", ns, 1) for i in range(sizes.ooms)]
        dags.append({"dag_id": f"stack_{op}_failure", "operator": op, "kind": "failure", "tasks": failing})
        ns = namespace(op, "success")
        ok = [task(f"ok_{i:02d}", "bench.example.com/ok:1", ns, 0) for i in range(sizes.successes)]
        dags.append({"dag_id": f"stack_{op}_success", "operator": op, "kind": "success", "tasks": ok})
    for op in SEED_OPERATORS:
        seed = task("seed", "notavalidimage", namespace(op, "seed"), 3, sizes.seed_retry_delay)
        dags.append({"dag_id": f"stack_{op}_seed", "operator": op, "kind": "seed", "tasks": [seed]})
    return {"dags": dags}


@dataclass
class Phase:
    name: str
    dag_ids: list[str]
    started: float
    ended: float = 0.0
    states: dict[str, str | None] = field(default_factory=dict)
    statements: int = 0
    load_mean: float = 0.0
    load_max: float = 0.0
    apiserver_cpu: float = 0.0
    etcd_cpu: float = 0.0

    @property
    def seconds(self) -> float:
        return self.ended - self.started


def _cpu(pids: dict[str, int]) -> dict[str, float]:
    out = {}
    for name, pid in pids.items():
        with contextlib.suppress(OSError):
            out[name] = process_cpu_seconds(pid)
    return out


def run_phase(dep: Any, cluster: RealCluster, name: str, dag_ids: list[str], timeout: float) -> Phase:
    """Trigger ``dag_ids`` at once and wait for their runs to end, sampling the load average."""
    dep.database.reset_statements()
    cpu_before = _cpu(cluster.component_pids())
    phase = Phase(name, dag_ids, time.time())
    runs = {dag_id: dep.trigger_dag(dag_id) for dag_id in dag_ids}
    loads: list[float] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        loads.append(os.getloadavg()[0])
        phase.states = {d: dep.dag_run_state(d, r) for d, r in runs.items()}
        if all(s in ("success", "failed") for s in phase.states.values()):
            break
        time.sleep(2)
    phase.ended = time.time()
    phase.statements = dep.database.statements()
    cpu_after = _cpu(cluster.component_pids())
    phase.apiserver_cpu = round(cpu_after.get("kube-apiserver", 0) - cpu_before.get("kube-apiserver", 0), 2)
    phase.etcd_cpu = round(cpu_after.get("etcd", 0) - cpu_before.get("etcd", 0), 2)
    phase.load_mean = round(statistics.fmean(loads), 2) if loads else 0.0
    phase.load_max = round(max(loads, default=0.0), 2)
    return phase


def tries_of(dep: Any, dag_id: str) -> list[tuple[str, int, str | None]]:
    """(task_id, try_number, state) of every try of the DAG's tasks, history included."""
    rows = dep.query(
        "select task_id, try_number, state from task_instance_history where dag_id = ? union "
        "select task_id, try_number, state from task_instance where dag_id = ? order by 1, 2",
        dag_id,
        dag_id,
    )
    return [(str(r[0]), int(r[1]), r[2]) for r in rows]


# -- the audit log -----------------------------------------------------------------------------


@dataclass
class PodSeen:
    dag_id: str
    task_id: str
    try_number: int
    namespace: str
    created: float
    failed: float | None = None  # first write showing the pod failed (or its pull failing)


def _t(stamp: str) -> float:
    import datetime

    return datetime.datetime.fromisoformat(stamp).timestamp()


def _failed(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") == "Failed":
        return True
    for c in status.get("containerStatuses") or []:
        state = c.get("state") or {}
        if (state.get("terminated") or {}).get("exitCode", 0) != 0:
            return True
        if (state.get("waiting") or {}).get("reason") in ("ErrImagePull", "ImagePullBackOff"):
            return True
    return False


def read_audit(path: Path, since: float = 0.0) -> tuple[dict[str, PodSeen], dict[str, int]]:
    """The pods of the benchmark's DAGs by UID, and the requests Airflow made per namespace from
    ``since`` on (the benchmark's own set-up requests come before)."""
    pods: dict[str, PodSeen] = {}
    requests: dict[str, int] = {}
    seen: set[str] = set()
    for event in read_audit_events(path):
        audit_id = str(event.get("auditID"))
        if audit_id in seen:
            continue
        seen.add(audit_id)
        ref = event.get("objectRef") or {}
        t = _t(event["requestReceivedTimestamp"])
        if (event.get("user") or {}).get("username") == ADMIN and ref.get("namespace") and t >= since:
            requests[ref["namespace"]] = requests.get(ref["namespace"], 0) + 1
        pod = event.get("responseObject")
        if not isinstance(pod, dict) or pod.get("kind") != "Pod":
            continue
        code = int((event.get("responseStatus") or {}).get("code") or 0)
        if not 200 <= code < 300:
            continue
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        if not str(labels.get("dag_id", "")).startswith("stack_"):
            continue
        uid = meta["uid"]
        if event.get("verb") == "create" and not ref.get("subresource"):
            try_number = int(labels.get("try_number", 0))
            pods[uid] = PodSeen(labels["dag_id"], labels.get("task_id", ""), try_number, meta["namespace"], t)
        one = pods.get(uid)
        if one is not None and one.failed is None and _failed(pod):
            one.failed = t
    return pods, requests


def turnarounds(pods: dict[str, PodSeen], dag_id: str) -> list[float]:
    """Seconds from each failed try's pod showing its failure to the next try's pod create."""
    by_task: dict[str, dict[int, PodSeen]] = {}
    for pod in pods.values():
        if pod.dag_id == dag_id:
            first = by_task.setdefault(pod.task_id, {}).get(pod.try_number)
            if first is None or pod.created < first.created:
                by_task[pod.task_id][pod.try_number] = pod
    out = []
    for tries in by_task.values():
        for number, pod in tries.items():
            nxt = tries.get(number + 1)
            if pod.failed is not None and nxt is not None:
                out.append(round(nxt.created - pod.failed, 3))
    return sorted(out)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


# -- the run -----------------------------------------------------------------------------------


def bench(sizes: Sizes, workdir: Path, log: Any = print) -> dict[str, Any]:
    from kubernetes import client, config

    from tests.support.deployment import running_deployment

    the_plan = plan(sizes)
    plan_file = workdir / "plan.json"
    workdir.mkdir(parents=True, exist_ok=True)
    plan_file.write_text(json.dumps(the_plan))
    settings = {
        "AIRFLOW_K8S_RETRY_STACK_PLAN": str(plan_file),
        "AIRFLOW__CORE__PARALLELISM": "16",
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "600",
    }
    namespaces = sorted({t["namespace"] for d in the_plan["dags"] for t in d["tasks"]})
    phases: list[Phase] = []
    with RealCluster(workdir / "kube", {"time_scale": 1.0, "images": IMAGES}) as cluster:
        config.load_kube_config(str(cluster.kubeconfig))
        core = client.CoreV1Api()
        for ns in namespaces:
            core.create_namespace({"metadata": {"name": ns}})
        for ns in namespaces:  # pods are admitted once the namespace's default ServiceAccount exists
            deadline = time.monotonic() + 60
            while not core.list_namespaced_service_account(ns).items and time.monotonic() < deadline:
                time.sleep(0.5)
        log(f"control plane up; {len(namespaces)} namespaces")
        with running_deployment(
            workdir / "airflow",
            DAGS,
            cluster,
            settings=settings,
            worker_concurrency=4,
            reserialize_timeout=600,
            track_statements=True,
        ) as dep:
            dep.database.reset_statements()
            idle_from = time.time()  # from here on only Airflow talks to the cluster
            time.sleep(60)
            idle = dep.database.statements() / (time.time() - idle_from)
            log(f"Airflow up; idle deployment: {idle:.1f} statements/s")
            for op in OPERATORS:
                for kind in ("failure", "success"):
                    dag_id = f"stack_{op}_{kind}"
                    phase = run_phase(dep, cluster, f"{op} {kind}", [dag_id], timeout=1800)
                    phases.append(phase)
                    log(f"{phase.name}: {phase.seconds:.0f} s, {phase.states}, load {phase.load_mean}")
                    time.sleep(10)
            seed = run_phase(dep, cluster, "seed", [f"stack_{op}_seed" for op in SEED_OPERATORS], 3600)
            phases.append(seed)
            log(f"seed: {seed.seconds:.0f} s, {seed.states}")
            tries = {d["dag_id"]: tries_of(dep, d["dag_id"]) for d in the_plan["dags"]}
        pods, requests = read_audit(cluster.audit, since=idle_from)
    return summarize(sizes, the_plan, phases, tries, pods, requests, idle)


def summarize(
    sizes: Sizes,
    the_plan: dict[str, Any],
    phases: list[Phase],
    tries: dict[str, list[tuple[str, int, str | None]]],
    pods: dict[str, PodSeen],
    requests: dict[str, int],
    idle_statements_per_second: float,
) -> dict[str, Any]:
    by_dag = {d["dag_id"]: d for d in the_plan["dags"]}
    rows: list[dict[str, Any]] = []
    for phase in phases:
        n_tries = sum(len(tries[d]) for d in phase.dag_ids)
        net = phase.statements - idle_statements_per_second * phase.seconds
        for dag_id in phase.dag_ids:
            dag = by_dag[dag_id]
            ns = dag["tasks"][0]["namespace"]
            mine = tries[dag_id]
            turn = turnarounds(pods, dag_id)
            rows.append(
                {
                    "phase": phase.name,
                    "dag_id": dag_id,
                    "operator": dag["operator"],
                    "kind": dag["kind"],
                    "tasks": len(dag["tasks"]),
                    "tries": len(mine),
                    "pods": sum(1 for p in pods.values() if p.dag_id == dag_id),
                    "states": dict(sorted({s: sum(1 for *_, x in mine if x == s) for *_, s in mine}.items())),
                    "run_state": phase.states.get(dag_id),
                    "seconds": round(phase.seconds, 1),
                    "requests": requests.get(ns, 0),
                    "requests_per_try": round(requests.get(ns, 0) / len(mine), 2) if mine else None,
                    # A phase with two DAGs (the seed's) shares its statements between them.
                    "statements_per_try": round(net / n_tries, 1) if n_tries else None,
                    "turnaround_p50": percentile(turn, 0.5),
                    "turnaround_p99": percentile(turn, 0.99),
                    "turnarounds": turn,
                    "load_mean": phase.load_mean,
                    "load_max": phase.load_max,
                    "apiserver_cpu_seconds": phase.apiserver_cpu,
                    "etcd_cpu_seconds": phase.etcd_cpu,
                }
            )
    return {
        "sizes": asdict(sizes),
        "idle_statements_per_second": round(idle_statements_per_second, 2),
        "cores": os.cpu_count(),
        "rows": rows,
    }


# -- the report --------------------------------------------------------------------------------


def _fmt(value: Any) -> str:
    return "-" if value is None else (f"{value:.2f}" if isinstance(value, float) else str(value))


def targets(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(target, figure, met / missed) for what this plan measures."""
    rows = {(r["operator"], r["kind"]): r for r in result["rows"]}
    out: list[tuple[str, str, str]] = []
    ours, theirs = rows.get(("rpo", "failure")), rows.get(("kpo_deferrable", "failure"))
    if ours and theirs and ours["turnaround_p99"] is not None and theirs["turnaround_p99"]:
        ratio = ours["turnaround_p99"] / theirs["turnaround_p99"]
        out.append(
            (
                "retry turnaround p99 at most 1/5 of KPO deferrable's",
                f"{ours['turnaround_p99']:.2f} s against {theirs['turnaround_p99']:.2f} s ({ratio:.2f}x)",
                "met" if ratio <= 0.2 else "missed",
            )
        )
    for kind in ("failure", "success"):
        ours, theirs = rows.get(("rpo", kind)), rows.get(("kpo_deferrable", kind))
        if ours and theirs and ours["statements_per_try"] is not None and theirs["statements_per_try"]:
            out.append(
                (
                    f"database statements per {kind} try no more than KPO deferrable's",
                    f"{ours['statements_per_try']:.0f} against {theirs['statements_per_try']:.0f}",
                    "met" if ours["statements_per_try"] <= theirs["statements_per_try"] else "missed",
                )
            )
    ours = rows.get(("rpo", "failure"))
    if ours and ours["requests_per_try"] is not None:
        out.append(
            (
                "one failed try at most 8 API requests in all",
                f"{ours['requests_per_try']:.1f} per failed try",
                "met" if ours["requests_per_try"] <= 8 else "missed",
            )
        )
    return out


def report(result: dict[str, Any], plan_name: str) -> str:
    lines = [
        "# Whole-stack benchmark",
        "",
        f"`make bench-stack PLAN={plan_name}` (`bench/stack.py`): Airflow 3.3 with PostgreSQL,",
        "CeleryExecutor (two workers, four slots each), two schedulers, two triggerers and the",
        "api-server, against kube-apiserver, etcd, kube-scheduler, kube-controller-manager and KWOK",
        f"nodes, on {result['cores']} cores. Each operator's DAGs ran one phase after another in the same",
        "deployment; every argument at its default but the image, the namespace, `retries` and",
        f"`retry_delay`. Pods run {RUN_SECONDS} s, then exit 1, are OOM-killed or exit 0.",
        "",
        "Retry turnaround: from the API server's first write showing a try's pod failed to the",
        "create of the next try's pod (`retry_delay=0`). Requests: every request Airflow's processes",
        "made in the phase's namespaces (the audit log), over its tries. Statements: the phase's",
        f"database statements less the idle deployment's {result['idle_statements_per_second']} per",
        "second over the phase's length, over its tries. Load: the 1-minute load average during the",
        "phase (mean / max).",
        "",
        "| phase | operator | tasks | tries | pods | ended | turnaround p50 / p99 (s) | requests per try "
        "| statements per try | phase (s) | load | kube-apiserver / etcd CPU (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        ended = ", ".join(f"{k} {v}" for k, v in r["states"].items())
        lines.append(
            f"| {r['kind']} | {LABELS[r['operator']]} | {r['tasks']} | {r['tries']} | {r['pods']} | "
            f"{r['run_state']} ({ended}) | {_fmt(r['turnaround_p50'])} / {_fmt(r['turnaround_p99'])} | "
            f"{_fmt(r['requests_per_try'])} | {_fmt(r['statements_per_try'])} | {r['seconds']} | "
            f"{r['load_mean']} / {r['load_max']} | {r['apiserver_cpu_seconds']} / {r['etcd_cpu_seconds']} |"
        )
    lines += ["", "## Targets", "", "| target | figure | |", "|---|---|---|"]
    lines += [f"| {t} | {f} | {m} |" for t, f, m in targets(result)]
    lines.append("")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in result["rows"]:
        if r["kind"] == "failure" and r["turnarounds"]:
            values = r["turnarounds"]
            ax.plot(values, [(i + 1) / len(values) for i in range(len(values))], label=LABELS[r["operator"]])
    ax.set_xscale("log")
    ax.set_xlabel("retry turnaround (s): failure visible to the next try's pod create")
    ax.set_ylabel("share of failed tries")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.stack", description=__doc__.splitlines()[0])
    parser.add_argument("--plan", choices=sorted(PLANS), default="quick")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--workdir", default=None, help="keep the cluster's and Airflow's files here")
    args = parser.parse_args(argv)
    out = Path(args.out)
    with contextlib.ExitStack() as stack:
        workdir = (
            Path(args.workdir)
            if args.workdir
            else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-stack-")))
        )
        result = bench(PLANS[args.plan], workdir.absolute(), log=lambda m: print(m, flush=True))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"results-{args.plan}.json").write_text(json.dumps(result, indent=1) + "\n")
    text = report(result, args.plan)
    (out / f"RESULTS-{args.plan}.md").write_text(text)
    plot(result, out / f"turnaround-{args.plan}.png")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
