"""``make bench-stack``: the whole stack, ``RetryingPodOperator`` against the cncf
``KubernetesPodOperator``, under a real Airflow deployment on the real control plane.

One run, one deployment: PostgreSQL (counting its statements with ``pg_stat_statements``),
CeleryExecutor with Redis and two workers of four slots, two schedulers, two triggerers and the
api-server (``tools/deployment.py``), against kube-apiserver, etcd, kube-scheduler,
kube-controller-manager and KWOK nodes with the API server's audit log on. The same DAGs run with
each operator, one DAG file per DAG (``bench/stack_dags/stack.py``, copied once per DAG so that a
worker parses only its task's DAG), one phase after another so that each phase's load average,
database statements and CPU are its own. A warm-up DAG per operator runs first, unmeasured (a task
per worker slot), and the order of the operators turns from one kind of phase to the next.

* ``failure``: pods that run 10 s and exit 1 or are OOM-killed, ``retries=1``, ``retry_delay=0``,
  so that every try of the phase is a failed try; and Airflow's floor (``floor``): a task that
  defers once to Airflow's own timer for as long as the pods run, then fails, the least any
  deferrable operator's failed try can cost;
* ``evict``: pods that would run 10 s and exit 0 but are evicted through the Eviction API 5 s
  after their create (the benchmark's disruptor evicts each task's first pod only): the cncf
  operator fails the try and Airflow retries it, ours relaunches the pod in the same try (its rule
  for evictions);
* ``pull``: ``image`` that cannot be pulled (not found), ``retries=1``: the try fails after each
  operator's grace (ours 90 s from the first failed pull; the cncf operator fails at the first
  ``ErrImagePull``);
* ``success``: pods that run 10 s and exit 0;
* ``seed``: the seed's DAG, ``image="notavalidimage"`` with ``retries=3``, and the rate-limit DAG
  (``dags/03_rate_limit_recovers.py``: the registry answers 429 for 40 s, ``retries=2``), both
  deferrable operators; they run alongside the phases above from their start (a try every few
  minutes) and are waited for at their end, each operator's in namespaces of its own;
* ``scale`` (deferrable operators): deferred tasks whose pods run until the phase ends, in steps
  (100, 500, 1,000 with ``full``); at each step, once every task is deferred, a window is measured:
  API requests per second, kube-apiserver, etcd, triggerer, scheduler and api-server CPU and memory,
  database statements per second. The pods run until the step's window ends rather than 10 minutes:
  on 2 cores, starting 1,000 tasks takes longer than that.

What is measured, from the audit log, the database, the task logs and ``/proc``: the retry
turnaround (from the API server's first write that shows a try's pod failed, or its eviction, to the
create of the next try's pod; for failed pulls, from the end of the operator's grace), API requests
per try (each kind of try runs in a namespace of its own per operator), database statements per
try (less the idle deployment's rate), worker CPU and worker seconds per try, load average and CPU
per phase.

::

    python -m bench.stack --plan quick        # about 15 minutes on 2 cores
    python -m bench.stack --plan full         # about 65 minutes
    python -m bench.stack --plan paced        # about 75 minutes: the failure phase paced, scale at 1,000
    python -m bench.stack --plan paced --size exits=2 --size ooms=2 --size evictions=2 \
        --size scale=40 --size scale_chunk=20 --size scale_window=20   # the plan's phases, smaller

Results go to ``bench/results/stack/`` (``results-PLAN.json``, ``RESULTS-PLAN.md``, plots).
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import dataclasses
import itertools
import json
import os
import shutil
import statistics
import tempfile
import time
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import airflow_k8s_retry
from bench.driver import process_cpu_seconds
from bench.stack_measure import (
    RUN_SECONDS,
    logged_worker_seconds,
    namespace,
    read_audit,
    session_usage,
    statement_groups,
)
from tools.controlplane.realcluster import RealCluster

DAG_TEMPLATE = Path(__file__).with_name("stack_dags") / "stack.py"
RESULTS = Path(__file__).with_name("results") / "stack"
#: The operators compared: ours, the cncf operator deferrable, and not deferrable.
OPERATORS = ("rpo", "kpo_deferrable", "kpo")
DEFERRABLE = ("rpo", "kpo_deferrable")
#: Airflow's floor beside them in the failure phase: a deferral to a timer, then a failed try.
FLOOR = "floor"
#: The scale phase's operators: ours as it comes (``logging_interval=30`` copies the base container's
#: new log lines into the task log every 30 s, one log read per pod each time), ours without live
#: logs (as the cncf operator, which writes the log when the pod ends), and the deferrable KPO.
SCALE_OPERATORS = ("rpo", "rpo_quiet", "kpo_deferrable")
EVICT_AFTER = 5
#: Each Celery worker's slots (two workers): a warm-up task per slot and operator, so that every
#: worker process has run a task (its first costs more: imports, the result backend's connection)
#: before the first measured phase.
WORKER_CONCURRENCY = 4
WARMUP_TASKS = 2 * WORKER_CONCURRENCY
#: The kinds of try a paced plan runs in its pool: the failure and evict phases' (the floor's timers
#: among them).
PACED_KINDS = ("exit", "oom", "evict", "timer")
IMAGES: dict[str, dict[str, Any]] = {
    "bench.example.com/exit-1:1": {"run": {"duration_seconds": RUN_SECONDS, "exit_code": 1}},
    "bench.example.com/oom:1": {"run": {"duration_seconds": RUN_SECONDS, "oom": True}},
    "bench.example.com/ok:1": {"run": {"duration_seconds": RUN_SECONDS}},
    "bench.example.com/long:1": {"run": {"duration_seconds": 6 * 3600}},
    "notavalidimage": {"pull": "not_found"},
    # The rate-limit DAG's image, one per operator so that each meets its own 40 s of 429s.
    **{
        f"registry.example.com/team/report-{op}:1.4": {
            "pull": "rate_limited",
            "for_seconds": 40,
            "run": {"duration_seconds": RUN_SECONDS},
        }
        for op in ("rpo", "kpo_deferrable")
    },
}
IMAGE_OF = {
    "exit": "bench.example.com/exit-1:1",
    "oom": "bench.example.com/oom:1",
    "evict": "bench.example.com/ok:1",
    "pull": "notavalidimage",
    "ok": "bench.example.com/ok:1",
    "scale": "bench.example.com/long:1",
}
#: The Airflow processes whose CPU and memory the benchmark reads, by role.
ROLES = {
    "worker": ("worker-a", "worker-b"),
    "scheduler": ("scheduler-a", "scheduler-b"),
    "triggerer": ("triggerer-a", "triggerer-b"),
    "api-server": ("api-server",),
}


@dataclass(frozen=True)
class Sizes:
    exits: int  # failing tasks of each kind, per operator
    ooms: int
    evictions: int
    pulls: int
    successes: int
    seed_retry_delay: int  # seconds between the seed DAG's tries
    scale: tuple[int, ...]  # deferred tasks at each step of the scale phase
    scale_chunk: int  # tasks per scale DAG
    scale_window: float  # seconds measured at each step
    #: Paced plans: at most this many failure-phase tasks in flight at once (a pool counting
    #: deferred tasks), a retry ahead of any task not started yet; 0 runs every task at once.
    lanes: int = 0
    failure_retries: int = 1  # retries of the exit 1 and OOM tasks (each retry is a turnaround)
    kinds: tuple[str, ...] = ("failure", "evict", "pull", "success", "seed")  # the turnaround part's phases
    scale_operators: tuple[str, ...] = SCALE_OPERATORS


PLANS = {
    "quick": Sizes(
        exits=4,
        ooms=2,
        evictions=2,
        pulls=2,
        successes=4,
        seed_retry_delay=10,
        scale=(20, 40),
        scale_chunk=20,
        scale_window=30,
    ),
    "full": Sizes(
        exits=50,
        ooms=50,
        evictions=50,
        pulls=50,
        successes=20,
        seed_retry_delay=300,
        scale=(100, 500, 1000),
        scale_chunk=100,
        scale_window=120,
    ),
    # The machinery's own cost: the failure and evict phases paced to the worker slots (8 tasks in
    # flight, a retry first), so no retry waits for a slot; 51 turnarounds of exit 1 and OOM (17
    # tasks, 3 retries each) and the floor's 34 tasks alike, then 50 evictions per operator; then
    # 1,000 deferred tasks, ours without live logs against the deferrable KPO (``--scale-operators``).
    "paced": Sizes(
        exits=17,
        ooms=17,
        evictions=50,
        pulls=0,
        successes=0,
        seed_retry_delay=300,
        scale=(1000,),
        scale_chunk=100,
        scale_window=120,
        lanes=8,
        failure_retries=3,
        kinds=("failure", "evict"),
        scale_operators=("rpo_quiet", "kpo_deferrable"),
    ),
}
#: The pool that paces a paced plan's failure phase.
PACING_POOL = "stack_paced"


def resized(sizes: Sizes, settings: list[str]) -> Sizes:
    """``sizes`` with ``NAME=VALUE`` settings over its fields (``--size exits=2``; a tuple's items
    comma-separated: ``--size scale=20,40``), to run a plan's phases smaller."""
    types = typing.get_type_hints(Sizes)
    changes: dict[str, Any] = {}
    for setting in settings:
        name, _, value = setting.partition("=")
        if name not in types or not value:
            raise SystemExit(f"--size {setting}: use NAME=VALUE with NAME one of {', '.join(types)}")
        kind = types[name]
        item = typing.get_args(kind)[0] if typing.get_origin(kind) is tuple else kind
        try:
            items = [item(v) for v in value.split(",") if v]
        except ValueError:
            raise SystemExit(f"--size {setting}: {value!r} is not of type {item.__name__}") from None
        changes[name] = tuple(items) if item is not kind else items[0]
    return dataclasses.replace(sizes, **changes)


