"""``make soak``: real Airflow against the real control plane, under a seeded monkey.

The deployment is the one users run (``tools/deployment.py``: PostgreSQL, CeleryExecutor
with Redis, two schedulers, two triggerers, two Celery workers, the api-server, and a DAG processor
for the failure callbacks of tries whose worker died); the cluster is kube-apiserver, etcd,
kube-scheduler, kube-controller-manager and KWOK nodes, with the API server's audit log on. One
DAG run of the plan's tasks (``plan.py``) while the monkey SIGKILLs and SIGTERMs triggerers,
schedulers and Celery workers (a supervisor starts them again 5 s later), restarts
kube-apiserver, opens fault windows on the proxy through which Airflow reaches kube-apiserver
(``tests/support/api_faults.py``), and a user marks tasks failed through the REST API; lost
nodes come back a minute after they went. Then the invariants (``judge.py``) are judged from the
audit log and the metadata database::

    python -m tests.soak.run --tasks 300 --seed 1 --report docs/reliability.md

A seed replays a soak's plan (its fates and the monkey's schedule); what a busy machine does to
the timing is not replayed.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import functools
import json
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.soak.judge import TERMINAL, Try, Violation, judge, pod_lives
from tests.soak.plan import API_WINDOWS, DAG_ID, Plan, draw
from tests.soak.section import BEGIN, END, with_section
from tests.support.api_faults import FaultProxy
from tools.controlplane.realcluster import RealCluster, read_audit_events
from tools.deployment import SCHEDULERS, TRIGGERERS, WORKERS, Deployment, running_deployment

DAGS = Path(__file__).with_name("dags")
#: Seconds a killed process stays down before the supervisor starts it again.
RESTART_AFTER = 5.0
#: Seconds a lost node stays lost before its KWOK process comes back.
NODE_BACK_AFTER = 60.0
#: Seconds after the DAG run ends for the last deletions to land.
SETTLE = 120.0


@dataclass
class SoakResult:
    seed: int
    tasks: int
    seconds: float
    run_state: str | None
    actions: dict[str, int]
    fates: dict[str, dict[str, int]]  # fate -> final state -> tasks
    violations: list[Violation]
    pods: int
    slowest: tuple[str, str, float] | None  # task, fate, seconds from its first start to its end
    killed: list[str] = field(default_factory=list)
    #: Requests the fault proxy answered wrongly (or watches it cut), by kind.
    api_faults: dict[str, int] = field(default_factory=dict)
    #: Lost nodes whose KWOK process came back.
    nodes_back: int = 0


def soak_time(tasks: int) -> float:
    """Seconds the DAG run may take before its unfinished tasks count as hung."""
    return 1200.0 + 8.0 * tasks


def soak(plan: Plan, workdir: Path, log: Any = None) -> SoakResult:
    log = log or functools.partial(print, flush=True)
    workdir = workdir.absolute()  # the control plane's components run in folders of their own
    plan_file = workdir / "plan.json"
    workdir.mkdir(parents=True, exist_ok=True)
    plan_file.write_text(plan.to_json())
    settings = {
        "AIRFLOW_K8S_RETRY_SOAK_PLAN": str(plan_file),
        "AIRFLOW__CORE__PARALLELISM": "8",
        # The DAG processor is here for the failure callbacks; it need not re-parse the DAG often.
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "600",
    }
    started = time.monotonic()
    with (
        RealCluster(workdir / "kube", plan.scenario()) as cluster,
        FaultProxy(cluster.kubeconfig, workdir / "proxy", seed=plan.seed) as proxy,
    ):
        log(f"soak {plan.seed}: control plane up, {len(plan.tasks)} tasks, {len(plan.monkey)} monkey actions")
        with running_deployment(
            workdir / "airflow",
            DAGS,
            proxy,  # Airflow reaches kube-apiserver through the fault proxy; the soak itself does not
            settings=settings,
            worker_concurrency=2,
            reserialize_timeout=600,
        ) as dep:
            dep.start("dag-processor", "dag-processor")
            run_id = dep.trigger_dag(DAG_ID)
            log(f"soak {plan.seed}: Airflow up, DAG run {run_id} started")
            actions, killed = _drive(dep, cluster, proxy, plan, run_id, log)
            tries = _tries(dep, run_id)
            run_state = dep.dag_run_state(DAG_ID, run_id)
            _restore_nodes(cluster, 0.0)
            pods_left = _settle(cluster)
        events = list(read_audit_events(cluster.audit))
    nodes_back = actions.pop("node_back", 0)
    lives = pod_lives(events, DAG_ID)
    violations = judge(plan, lives, tries, pods_left, killed)
    return SoakResult(
        seed=plan.seed,
        tasks=len(plan.tasks),
        seconds=round(time.monotonic() - started, 1),
        run_state=run_state,
        actions=dict(sorted(actions.items())),
        fates=_fates(plan, tries),
        violations=violations,
        pods=len(lives),
        slowest=_slowest(plan, tries),
        killed=sorted(killed),
        api_faults=dict(sorted(proxy.injected.items())),
        nodes_back=nodes_back,
    )


def _drive(
    dep: Deployment, cluster: RealCluster, proxy: FaultProxy, plan: Plan, run_id: str, log: Any
) -> tuple[collections.Counter[str], set[str]]:
    """Until the DAG run ends (or its time is up): the monkey's actions on schedule, the user's
    kills, the supervisor's restarts and the nodes' return."""
    import random

    rng = random.Random(f"{plan.seed}-monkey")
    start = time.monotonic()
    pending = list(plan.monkey)
    to_kill = {t.task_id: t.kill_after for t in plan.tasks if t.kill_after is not None}
    deferred_at: dict[str, float] = {}
    killed: set[str] = set()
    actions: collections.Counter[str] = collections.Counter()
    exited_at: dict[str, float] = {}
    limit = soak_time(len(plan.tasks))
    last_report = 0.0
    while (now := time.monotonic() - start) < limit:
        if dep.dag_run_state(DAG_ID, run_id) in ("success", "failed"):
            break
        states = dep.task_states(DAG_ID, run_id)
        for task_id, after in list(to_kill.items()):
            state = states.get(task_id, (0, None))[1]
            if state in TERMINAL:
                del to_kill[task_id]
            elif state == "deferred":
                deferred_at.setdefault(task_id, now)
            if (
                task_id in deferred_at
                and now - deferred_at[task_id] >= float(after or 0)
                and state == "deferred"
            ):
                with contextlib.suppress(AssertionError):  # it moved on meanwhile: try again later
                    dep.api(
                        "PATCH",
                        f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{task_id}",
                        {"new_state": "failed"},
                    )
                    killed.add(task_id)
                    actions["user_kill"] += 1
                    del to_kill[task_id]
        while pending and pending[0][0] <= now:
            _, action = pending.pop(0)
            if _act(dep, cluster, proxy, action, rng, log):
                actions[action] += 1
        for name, proc in dep.procs.items():
            if proc.poll() is not None:
                exited_at.setdefault(name, now)
        if exited_at and now - min(exited_at.values()) >= RESTART_AFTER:
            log(f"  {now:6.0f} s: supervisor starts {', '.join(sorted(exited_at))}")
            dep.restart_exited()
            exited_at.clear()
        actions["node_back"] += _restore_nodes(cluster, NODE_BACK_AFTER)
        if now - last_report >= 60:
            last_report = now
            counts = collections.Counter(state for _, state in states.values())
            log(f"  {now:6.0f} s: {dict(sorted(counts.items(), key=lambda kv: str(kv[0])))}")
        time.sleep(1.0)
    return actions, killed


def _act(dep: Deployment, cluster: RealCluster, proxy: FaultProxy, action: str, rng: Any, log: Any) -> bool:
    """Do one monkey action; False when there was nothing to do it to."""
    verb, _, kind = action.partition("_")
    if verb == "api":
        seconds, share = API_WINDOWS[kind]
        log(f"  monkey: {kind} on {share:.0%} of the API requests for {seconds:.0f} s")
        proxy.window(kind, seconds, share)
        return True
    if action == "restart_kube_apiserver":
        log("  monkey: restart kube-apiserver")
        try:
            cluster.control_plane.restart("kube-apiserver")
        except Exception as exc:  # counted as done: the API server was down, and came back late
            log(f"  monkey: kube-apiserver restart: {exc}")
        return True
    names = {"triggerer": TRIGGERERS, "scheduler": SCHEDULERS, "worker": WORKERS}[kind]
    alive = [n for n in names if n in dep.procs and dep.procs[n].poll() is None]
    if not alive:
        return False
    name = rng.choice(alive)
    sig = signal.SIGKILL if verb == "sigkill" else signal.SIGTERM
    log(f"  monkey: {sig.name} {name}")
    with contextlib.suppress(ProcessLookupError):
        dep.signal(name, sig)
    return True


def _restore_nodes(cluster: RealCluster, after: float) -> int:
    """Start the KWOK process of each node lost at least ``after`` seconds ago; how many."""
    from tools.controlplane.cluster import KWOK_PREFIX

    cp = cluster.control_plane
    lost = cp.directory / "lost"
    back = 0
    for marker in sorted(lost.glob("*")) if lost.exists() else []:
        if time.time() - marker.stat().st_mtime >= after:
            cp.restart(f"{KWOK_PREFIX}{marker.name}")
            back += 1
    return back


def _tries(dep: Deployment, run_id: str) -> list[Try]:
    """Every try of every task, from task_instance_history and task_instance (the current try)."""
    columns = "task_id, try_number, state, start_date, end_date"
    found: dict[tuple[str, int], Try] = {}
    for table in ("task_instance_history", "task_instance"):
        rows = dep.query(f"select {columns} from {table} where dag_id = ? and run_id = ?", DAG_ID, run_id)
        for task_id, number, state, start, end in rows:
            found[(task_id, int(number))] = Try(task_id, int(number), state, start, end)
    return sorted(found.values(), key=lambda t: (t.task_id, t.try_number))


def _settle(cluster: RealCluster) -> list[dict[str, Any]]:
    """The soak's pods once none is left running, or after :data:`SETTLE` seconds."""
    from kubernetes import client as k
    from kubernetes import config as kconfig

    api_client = kconfig.new_client_from_config(str(cluster.kubeconfig))
    try:
        api = k.CoreV1Api(api_client)
        deadline = time.monotonic() + SETTLE
        while True:
            listing = api.list_namespaced_pod("default", label_selector=f"dag_id={DAG_ID}")
            pods = [api_client.sanitize_for_serialization(p) for p in listing.items]
            if all((p["metadata"].get("deletionTimestamp")) for p in pods) or time.monotonic() > deadline:
                return pods
            time.sleep(2)
    finally:
        api_client.close()