#: Each operator's mark in its pods' names (``name``): the disruptor tells them apart by name.
MARK = {"rpo": "rpo", "rpo_quiet": "rpoq", "kpo_deferrable": "kpod", "kpo": "kpo", FLOOR: "floor"}


def evictions(sizes: Sizes) -> list[dict[str, Any]]:
    """One eviction per evict task and operator, of the task's first pod, 5 s after its create: the
    try it fails reruns (the cncf operator's next try, our relaunch in the same try) and succeeds."""
    return [
        {"kind": "evict", "pod_name_prefix": f"evict-{i:04d}-{MARK[op]}-", "after_seconds": EVICT_AFTER}
        for op in OPERATORS
        for i in range(sizes.evictions)
    ]


def plan(sizes: Sizes) -> dict[str, Any]:
    """The DAGs of a run (JSON for the DAG files): per operator, one per phase (and the scale
    phase's in chunks), and the seed's. A task's id is its kind and a number."""

    def tasks(kind: str, op: str, count: int, retries: int, delay: int = 0) -> list[dict[str, Any]]:
        ns = namespace(op, kind)
        paced = {"pool": PACING_POOL} if sizes.lanes and kind in PACED_KINDS else {}
        return [
            {
                "task_id": f"{kind}_{i:04d}",
                "name": f"{kind}-{i:04d}-{MARK[op]}",
                "image": IMAGE_OF.get(kind),  # the floor's timers run none
                "namespace": ns,
                "retries": retries,
                "retry_delay": delay,
                **paced,
            }
            for i in range(count)
        ]

    def in_turns(*per_kind: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The kinds' tasks; paced, taken in turn, each weighing less than the one before: the
        scheduler starts the heaviest first, so a retry (of a task started before) goes ahead of
        every task not started yet."""
        if not sizes.lanes:
            return [t for its in per_kind for t in its]
        turns = [t for group in itertools.zip_longest(*per_kind) for t in group if t is not None]
        return [{**t, "priority_weight": len(turns) - i} for i, t in enumerate(turns)]

    dags: list[dict[str, Any]] = []

    def dag(dag_id: str, op: str, kind: str, its_tasks: list[dict[str, Any]]) -> None:
        dags.append({"dag_id": dag_id, "operator": op, "kind": kind, "tasks": its_tasks})

    retries = sizes.failure_retries
    for op in OPERATORS:
        dag(f"stack_{op}_warmup", op, "warmup", tasks("ok", op, WARMUP_TASKS, 0))
        failing = in_turns(tasks("exit", op, sizes.exits, retries), tasks("oom", op, sizes.ooms, retries))
        dag(f"stack_{op}_failure", op, "failure", failing)
        # An evicted task's rerun succeeds: one retry is all it can use.
        dag(f"stack_{op}_evict", op, "evict", in_turns(tasks("evict", op, sizes.evictions, 1)))
        dag(f"stack_{op}_pull", op, "pull", tasks("pull", op, sizes.pulls, 1))
        dag(f"stack_{op}_success", op, "success", tasks("ok", op, sizes.successes, 0))
    # The floor: as many tasks as fail pods, their settings alike, each deferring for as long as a
    # pod runs.
    timers = tasks("timer", FLOOR, sizes.exits + sizes.ooms, retries)
    dag(f"stack_{FLOOR}_failure", FLOOR, "failure", in_turns([{**t, "seconds": RUN_SECONDS} for t in timers]))
    for op in DEFERRABLE:
        seed = {
            **tasks("pull", op, 1, 3, sizes.seed_retry_delay)[0],
            "task_id": "seed",
            "namespace": namespace(op, "seed"),
        }
        dag(f"stack_{op}_seed", op, "seed", [seed])
        throttled = {
            **seed,
            "task_id": "pull_through_throttle",
            "image": f"registry.example.com/team/report-{op}:1.4",
            "retries": 2,
            "retry_delay": 2,
            "namespace": namespace(op, "ratelimit"),
        }
        dag(f"stack_{op}_ratelimit", op, "ratelimit", [throttled])
    for op in sizes.scale_operators:
        everything = tasks("scale", op, max(sizes.scale), 0)
        for k in range(0, len(everything), sizes.scale_chunk):
            dag(
                f"stack_{op}_scale_{k // sizes.scale_chunk:02d}",
                op,
                "scale",
                everything[k : k + sizes.scale_chunk],
            )
    for d in dags:  # the warm-up's tasks run in a namespace of their own
        if d["kind"] == "warmup":
            d["tasks"] = [{**t, "namespace": namespace(d["operator"], "warmup")} for t in d["tasks"]]
    return {"dags": [d for d in dags if d["tasks"]]}


def namespaces_of(the_plan: dict[str, Any]) -> list[str]:
    return sorted({t["namespace"] for d in the_plan["dags"] for t in d["tasks"]})


def write_dag_files(the_plan: dict[str, Any], folder: Path) -> None:
    """One DAG file per DAG, each the template under the DAG's id: the template builds the DAGs of
    the plan whose id is its file's name."""
    folder.mkdir(parents=True, exist_ok=True)
    for d in the_plan["dags"]:
        shutil.copyfile(DAG_TEMPLATE, folder / f"{d['dag_id']}.py")


# -- a phase -------------------------------------------------------------------------------------


def role_usage(dep: Any) -> dict[str, tuple[float, float]]:
    """(CPU seconds, MiB resident) of each role's processes, with their children."""
    out = {}
    for role, names in ROLES.items():
        usages = [session_usage(dep.procs[n].pid) for n in names if n in dep.procs]
        out[role] = (sum(u.cpu for u in usages), sum(u.rss for u in usages))
    return out


def cluster_cpu(cluster: RealCluster) -> dict[str, float]:
    out = {}
    for name, pid in cluster.component_pids().items():
        with contextlib.suppress(OSError):
            out[name] = process_cpu_seconds(pid)
    return out


@dataclass
class Phase:
    name: str
    dag_ids: list[str]
    started: float = 0.0
    ended: float = 0.0
    states: dict[str, str | None] = field(default_factory=dict)
    statements: int = 0
    loads: list[float] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)  # role or component -> CPU seconds in the phase
    rss: dict[str, float] = field(default_factory=dict)  # role -> most MiB resident seen
    deferred: tuple[int, int] = (0, 0)  # scale steps: deferred tasks at the window's start and end
    ramp: float = 0.0  # scale steps: seconds from triggering the step's DAGs to all tasks deferred
    failed: int = 0  # scale steps: tasks that ended failed instead of staying deferred, at the window's end
    top: list[tuple[int, str]] = field(default_factory=list)  # the statements run most often
    groups: dict[str, int] = field(default_factory=dict)  # statements by group (``statement_group``)

    @property
    def seconds(self) -> float:
        return self.ended - self.started

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dag_ids": self.dag_ids,
            "started": self.started,
            "ended": self.ended,
            "seconds": round(self.seconds, 1),
            "states": self.states,
            "statements": self.statements,
            "load_mean": round(statistics.fmean(self.loads), 2) if self.loads else 0.0,
            "load_max": round(max(self.loads, default=0.0), 2),
            "cpu": {k: round(v, 2) for k, v in self.cpu.items()},
            "rss": self.rss,
            "deferred": list(self.deferred),
            "ramp_seconds": round(self.ramp, 1),
            "failed": self.failed,
            "top_statements": self.top,
            "statement_groups": self.groups,
        }


class Meter:
    """Reads a phase's statements, CPU, memory and load between :meth:`start` and :meth:`stop`."""

    def __init__(self, dep: Any, cluster: RealCluster, phase: Phase) -> None:
        self.dep, self.cluster, self.phase = dep, cluster, phase

    def start(self) -> None:
        self.dep.database.reset_statements()
        self._roles, self._cluster = role_usage(self.dep), cluster_cpu(self.cluster)
        self.phase.started = time.time()

    def sample(self) -> None:
        self.phase.loads.append(os.getloadavg()[0])
        for role, (_, rss) in role_usage(self.dep).items():
            self.phase.rss[role] = max(self.phase.rss.get(role, 0.0), rss)

    def stop(self) -> None:
        self.phase.ended = time.time()
        self.phase.statements = self.dep.database.statements()
        self.phase.top = self.dep.database.top_statements(15)
        self.phase.groups = statement_groups(statement_rows(self.dep))
        roles, comps = role_usage(self.dep), cluster_cpu(self.cluster)
        self.phase.cpu = {r: roles[r][0] - self._roles[r][0] for r in roles}
        self.phase.cpu.update({c: comps.get(c, 0.0) - self._cluster.get(c, 0.0) for c in comps})


def statement_rows(dep: Any) -> list[tuple[str, int, str]]:
    """(database user, calls, text) of every statement the database counted since its last reset;
    each process role connects as a user of its own (``scheduler``, ``triggerer``, ``api_server``,
    ``worker``; ``airflow`` is the benchmark's own)."""
    rows = dep.query(
        "select r.rolname, s.calls, s.query from pg_stat_statements s "
        "join pg_database d on d.oid = s.dbid join pg_roles r on r.oid = s.userid "
        "where d.datname = current_database() and s.query not ilike '%%pg_stat_statements%%'"
    )
    return [(str(user), int(calls), str(text)) for user, calls, text in rows]