def _fates(plan: Plan, tries: list[Try]) -> dict[str, dict[str, int]]:
    final = {t.task_id: t.state for t in tries}  # sorted by try: the last one wins
    out: dict[str, collections.Counter[str]] = {}
    for task in plan.tasks:
        out.setdefault(task.fate, collections.Counter())[str(final.get(task.task_id))] += 1
    return {fate: dict(sorted(c.items())) for fate, c in sorted(out.items())}


def _slowest(plan: Plan, tries: list[Try]) -> tuple[str, str, float] | None:
    spans: dict[str, list[datetime.datetime]] = {}
    for one in tries:
        for stamp in (one.start, one.end):
            if stamp is not None:
                spans.setdefault(one.task_id, []).append(stamp)
    fates = {t.task_id: t.fate for t in plan.tasks}
    timed = [(task, (max(s) - min(s)).total_seconds()) for task, s in spans.items() if s]
    if not timed:
        return None
    task, seconds = max(timed, key=lambda pair: pair[1])
    return task, fates.get(task, "?"), round(seconds, 1)


def _answered(result: SoakResult, action: str) -> str:
    """How many requests an ``api_*`` action's windows answered wrongly; blank for the others."""
    verb, _, kind = action.partition("_")
    return str(result.api_faults.get(kind, 0)) if verb == "api" else ""