def run_phase(dep: Any, cluster: RealCluster, name: str, dag_ids: list[str], timeout: float) -> Phase:
    """Trigger ``dag_ids`` at once and wait for their runs to end."""
    phase = Phase(name, dag_ids)
    meter = Meter(dep, cluster, phase)
    meter.start()
    runs = {dag_id: dep.trigger_dag(dag_id) for dag_id in dag_ids}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        meter.sample()
        phase.states = {d: dep.dag_run_state(d, r) for d, r in runs.items()}
        if all(s in ("success", "failed") for s in phase.states.values()):
            break
        time.sleep(2)
    meter.stop()
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


def deferred_count(dep: Any, op: str) -> int:
    return scale_states(dep, op).get("deferred", 0)


def scale_states(dep: Any, op: str) -> dict[str, int]:
    """How many of the operator's scale tasks are in each state (``none`` for no state yet)."""
    rows = dep.query(
        "select coalesce(state, 'none'), count(*) from task_instance where dag_id like ? group by 1",
        f"stack_{op}_scale_%",
    )
    return {str(state): int(n) for state, n in rows}


#: States a scale task passes through on its way to deferral (or to an end before it).
ON_THE_WAY = frozenset({"none", "scheduled", "queued", "running", "up_for_retry", "restarting"})