def report(result: SoakResult, command: str) -> str:
    """The soak's section of docs/reliability.md."""
    by_invariant = collections.Counter(v.invariant for v in result.violations)
    lines = [
        BEGIN,
        "## The soak: real Airflow on the real control plane",
        "",
        f"`{command}`: {result.tasks} tasks in one DAG run (ended `{result.run_state}`), "
        f"{result.pods} pods, {result.seconds / 60:.1f} minutes. PostgreSQL, CeleryExecutor with "
        "Redis, two schedulers, two triggerers, two Celery workers, the api-server and a DAG "
        "processor, against kube-apiserver, etcd, kube-scheduler, kube-controller-manager and three "
        "KWOK nodes; judged from the API server's audit log and Airflow's metadata database "
        "(`tests/soak/judge.py` lists the invariants).",
        "",
        f"**Violations: {len(result.violations)}**"
        + (": " + ", ".join(f"{k} {n}" for k, n in sorted(by_invariant.items())) if by_invariant else ""),
        "",
        "| fault | times | requests answered wrongly (watches cut) |",
        "|---|---|---|",
        *(f"| {kind} | {n} | {_answered(result, kind)} |" for kind, n in result.actions.items()),
        *(
            f"| {fate} (scenario) | {sum(ends.values())} | |"
            for fate, ends in result.fates.items()
            if fate.startswith("disruption_")
        ),
        "",
        f"Lost nodes that came back: {result.nodes_back}. Airflow's processes reach kube-apiserver "
        "through the fault proxy (`tests/support/api_faults.py`), which the `api_*` actions make "
        "answer wrongly for a while.",
        "",
        "| fate | tasks | ended |",
        "|---|---|---|",
        *(
            f"| {fate} | {sum(ends.values())} | {', '.join(f'{s} {n}' for s, n in ends.items())} |"
            for fate, ends in result.fates.items()
        ),
        "",
    ]
    if result.slowest is not None:
        task, fate, seconds = result.slowest
        lines += [f"Slowest task: `{task}` ({fate}), {seconds:.0f} s from its first start to its end.", ""]
    for violation in result.violations[:20]:
        lines.append(f"- `{violation.invariant}` {violation.task_id}: {violation.detail}")
    lines.append(END)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=300, help="tasks in the DAG run (default 300)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--monkey-every", type=float, default=45.0, help="mean seconds between monkey actions"
    )
    parser.add_argument("--report", default=None, help="write the soak's section into this Markdown file")
    parser.add_argument("--json", default=None, help="write the result as JSON here")
    parser.add_argument("--workdir", default=None, help="keep the logs here (default: a temporary folder)")
    args = parser.parse_args(argv)
    if args.tasks < 1:
        parser.error(f"--tasks {args.tasks}: give at least 1")
    plan = draw(args.seed, args.tasks, monkey_every=args.monkey_every)
    with contextlib.ExitStack() as stack:
        workdir = (
            Path(args.workdir) if args.workdir else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        )
        result = soak(plan, workdir)
    command = f"make soak SOAK_TASKS={args.tasks} SEED={args.seed}"
    print(report(result, command))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(asdict(result), indent=2, default=str))
    if args.report:
        path = Path(args.report)
        path.write_text(with_section(path.read_text() if path.exists() else "", report(result, command)))
        print(f"report written to {args.report}")
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main())