def ramp_over(states: dict[str, int], level: int) -> bool:
    """A step's ramp is over once ``level`` tasks are deferred, or once no task of it is on its
    way any more (some ended before deferring, or fell out of deferral and ended: the step is
    measured at the deferred tasks it has, and its ended ones are reported)."""
    on_the_way = sum(n for state, n in states.items() if state in ON_THE_WAY)
    return states.get("deferred", 0) >= level or (on_the_way == 0 and sum(states.values()) >= level)


def scale_phase(dep: Any, cluster: RealCluster, sizes: Sizes, op: str, log: Any) -> list[Phase]:
    """Deferred tasks in steps; at each, once all are deferred, a measured window. Then every run
    is marked failed (a user's kill) and what pods are left are deleted."""
    from kubernetes import client

    chunks = [f"stack_{op}_scale_{k:02d}" for k in range(max(sizes.scale) // sizes.scale_chunk)]
    runs: dict[str, str] = {}
    steps: list[Phase] = []
    for level in sizes.scale:
        ramp = time.time()
        for dag_id in chunks[len(runs) : level // sizes.scale_chunk]:
            runs[dag_id] = dep.trigger_dag(dag_id)
        dep.wait(lambda n=level: ramp_over(scale_states(dep, op), n), 3600, f"{level} deferred tasks of {op}")
        ramped = time.time() - ramp
        time.sleep(15)  # the last triggers' first watches and reads settle
        step = Phase(f"{op} scale {level}", list(runs))
        meter = Meter(dep, cluster, step)
        meter.start()
        at_start = deferred_count(dep, op)
        end = time.monotonic() + sizes.scale_window
        while time.monotonic() < end:
            meter.sample()
            time.sleep(5)
        meter.stop()
        states = scale_states(dep, op)
        step.deferred = (at_start, states.get("deferred", 0))
        step.failed = states.get("failed", 0)
        step.ramp = ramped
        steps.append(step)
        log(
            f"{step.name}: deferred {step.deferred}, failed {step.failed}, CPU {step.summary()['cpu']}, "
            f"load {step.summary()['load_mean']}"
        )
    for dag_id, run_id in runs.items():
        dep.api("PATCH", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}", {"state": "failed"})
    dep.wait(lambda: deferred_count(dep, op) == 0, 900, f"the scale tasks of {op} to end")
    core, ns = client.CoreV1Api(), namespace(op, "scale")
    core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    dep.wait(lambda: not core.list_namespaced_pod(ns).items, 600, f"the pods of {ns} to go")
    return steps


# -- the run -------------------------------------------------------------------------------------


def bench(
    sizes: Sizes,
    workdir: Path,
    log: Any = print,
    only: set[str] | None = None,
    kinds: tuple[str, ...] | None = None,
    scale_operators: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """Run the plan's phases (``only`` picks some: ``turnaround``, ``scale``) and return the raw
    figures (``bench.stack_report.summarize`` makes the rows)."""
    from kubernetes import client, config

    from tools.deployment import running_deployment

    wanted = only or {"turnaround", "scale"}
    sizes = dataclasses.replace(
        sizes, kinds=kinds or sizes.kinds, scale_operators=scale_operators or sizes.scale_operators
    )
    kinds, scale_operators = sizes.kinds, sizes.scale_operators
    the_plan = plan(sizes)
    # This package's modules compiled, as pip compiles an installed wheel's (the cncf provider's are):
    # an editable install under PYTHONDONTWRITEBYTECODE would compile them again in every task process.
    compileall.compile_dir(str(Path(airflow_k8s_retry.__file__).parent), quiet=1)
    workdir.mkdir(parents=True, exist_ok=True)
    plan_file = workdir / "plan.json"
    plan_file.write_text(json.dumps(the_plan))
    write_dag_files(the_plan, workdir / "dags")
    settings = {
        "AIRFLOW_K8S_RETRY_STACK_PLAN": str(plan_file),
        "AIRFLOW__CORE__PARALLELISM": "16",
    }
    scenario = {
        "time_scale": 1.0,
        "images": IMAGES,
        "disruptions": evictions(sizes),
    }
    phases: list[Phase] = []
    with RealCluster(workdir / "kube", scenario) as cluster:
        config.load_kube_config(str(cluster.kubeconfig))
        core = client.CoreV1Api()
        for ns in namespaces_of(the_plan):
            core.create_namespace({"metadata": {"name": ns}})
        for ns in namespaces_of(the_plan):  # pods are admitted once the default ServiceAccount exists
            deadline = time.monotonic() + 60
            while not core.list_namespaced_service_account(ns).items and time.monotonic() < deadline:
                time.sleep(0.5)
        log(f"control plane up; {len(namespaces_of(the_plan))} namespaces")
        with running_deployment(
            workdir / "airflow",
            workdir / "dags",
            cluster,
            settings=settings,
            worker_concurrency=WORKER_CONCURRENCY,
            reserialize_timeout=900,
            track_statements=True,
        ) as dep:
            dep.database.reset_statements()
            idle_from = time.time()  # from here on only Airflow talks to the cluster
            time.sleep(60)
            idle_seconds = time.time() - idle_from
            idle = dep.database.statements() / idle_seconds
            idle_groups = {g: n / idle_seconds for g, n in statement_groups(statement_rows(dep)).items()}
            log(f"Airflow up; idle deployment: {idle:.1f} statements/s")
            if sizes.lanes:
                dep.api(
                    "POST",
                    "/api/v2/pools",
                    {"name": PACING_POOL, "slots": sizes.lanes, "include_deferred": True},
                )
            warm = run_phase(dep, cluster, "warm-up", [f"stack_{op}_warmup" for op in OPERATORS], 900)
            log(f"warm-up: {warm.seconds:.0f} s, {warm.states}")
            if "turnaround" in wanted:
                seeds = {
                    f"stack_{op}_{k}": dep.trigger_dag(f"stack_{op}_{k}")
                    for op in DEFERRABLE
                    for k in ("seed", "ratelimit")
                    if "seed" in kinds
                }
                for kind, order in (
                    ("failure", (*OPERATORS, FLOOR)),
                    ("evict", OPERATORS[2:] + OPERATORS[:2]),
                    ("pull", OPERATORS[1:] + OPERATORS[:1]),
                    ("success", OPERATORS[2:] + OPERATORS[:2]),
                ):
                    for op in order if kind in kinds else ():
                        phase = run_phase(dep, cluster, f"{op} {kind}", [f"stack_{op}_{kind}"], timeout=3600)
                        phases.append(phase)
                        log(
                            f"{phase.name}: {phase.seconds:.0f} s, {phase.states}, "
                            f"load {phase.summary()['load_mean']}"
                        )
                        time.sleep(10)
                dep.wait(
                    lambda: all(dep.dag_run_state(d, r) in ("success", "failed") for d, r in seeds.items()),
                    3600,
                    "the seed DAGs",
                )
                seed_runs = {}
                for d, r in seeds.items():
                    start, end, state = dep.query(
                        "select start_date, end_date, state from dag_run where dag_id = ? and run_id = ?",
                        d,
                        r,
                    )[0]
                    seed_runs[d] = {"seconds": round((end - start).total_seconds(), 1), "state": state}
                log(f"seed: {seed_runs}")
            else:
                seed_runs = {}
            if "scale" in wanted:
                for op in scale_operators:
                    phases += scale_phase(dep, cluster, sizes, op, log)
                    time.sleep(30)
            tries = {d["dag_id"]: tries_of(dep, d["dag_id"]) for d in the_plan["dags"]}
            logs = dep.home.home / "logs"
            worker_seconds = {d["dag_id"]: logged_worker_seconds(logs, d["dag_id"]) for d in the_plan["dags"]}
        audit = read_audit(cluster.audit, since=idle_from)
    from bench.stack_report import summarize

    return summarize(
        sizes, the_plan, phases, tries, audit, idle, worker_seconds, seed_runs, logs, idle_groups
    )


def main(argv: list[str] | None = None) -> int:
    from bench.stack_report import plot, report

    parser = argparse.ArgumentParser(prog="python -m bench.stack", description=__doc__.splitlines()[0])
    parser.add_argument("--plan", choices=sorted(PLANS), default="quick")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--workdir", default=None, help="keep the cluster's and Airflow's files here")
    parser.add_argument(
        "--only", choices=("turnaround", "scale"), default=None, help="run one part of the plan"
    )
    parser.add_argument(
        "--kinds", default=None, help="the turnaround part's phases (default: the plan's, e.g. failure,pull)"
    )
    parser.add_argument(
        "--scale-operators", default=None, help="the scale part's operators (default: the plan's)"
    )
    parser.add_argument(
        "--size",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a size of the plan set anew (e.g. exits=2, scale=20,40): the plan's phases, smaller",
    )
    args = parser.parse_args(argv)
    out = Path(args.out)
    with contextlib.ExitStack() as stack:
        workdir = (
            Path(args.workdir)
            if args.workdir
            else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-stack-")))
        )
        only = {args.only} if args.only else None
        result = bench(
            resized(PLANS[args.plan], args.size),
            workdir.absolute(),
            log=lambda m: print(m, flush=True),
            only=only,
            kinds=tuple(args.kinds.split(",")) if args.kinds else None,
            scale_operators=tuple(args.scale_operators.split(",")) if args.scale_operators else None,
        )
    import datetime
    import subprocess

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    part = {"turnaround": "turnaround, per try, seed", "scale": "scale"}.get(args.only or "", "every part")
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    result["runs"] = [{"part": part, "commit": commit.stdout.strip() or "unknown", "date": when}]
    if args.size:
        result["size_settings"] = list(args.size)
    out.mkdir(parents=True, exist_ok=True)
    # A smaller run (--size) writes results of its own: the plan's committed ones stay.
    name = args.plan + ("-resized" if args.size else "") + (f"-{args.only}" if args.only else "")
    (out / f"results-{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    text = report(result, args.plan)
    (out / f"RESULTS-{name}.md").write_text(text)
    plot(result, out, name)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
