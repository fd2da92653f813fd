"""One seeded chaos run: a task driven as Airflow drives it, with faults, restarts, crashes and kills.

A run owns one namespace of a :class:`FakeCluster` of its own (``RUNS_PER_CLUSTER``; runs in a
process go one after another, so the cluster's fault list belongs to the current run). Everything
random comes from ``random.Random(seed)``: the pod fate, the operator's arguments, the API faults
and when they start, the triggerer restart or hand-over, the worker crash, and the user's kill.
The run goes on the discrete clock of :mod:`tests.chaos.scheduler` (simulated time moves only
while every actor is idle), so a seed gives one answer on any machine. The invariants are checked
afterwards from the simulator's audit log (pod lifecycles, requests) and from the task's state in
:mod:`tests.chaos.airflow_model`.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import queue
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from tests.chaos import fates
from tests.chaos.airflow_model import (
    ON_KILL_TIMEOUT,
    ApiServer,
    CrashPlan,
    DagRun,
    Deferral,
    TaskInstance,
    TaskStates,
    Triggerer,
    TriggerFailed,
    Worker,
    WorkerDied,
    context_for,
    now_as_datetime,
    state_after,
)
from tests.chaos.scheduler import SimClock

#: The pace the runs were tuned at: real seconds per simulated second. The runs now go on a discrete
#: clock (``tests/chaos/scheduler.py``); a bound or a wait the harness once counted in real seconds
#: counts ``1 / TIME_SCALE`` times as many simulated ones, as it did then.
TIME_SCALE = 0.001
VERDICT_ANNOTATION = "airflow-k8s-retry.io/verdict"
FAULT_VERBS = ("get", "list", "watch", "create", "patch", "delete")
FAULT_STATUSES: tuple[int | str, ...] = (500, 429, "reset", 410, "slow", 403, "lost")
TERMINAL = ("success", "failed", "skipped")


# -- the plan -------------------------------------------------------------------------------------


@dataclass
class FaultPlan:
    verb: str
    resource: str
    status: int | str
    times: int
    after: float  # simulated seconds after the task starts
    delay: float = 0.0  # real seconds, for "slow"

    def describe(self) -> str:
        return f"{self.status} x{self.times} on {self.verb} {self.resource} at +{self.after:.0f}s"


@dataclass
class Plan:
    seed: int
    fate: fates.Fate
    retries: int
    on_finish_action: str
    do_xcom_push: bool
    faults: list[FaultPlan]
    #: ``(kind, after)``: ``restart`` (graceful), ``kill9`` or ``stale`` (A stalls, B takes over).
    triggerer: tuple[str, float] | None
    #: ``(try number, crash plan)``.
    crash: tuple[int, CrashPlan] | None
    #: ``(kind, after)``: ``mark_failed`` or ``delete_run`` while deferred.
    user_kill: tuple[str, float] | None
    #: ``(try number, n)``: the n-th XCom push of that try fails (the execution API answers 503).
    xcom_fault: tuple[int, int] | None = None
    #: A user marks the task failed while it waits for a worker after its trigger fired
    #: (``scheduled``/``queued``), in the first such wait.
    waiting_kill: bool = False

    def describe(self) -> str:
        parts = [f"fate={self.fate.kind}", f"retries={self.retries}", f"on_finish={self.on_finish_action}"]
        stop = (self.fate.image.get("run") or {}).get("stop_seconds")
        if stop is not None:
            parts.append(f"stops_in={stop:g}s")
        if self.do_xcom_push:
            parts.append("xcom")
        parts += [f"fault[{f.describe()}]" for f in self.faults]
        if self.triggerer:
            parts.append(f"triggerer={self.triggerer[0]}@+{self.triggerer[1]:.0f}s")
        if self.crash:
            try_number, crash = self.crash
            when = "after-call" if crash.answer_lost else "before-call"
            what = "kill" if crash.kill else (f"alarm-{when}" if crash.alarm else f"crash-{when}")
            goes_on = f",unaware={crash.unaware},goes_on={crash.goes_on}" if crash.kill else ""
            parts.append(f"worker={what}#{crash.at}@try{try_number}{goes_on}")
        if self.user_kill:
            parts.append(f"user={self.user_kill[0]}@+{self.user_kill[1]:.0f}s")
        if self.waiting_kill:
            parts.append("user=mark_failed_waiting@resume")
        if self.xcom_fault:
            parts.append(f"airflow=xcom_push_503#{self.xcom_fault[1]}@try{self.xcom_fault[0]}")
        return " ".join(parts)


def draw_plan(seed: int) -> Plan:
    rng = random.Random(seed)
    fate = fates.draw(rng, seed)
    retries = rng.choice([0, 1, 1, 2, 3])
    on_finish = rng.choices(["delete_pod", "delete_succeeded_pod", "keep_pod"], [8, 1, 1])[0]
    faults: list[FaultPlan] = []
    for _ in range(rng.choice([0, 1, 1, 2, 3, 4])):
        verb = rng.choice(FAULT_VERBS)
        resource = "pods"
        if verb in ("list", "watch") and rng.random() < 0.3:
            resource = "events"
        elif verb == "get" and rng.random() < 0.2:
            resource = "pods/log"
        status = rng.choice(FAULT_STATUSES)
        faults.append(
            FaultPlan(
                verb=verb,
                resource=resource,
                status=status,
                times=rng.choice([1, 1, 2, 3]),
                after=round(rng.uniform(0, 120), 1),
                delay=round(rng.uniform(0.02, 0.2), 3) if status == "slow" else 0.0,
            )
        )
    triggerer = None
    if rng.random() < 0.4:
        triggerer = (rng.choice(["restart", "kill9", "stale"]), round(rng.uniform(0, 150), 1))
    crash = None
    if rng.random() < 0.35:
        mode = rng.choice(["before", "after", "kill"])
        crash = (
            rng.randint(1, retries + 1),
            CrashPlan(at=rng.randint(1, 8), answer_lost=mode == "after", kill=mode == "kill"),
        )
    user_kill = None
    if rng.random() < 0.1:
        user_kill = (rng.choice(["mark_failed", "mark_failed", "delete_run"]), round(rng.uniform(0, 120), 1))
    do_xcom_push = rng.random() < 0.15
    xcom_fault = None  # drawn last, so the draws above stay what they were before it existed
    if rng.random() < 0.08:
        xcom_fault = (rng.randint(1, retries + 1), rng.randint(1, 3))
    # Later additions draw from generators of their own, so every draw above stays what it was.
    if crash is not None and crash[1].kill:
        # After SIGTERM the task's code goes on until SIGKILL, 5 s later: a few more calls.
        crash[1].goes_on = random.Random(f"{seed}/sigterm").randint(0, 3)
        # The supervisor hears of the kill at its next heartbeat, up to 5 s later: calls before it.
        crash[1].unaware = random.Random(f"{seed}/heartbeat").randint(0, 3)
    alarm = random.Random(f"{seed}/alarm")
    if crash is None and alarm.random() < 0.08:
        # execution_timeout runs out in the worker: the task needs one for Airflow to arm the alarm.
        crash = (
            alarm.randint(1, retries + 1),
            CrashPlan(at=alarm.randint(1, 8), answer_lost=alarm.random() < 0.5, alarm=True),
        )
        fate.operator.setdefault("execution_timeout", 3600)
    waiting_kill = random.Random(f"{seed}/waiting").random() < 0.06
    if fate.disruption is not None:
        # A container that takes its time to stop after SIGTERM (capped by the pod's 30 s grace):
        # a replacement started before it stopped would run beside it (review #8). Its own
        # generator, so every draw above stays what it was.
        stop = round(random.Random(f"{seed}/stop").choice([0.5, 5.0, 10.0, 20.0, 29.0]), 1)
        fate.image.setdefault("run", {})["stop_seconds"] = stop
    return Plan(
        xcom_fault=xcom_fault,
        seed=seed,
        fate=fate,
        retries=retries,
        on_finish_action=on_finish,
        do_xcom_push=do_xcom_push,
        faults=faults,
        triggerer=triggerer,
        crash=crash,
        user_kill=user_kill,
        waiting_kill=waiting_kill,
    )


# -- the result -----------------------------------------------------------------------------------


@dataclass
class Violation:
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


@dataclass
class Result:
    seed: int
    plan: str
    state: str | None
    tries: int
    real_seconds: float
    sim_seconds: float
    violations: list[Violation] = field(default_factory=list)
    faults_hit: Counter[str] = field(default_factory=Counter)
    verdicts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: The latest a scripted kubelet step fired, in simulated seconds (how starved the run was).
    max_lag: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "plan": self.plan,
            "state": self.state,
            "tries": self.tries,
            "real_seconds": round(self.real_seconds, 3),
            "sim_seconds": round(self.sim_seconds, 1),
            "violations": [{"kind": v.kind, "detail": v.detail} for v in self.violations],
            "faults_hit": dict(self.faults_hit),
            "verdicts": self.verdicts,
            "notes": self.notes,
            "max_lag": round(self.max_lag, 1),
        }

    def explain(self) -> str:
        lines = [f"seed {self.seed}: {self.plan}", f"  ended {self.state} after {self.tries} tr(y/ies)"]
        lines += [f"  verdict {v}" for v in self.verdicts]
        lines += [f"  note {n}" for n in self.notes]
        lines += [f"  VIOLATION {v}" for v in self.violations]
        lines.append(f"  replay: make chaos SEED={self.seed}")
        return "\n".join(lines)


# -- the environment shared by the runs of one process --------------------------------------------


class Environment:
    """One simulator, one simulated clock and one model of task states for a process's runs."""

    def __init__(self, time_scale: float = TIME_SCALE, triggerer_start_delay: float = 0.0) -> None:
        self.time_scale = time_scale
        #: Real seconds (at ``time_scale``) a triggerer's loop is busy before a new trigger's first
        #: turn (a loaded machine); it waits that long in simulated seconds.
        self.triggerer_start_delay = triggerer_start_delay
        self.executions = 0
        _warm_up()
        self.clock = SimClock(time.time())
        self._start_cluster()
        self.states = TaskStates()
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(self.states.serving())
        self._stack.enter_context(_pace(self.clock, time_scale))
        self._stack.enter_context(Worker.installed())

    def sim(self, real_seconds: float) -> float:
        """Simulated seconds for a bound the harness set in real seconds at ``time_scale``."""
        return real_seconds / self.time_scale

    def _start_cluster(self) -> None:
        from airflow_k8s_retry_testing import FakeCluster

        self.cluster = FakeCluster({"nodes": [{"name": "chaos-node", "cpu": "64"}]}, clock="manual")
        self.cluster.start()
        self.clock.use_cluster(self.cluster)
        self._kubeconfig_before = getattr(self, "_kubeconfig_before", os.environ.get("KUBECONFIG"))
        os.environ["KUBECONFIG"] = str(self.cluster.kubeconfig)
        self.runs = 0

    def _forget_cluster(self) -> None:
        if self.cluster._loop is not None:
            self.clock.forget_loop(self.cluster._loop)
        self.cluster.stop()

    def renew(self) -> None:
        """A fresh simulator (same clock): the old one's leftovers no longer cost time."""
        self._forget_cluster()
        self._start_cluster()
        self.runs = 1

    def close(self) -> None:
        self._stack.close()
        self._forget_cluster()
        if self._kubeconfig_before is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = self._kubeconfig_before


def _warm_up() -> None:
    """Import what a run needs first, so the first run's timings are not an import's."""
    import importlib

    for module in (
        "airflow.serialization.serialized_objects",
        "airflow.sdk.execution_time.task_runner",
        "airflow_k8s_retry.operators",
        "airflow_k8s_retry.triggers",
        "airflow_k8s_retry.kube.hub",
        "airflow_k8s_retry.kube.aio",
        "airflow_k8s_retry.kube.pods",
        "airflow_k8s_retry.connection",
        "airflow_k8s_retry.classification",
        "kubernetes.client",
        "kubernetes.stream",
        "kubernetes_asyncio.client",
        "asgiref.sync",
        "aiohttp",
    ):
        importlib.import_module(module)


class _Jitter:
    """The ``random`` the watch hub's feeds draw their jitter and watch timeouts from, seeded per run
    (``reseed``) so a seed draws the same ones on every replay."""

    def __init__(self) -> None:
        self._rng = random.Random(0)

    def reseed(self, seed: str) -> None:
        self._rng.seed(seed)

    def Random(self, seed: Any = None) -> random.Random:  # stands in for random.Random
        return random.Random(self._rng.random() if seed is None else seed)

    def randint(self, low: int, high: int) -> int:
        return self._rng.randint(low, high)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rng, name)


JITTER = _Jitter()


@contextlib.contextmanager
def _pace(clock: SimClock, scale: float) -> Any:
    """Run the trigger, the worker's backoff, the listener's pauses and the watch hub on the run's
    simulated clock.

    These are the package's documented injection points (``PodStateTrigger.clock``,
    ``RetryingPodOperator.retry_sleep``, and the ``HubSettings`` every watch hub made meanwhile
    takes: each triggerer's loop makes its own, its waits on ``HubSettings.clock``). The hub's
    timings stay what the runs were tuned at: its backoff and confirming delay 20 times the shipped
    ones at ``scale``, its other delays the shipped real seconds read at ``scale``.
    """
    import dataclasses

    from airflow_k8s_retry.kube import feeds
    from airflow_k8s_retry.kube.watch_settings import HubSettings, use_settings
    from airflow_k8s_retry.operators import RetryingPodOperator
    from airflow_k8s_retry.triggers import PodStateTrigger

    saved_clock = PodStateTrigger.__dict__.get("clock")
    PodStateTrigger.clock = clock
    # The model answers the task-state lookup in real time (a thread hop), as Airflow's supervisor
    # does: its bound is 25 real seconds, not 25 simulated ones (25 ms).
    saved_lookup_timeout = PodStateTrigger.__dict__["state_lookup_timeout"]
    PodStateTrigger.state_lookup_timeout = saved_lookup_timeout / scale
    # The worker's backoff between API retries: a second is a simulated second, as the cluster's.
    saved_sleep = RetryingPodOperator.__dict__["retry_sleep"]
    RetryingPodOperator.retry_sleep = staticmethod(clock.sleep)
    # The worker's client (urllib3) waits out a 429's Retry-After (1 s): a simulated second too.
    from urllib3.util.retry import Retry

    saved_sleep_for_retry = Retry.sleep_for_retry

    def sleep_for_retry(self: Retry, response: Any) -> bool:
        retry_after = self.get_retry_after(response)
        if retry_after:
            clock.sleep(retry_after)
            return True
        return False

    Retry.sleep_for_retry = sleep_for_retry  # type: ignore[method-assign]
    names = vars(feeds)  # the module's own ``random``, not an exported name
    saved_random = names["random"]
    names["random"] = JITTER
    shipped = HubSettings.from_env()
    paced = dataclasses.replace(
        shipped,
        backoff_base=shipped.backoff_base * 20,
        backoff_cap=shipped.backoff_cap * 20,
        confirm_delay=shipped.confirm_delay * 20,
        reconnect_interval=shipped.reconnect_interval / scale,
        rbac_recheck=shipped.rbac_recheck / scale,
        clock=clock,
    )
    try:
        with use_settings(paced):
            yield
    finally:
        PodStateTrigger.clock = saved_clock
        PodStateTrigger.state_lookup_timeout = saved_lookup_timeout
        RetryingPodOperator.retry_sleep = saved_sleep
        Retry.sleep_for_retry = saved_sleep_for_retry  # type: ignore[method-assign]
        names["random"] = saved_random


# -- one run ---------------------------------------------------------------------------------------


class ChaosRun:
    def __init__(self, env: Environment, plan: Plan) -> None:
        self.env = env
        self.plan = plan
        self.cluster = env.cluster
        self.clock = env.clock
        seed = plan.seed
        env.executions += 1
        self.namespace = f"chaos-{seed}-{env.executions}"
        self.image = f"chaos.example/s{seed}/app:1"
        self.dag_id = "chaos"
        self.task_id = f"task{seed}"
        self.run_id = f"manual__chaos-{seed}"
        self.events: queue.Queue[tuple[str, int, Any]] = queue.Queue()
        self.triggerers: list[Triggerer] = []
        self.notes: list[str] = []
        self.verdicts: list[tuple[int, str, str, str]] = []  # (try, pod uid, outcome, reason)
        self.verdict_at: dict[str, float] = {}  # pod uid -> when its verdict was accepted (wall clock)
        self.deferred_uids: dict[str, int] = {}  # pod uid -> try that deferred on it
        self.interrupted_tries: set[int] = set()
        self.killed_by_user = False
        self.tries_run = 0
        self.try_ended: dict[int, float] = {}
        #: When a try's worker stopped acting on it (the audit log's clock): the user killed the try
        #: or the worker died; from then on Airflow's own cleanup (the api-server's listener, the
        #: failure callback) may delete the pod.
        self.worker_done_at: dict[int, float] = {}
        self.last_error: str = ""  # how the last try that raised ended (type: message)
        self.hang = False
        self._trigger_ids = 0
        self._pending_faults = sorted(plan.faults, key=lambda f: f.after)
        self._disrupted: set[str] = set()
        self._disrupt_at: dict[str, float] = {}
        self._disrupted_pods: set[str] = set()
        self._handed_over = False
        self._waiting_killed = False
        self._thaw_on_verdict: list[threading.Event] = []
        self.api_server = ApiServer(env.states, env.clock)

    # -- the task's pieces, as Airflow builds them ------------------------------------------------

    def make_operator(self) -> Any:
        from airflow_k8s_retry.operators import RetryingPodOperator

        kwargs: dict[str, Any] = dict(self.plan.fate.operator)
        timeout = kwargs.pop("execution_timeout", None)
        if kwargs.get("env_vars"):
            from kubernetes.client import models as k

            kwargs["env_vars"] = [
                k.V1EnvVar(
                    name=e["name"],
                    value_from=k.V1EnvVarSource(
                        secret_key_ref=k.V1SecretKeySelector(
                            name=e["valueFrom"]["secretKeyRef"]["name"],
                            key=e["valueFrom"]["secretKeyRef"]["key"],
                        )
                    ),
                )
                for e in kwargs["env_vars"]
            ]
        if kwargs.get("volumes"):
            from kubernetes.client import models as k

            kwargs["volumes"] = [
                k.V1Volume(
                    name=v["name"], secret=k.V1SecretVolumeSource(secret_name=v["secret"]["secretName"])
                )
                for v in kwargs["volumes"]
            ]
            kwargs["volume_mounts"] = [
                k.V1VolumeMount(name=m["name"], mount_path=m["mountPath"]) for m in kwargs["volume_mounts"]
            ]
        if self.plan.on_finish_action == "delete_succeeded_pod":
            kwargs["on_finish_action"] = "delete_succeeded_pod"
        elif self.plan.on_finish_action == "keep_pod":
            kwargs["on_finish_action"] = "keep_pod"
        return RetryingPodOperator(
            task_id=self.task_id,
            image=self.image,
            namespace=self.namespace,
            kubernetes_conn_id=None,
            retries=self.plan.retries,
            retry_delay=timedelta(seconds=0),
            execution_timeout=timedelta(seconds=timeout) if timeout else None,
            do_xcom_push=self.plan.do_xcom_push,
            get_logs=True,
            poll_interval=10.0,
            **kwargs,
        )

    def execution_timeout(self) -> float | None:
        value = self.plan.fate.operator.get("execution_timeout")
        return float(value) if value else None

    # -- driving ---------------------------------------------------------------------------------

    def on_event(self, triggerer: str, trigger_id: int, payload: Any) -> None:
        self.events.put((triggerer, trigger_id, payload))

    def triggerer(self, name: str) -> Triggerer:
        t = Triggerer(
            name,
            self.on_event,
            self.clock,
            start_delay=self.env.sim(self.env.triggerer_start_delay),
            on_kill_limit=self.env.sim(ON_KILL_TIMEOUT),
        )
        self.triggerers.append(t)
        return t

    def execute(self) -> Result:
        plan = self.plan
        # What the package and the simulator draw (watch jitter and timeouts, generated names).
        JITTER.reseed(f"{plan.seed}/jitter")
        drawn_before = random.getstate()
        random.seed(f"{plan.seed}/global")
        self.cluster.clear_faults()
        self.cluster.add_namespace(self.namespace)
        self.cluster.set_image(self.image, plan.fate.image)
        started_real = time.monotonic()
        lags_before = len(self.cluster.timer_lag())
        self.started = self.clock.now()
        # Generous: a task that never ends exceeds any bound, one slowed by faults should not.
        per_try = 3 * plan.fate.bound + (self.execution_timeout() or 0) + 1500
        self.bound = self.started + (plan.retries + 1) * per_try
        # A trigger gets at least ``per_try`` from its first turn whatever the worker spent before
        # it: a worker slowed by its backoff (or a busy triggerer's start) would otherwise use up
        # the task's bound before its trigger ran.
        self.per_try = per_try
        self.dag_run = DagRun(self.dag_id, self.run_id, now_as_datetime(self.started))
        state: str | None = None
        try_number = 0
        active = [self.triggerer("A"), self.triggerer("B")]
        try:
            while True:
                try_number += 1
                state = self.run_try(try_number, active)
                self.tries_run = try_number
                self.try_ended[try_number] = time.time()  # the audit log's clock
                if state != "up_for_retry":
                    break
            if state not in TERMINAL:
                self.notes.append(f"ended in {state}")
            self.settle()
        finally:
            for thaw in self._thaw_on_verdict:
                thaw.set()
            audit = [r for r in self.cluster.audit_records() if r.get("namespace") == self.namespace]
            pods = [p for p in self.cluster.all_pods() if p["metadata"].get("namespace") == self.namespace]
            self.cluster.clear_faults()
            for t in self.triggerers:
                t.close()
            # The run's triggerer processes are gone: their watches end with them.
            self.cluster.drop_watches(reset=True)
            random.setstate(drawn_before)
        result = Result(
            seed=plan.seed,
            plan=plan.describe(),
            state=state,
            tries=try_number,
            real_seconds=time.monotonic() - started_real,
            sim_seconds=self.clock.now() - self.started,
            notes=self.notes,
        )
        lags = self.cluster.timer_lag()[lags_before:]
        result.max_lag = max(lags, default=0.0)  # simulated seconds on the manual clock
        if result.max_lag > 200:
            self.notes.append(f"the simulator ran up to {result.max_lag:.0f} sim s late (a loaded machine)")
        missed = [str(t) for t in range(1, try_number + 1) if str(t) not in self._disrupted]
        if plan.fate.disruption is not None and missed:
            # The harness disrupts a pod from its own loop; a loop that ran late let the pod finish.
            self.notes.append(f"the drawn disruption never reached try {', '.join(missed)}'s pod")
        result.verdicts = [f"try {t} pod {u[:8]}: {o} {r}" for t, u, o, r in self.verdicts]
        result.faults_hit = Counter(
            f"{r['fault']} {r['verb']}" for r in audit if r.get("kind") == "request" and "fault" in r
        )
        result.violations = check(self, state, audit, pods)
        return result

    def new_ti(self, try_number: int) -> TaskInstance:
        return TaskInstance(
            dag_id=self.dag_id,
            task_id=self.task_id,
            run_id=self.run_id,
            try_number=try_number,
            max_tries=self.plan.retries,
            start_date=now_as_datetime(self.clock.now()),
        )

    def run_try(self, try_number: int, triggerers: list[Triggerer]) -> str:
        """One try from the worker's start to the state Airflow gives it."""
        plan = self.plan
        ti = self.new_ti(try_number)
        if plan.xcom_fault and plan.xcom_fault[0] == try_number:
            ti.xcom_fails_at = plan.xcom_fault[1]
        self.env.states.set(ti, "running")
        crash = plan.crash[1] if plan.crash and plan.crash[0] == try_number else None
        worker: Worker | None = None
        op: Any = None

        call: tuple[str, Any] = ("execute", None)

        def user_kill() -> None:
            # The api-server sets the state and calls the listeners with the running task instance
            # (its event in next_kwargs when it runs its resumed method).
            self.env.states.set(ti, "failed")
            self.killed_by_user = True
            self.worker_done_at.setdefault(try_number, time.time())
            next_method, next_kwargs = call[1] if call[0] == "resume" else (None, None)
            self.api_server.mark_failed_waiting(ti, next_method, next_kwargs, self.namespace)

        def on_kill() -> None:
            op.on_kill()

        def fresh_worker() -> Worker:
            nonlocal worker
            worker = Worker(crash, on_kill, user_kill) if worker is None else worker
            ti.boundary = worker.boundary
            return worker

        while True:
            self.advance()
            op = self.make_operator()  # every worker start parses the DAG again
            context = context_for(ti, self.dag_run, op)
            w = fresh_worker()
            outcome, value = self.call_worker(w, op, context, call)
            if outcome == "died":
                self.interrupted_tries.add(try_number)
                self.worker_done_at.setdefault(try_number, time.time())
                self.notes.append(f"try {try_number}: worker died {value}")
                if self.killed_by_user:
                    return "failed"
                # The scheduler finds the try without a heartbeat and fails it (retry if eligible).
                state = state_after(RuntimeError("task instance heartbeat timeout"), ti, plan.retries)
                self.env.states.set(ti, state)
                if state == "failed":
                    # ... and sends a TaskCallbackRequest: the DAG processor parses the DAG again and
                    # runs the task's on_failure_callback, outside the dead worker.
                    parsed = self.make_operator()
                    self.failure_callbacks(parsed, context_for(ti, self.dag_run, parsed), "dag processor")
                return state
            if outcome == "deferred":
                deferral: Deferral = value
                uid = deferral.trigger_kwargs.get("pod_uid")
                if isinstance(uid, str):
                    self.deferred_uids[uid] = try_number
                self.env.states.set(ti, "deferred")
                resumed = self.wait_deferred(ti, deferral, triggerers)
                if resumed is None:  # killed by the user while deferred
                    self.interrupted_tries.add(try_number)
                    return "failed"
                self.env.states.set(ti, "scheduled")
                if self.killed_while_waiting(ti, resumed):
                    self.interrupted_tries.add(try_number)
                    return "failed"
                self.env.states.set(ti, "queued")
                self.env.states.set(ti, "running")
                call = ("resume", resumed)
                continue
            error = value if outcome == "raised" else None
            if error is not None:
                self.notes.append(f"try {try_number}: {type(error).__name__}: {str(error)[:160]}")
                self.last_error = f"{type(error).__name__}: {error}"
            state = state_after(error, ti, plan.retries)
            if self.killed_by_user:
                # The code ended within the 5 s after SIGTERM: the task runner computes its state
                # and runs its callbacks, but the task instance stays as the user set it.
                self.interrupted_tries.add(try_number)
                self.notes.append(f"try {try_number}: the task's code ended after the kill ({outcome})")
            else:
                self.env.states.set(ti, state)
            if state == "failed":  # the task runner's finalize, in the same worker
                with w.running():
                    self.failure_callbacks(op, context, "worker")
            return "failed" if self.killed_by_user else state

    def killed_while_waiting(self, ti: TaskInstance, resumed: tuple[str, dict[str, Any]]) -> bool:
        """The task waits ``scheduled``/``queued`` for a worker after its trigger fired (a drawn 0-30
        simulated seconds: pools, ``parallelism``, the scheduler's loop) while the pod may still
        run; a drawn user's kill lands there (the first time only). True when it did."""
        rng = random.Random(f"{self.plan.seed}/waiting/{ti.try_number}/{len(self.verdicts)}")
        wait = rng.uniform(0, 30)
        kill_at = wait * rng.random() if self.plan.waiting_kill and not self._waiting_killed else None
        start = self.clock.now()
        while True:
            self.advance()
            if kill_at is not None and self.clock.now() >= start + kill_at:
                self._waiting_killed = self.killed_by_user = True
                self.env.states.set(ti, "failed")
                self.api_server.mark_failed_waiting(ti, *resumed, self.namespace)
                self.notes.append(f"try {ti.try_number}: user mark_failed while it waited for a worker")
                return True
            if self.clock.now() >= start + wait:
                return False
            self.turn(start + (kill_at if kill_at is not None else wait))

    def failure_callbacks(self, op: Any, context: dict[str, Any], where: str) -> None:
        """Run ``on_failure_callback`` as Airflow does: each one, an exception logged, not raised."""
        for callback in op.on_failure_callback:
            try:
                callback(context)
            except WorkerDied as died:
                self.notes.append(f"worker died in on_failure_callback ({died})")
                return
            except Exception as exc:
                self.notes.append(f"on_failure_callback in the {where} raised {type(exc).__name__}: {exc}")

    def call_worker(
        self, worker: Worker, op: Any, context: dict[str, Any], call: tuple[str, Any]
    ) -> tuple[str, Any]:
        from airflow.sdk.bases.operator import ExecutorSafeguard

        from airflow_k8s_retry.compat import AirflowTaskTimeout, TaskDeferred

        kind, resumed = call
        ctx = contextvars.copy_context()  # as the task runner: the executor safeguard sees its task
        ctx.run(ExecutorSafeguard.tracker.set, op)
        with worker.running():
            try:
                if kind == "execute":
                    value = ctx.run(op.execute, context)
                else:
                    next_method, next_kwargs = resumed
                    value = ctx.run(op.resume_execution, next_method, next_kwargs, context)
            except TaskDeferred as deferred:
                try:
                    worker.boundary("defer")  # the task runner hands the deferral to the supervisor
                except WorkerDied as died:
                    return "died", str(died)
                return "deferred", Deferral.record(deferred)
            except WorkerDied as died:
                return "died", str(died)
            except AirflowTaskTimeout as timeout:
                # _run_execute_callable: on_kill in the same process, then the try fails.
                try:
                    worker.run_on_kill(op.on_kill)
                except WorkerDied as died:
                    return "died", str(died)
                except Exception as exc:
                    self.notes.append(f"on_kill after the alarm raised {type(exc).__name__}: {exc}")
                return "raised", timeout
            except Exception as exc:
                return "raised", exc
            return "returned", value

    def wait_deferred(self, ti: TaskInstance, deferral: Deferral, triggerers: list[Triggerer]) -> Any:
        """Run the deferral through the triggerers until the worker may resume; None when killed."""
        plan = self.plan
        self._trigger_ids += 1
        tid = self._trigger_ids
        holder = next(t for t in triggerers if t.alive)
        holder.run(tid, deferral.classpath, deferral.trigger_kwargs)
        running_on = [holder]
        deferred_at = self.clock.now()
        timeout_at = deferred_at + deferral.timeout.total_seconds() if deferral.timeout is not None else None
        handover = None if self._handed_over else plan.triggerer
        user_kill = plan.user_kill
        # The user's action and the hand-over are timed from the trigger's first turn on a
        # triggerer, not from the deferral: a real triggerer takes a new trigger within about a
        # second, while here a busy triggerer (``triggerer_start_delay``) can delay that turn by
        # hundreds of simulated seconds. (A trigger cancelled before its first turn gets no on_kill
        # from Airflow; docs/reliability.md lists that as a limit.)
        # Before that turn, the trigger has ``per_try`` from the deferral to start, whatever the
        # earlier tries spent of the task's bound.
        started_at: float | None = None
        never_started = False
        while True:
            self.advance()
            now = self.clock.now()
            if started_at is None:
                if not any(t.started(tid) for t in running_on):
                    if now < deferred_at + self.per_try:
                        self.turn(deferred_at + self.per_try)
                        continue
                    never_started = True  # the check below ends the run
                started_at = now
            if handover is not None and now >= started_at + handover[1]:
                kind = handover[0]
                handover = None
                self._handed_over = True
                other = next((t for t in triggerers if t is not holder and t.alive), None)
                if other is None:
                    other = self.triggerer("C")
                    triggerers.append(other)
                if kind == "restart":
                    holder.shutdown()
                elif kind == "kill9":
                    holder.kill9()
                else:  # stale: the holder stalls, the other adopts; the holder thaws later
                    stall = random.Random(plan.seed + 1).uniform(30, 300)
                    # Half of them thaw the moment the other's verdict is accepted: the stale copy is
                    # cancelled (on_kill) while the worker acts on that verdict (review #5's window).
                    if random.Random(f"{plan.seed}/thaw").random() < 0.5:
                        thaw = threading.Event()
                        self._thaw_on_verdict.append(thaw)
                        holder.stall(max(stall, self.env.sim(2.0)), tid, thaw=thaw)
                    else:
                        holder.stall(stall, tid)
                other.run(tid, deferral.classpath, deferral.trigger_kwargs)
                self.notes.append(f"trigger {tid}: {kind} of triggerer {holder.name}, now on {other.name}")
                running_on = [other] if kind != "stale" else [holder, other]
                holder = other
            if user_kill is not None and now >= started_at + user_kill[1]:
                kind = user_kill[0]
                self.killed_by_user = True
                if kind == "delete_run":
                    self.env.states.delete_run(self.dag_id, self.run_id)
                else:
                    self.env.states.set(ti, "failed")
                    self.api_server.mark_failed(ti, tid, deferral.classpath, deferral.trigger_kwargs)
                alive = [t for t in running_on if t.alive]
                unstarted = [t.name for t in alive if not t.started(tid)]
                for t in alive:
                    t.cancel(tid, user_action=True)
                self.notes.append(f"trigger {tid}: user {kind} while deferred")
                if alive and len(unstarted) == len(alive):
                    self.notes.append(
                        f"trigger {tid}: the kill came before its first turn on triggerer "
                        f"{', '.join(unstarted)} (Airflow runs no on_kill then)"
                    )
                for t in running_on:
                    if t.alive:
                        t.idle(within=self.env.sim(35.0))
                return None
            if timeout_at is not None and now >= timeout_at:
                for t in running_on:
                    if t.alive:
                        t.cancel(tid, user_action=False)  # timeout: no on_kill
                self.notes.append(f"trigger {tid}: deferral timed out")
                return Deferral.timed_out()
            if never_started or (now >= self.bound and now - started_at >= self.per_try):
                self.hang = True
                self.env.states.set(ti, "failed")  # the user gives up on it
                self.api_server.mark_failed(ti, tid, deferral.classpath, deferral.trigger_kwargs)
                for t in running_on:
                    if t.alive:
                        t.cancel(tid, user_action=True)
                self.notes.append(
                    f"trigger {tid}: no verdict within the task's bound"
                    + (" (it never started)" if never_started else "")
                )
                self.killed_by_user = True
                return None
            try:
                source, fired_id, payload = self.events.get_nowait()
            except queue.Empty:
                due = [max(self.bound, started_at + self.per_try)]
                due += [started_at + e[1] for e in (handover, user_kill) if e is not None]
                due += [timeout_at] if timeout_at is not None else []
                self.turn(min(due))
                continue
            if fired_id != tid or ti.state != "deferred":
                self.notes.append(f"trigger {fired_id} on {source}: event dropped (task {ti.state})")
                continue
            # Trigger.submit_event: the task leaves deferred; other copies of the trigger are cancelled.
            for t in running_on:
                if t.name != source and t.alive:
                    t.cancel(tid, user_action=True)
            while self._thaw_on_verdict:
                self._thaw_on_verdict.pop().set()
            if isinstance(payload, TriggerFailed):
                return payload.resumed()
            verdict = payload.get("verdict") or {}
            self.verdict_at.setdefault(str(payload.get("pod_uid")), time.time())  # the audit log's clock
            self.verdicts.append(
                (
                    ti.try_number,
                    str(payload.get("pod_uid")),
                    str(verdict.get("outcome")),
                    str(verdict.get("reason")),
                )
            )
            return deferral.resumed_with(payload)

    def advance(self) -> None:
        """Start the faults and disruptions that are due."""
        now = self.clock.now() - self.started
        while self._pending_faults and self._pending_faults[0].after <= now:
            f = self._pending_faults.pop(0)
            self.cluster.add_fault(
                verb=f.verb, resource=f.resource, status=f.status, times=f.times, delay_seconds=f.delay
            )
        disruption = self.plan.fate.disruption
        if disruption is None:
            return
        kind, after = disruption
        for pod in self.cluster.pods(self.namespace):
            meta = pod["metadata"]
            labels = meta.get("labels") or {}
            try_number = labels.get("try_number", "")
            if try_number in self._disrupted or meta.get("deletionTimestamp"):
                continue
            running = any(
                "running" in (c.get("state") or {})
                for c in pod.get("status", {}).get("containerStatuses") or []
            )
            if not running:
                continue
            due = self._disrupt_at.setdefault(meta["name"], self.clock.now() + after)
            if self.clock.now() >= due:
                self._disrupted.add(try_number)
                self._disrupted_pods.add(meta["name"])
                with contextlib.suppress(KeyError):
                    self.cluster.disrupt(meta["name"], kind, self.namespace)

    def turn(self, deadline: float) -> None:
        """One turn of the run's clock, up to ``deadline`` or the next fault or disruption due."""
        self.clock.turn(min(deadline, self.next_due()))

    def next_due(self) -> float:
        """When :meth:`advance` next has something to start."""
        due = [self.started + f.after for f in self._pending_faults[:1]]
        due += [at for name, at in self._disrupt_at.items() if name not in self._disrupted_pods]
        return min((at for at in due if at > self.clock.now()), default=float("inf"))

    def settle(self) -> None:
        """Let on_kill work, deletions and grace periods finish before the pods are judged."""
        for t in self.triggerers:
            if t.alive:
                t.idle(within=self.env.sim(5.0))
        self.api_server.idle(within=self.env.sim(5.0))

        def quiet() -> bool:
            return all(not p["metadata"].get("deletionTimestamp") for p in self.cluster.pods(self.namespace))

        self.clock.wait_for(quiet, self.env.sim(2.0))


# -- invariants ------------------------------------------------------------------------------------


def _intervals(audit: list[dict[str, Any]]) -> dict[str, tuple[float, float, dict[str, str]]]:
    """Per pod UID: when a main container first ran and when it stopped (or +inf)."""
    out: dict[str, list[Any]] = {}
    labels: dict[str, dict[str, str]] = {}
    for r in audit:
        if r.get("kind") != "lifecycle":
            continue
        uid = r.get("uid")
        change = str(r.get("change", ""))
        if change == "created":
            labels[uid] = dict(r.get("labels") or {})
        if change.startswith("running:") and not change.endswith("airflow-xcom-sidecar"):
            out.setdefault(uid, [r["t"], float("inf")])
        elif (
            uid in out
            and out[uid][1] == float("inf")
            and (change.startswith("terminated:") or change in ("deleted", "phase:Succeeded", "phase:Failed"))
        ):
            out[uid][1] = r["t"]
    return {uid: (a, b, labels.get(uid, {})) for uid, (a, b) in out.items()}


def _sim_span(run: ChaosRun, start: float, end: float) -> float:
    """Simulated seconds between two times of the audit log (its wall clock)."""
    if end == float("inf"):
        return end
    return run.clock.sim_at(end) - run.clock.sim_at(start)


def check(
    run: ChaosRun, state: str | None, audit: list[dict[str, Any]], pods: list[dict[str, Any]]
) -> list[Violation]:
    plan = run.plan
    found: list[Violation] = []

    # 1. At most one running pod per try, never two of one task at once.
    spans = sorted(_intervals(audit).items(), key=lambda kv: kv[1][0])
    for i, (uid_a, (_, end_a, labels_a)) in enumerate(spans):
        for uid_b, (start_b, end_b, labels_b) in spans[i + 1 :]:
            if start_b < end_a:
                same_try = labels_a.get("try_number") == labels_b.get("try_number")
                found.append(
                    Violation(
                        "two_pods_running" if not same_try else "two_pods_running_in_one_try",
                        f"pod {uid_a[:8]} (try {labels_a.get('try_number')}) and {uid_b[:8]} "
                        f"(try {labels_b.get('try_number')}) ran at once for "
                        f"{_sim_span(run, start_b, min(end_a, end_b)):.0f} sim s",
                    )
                )

    # One pod per try and relaunch: a second create that landed is a duplicate.
    created: Counter[tuple[str, str]] = Counter()
    for p in pods:
        lab = p["metadata"].get("labels") or {}
        created[(lab.get("try_number", "?"), lab.get("airflow-k8s-retry.io/relaunch", "0"))] += 1
    for (try_number, relaunch), count in created.items():
        if count > 1:
            found.append(
                Violation("duplicate_pod", f"{count} pods created for try {try_number} relaunch {relaunch}")
            )

    # 2. Every pod deleted unless kept on purpose, and then stamped.
    for p in pods:
        if p.get("deleted") or p["metadata"].get("deletionTimestamp"):
            continue
        meta = p["metadata"]
        stamp = (meta.get("annotations") or {}).get(VERDICT_ANNOTATION)
        outcome = json.loads(stamp).get("outcome") if stamp else None
        keep = plan.on_finish_action == "keep_pod" or (
            plan.on_finish_action == "delete_succeeded_pod" and outcome not in (None, "succeed", "relaunch")
        )
        phase = (p.get("status") or {}).get("phase")
        if stamp and keep and outcome != "relaunch":
            continue
        found.append(
            Violation(
                "leaked_pod",
                f"pod {meta['name']} (uid {meta['uid'][:8]}, {phase}) left behind"
                + (f", stamped {outcome}" if stamp else ", not stamped"),
            )
        )

    # 3. Exactly one verdict per pod.
    per_pod = Counter(uid for _, uid, _, _ in run.verdicts)
    for uid, count in per_pod.items():
        if count > 1:
            found.append(Violation("two_verdicts", f"pod {uid[:8]} got {count} verdicts"))
    for uid, try_number in run.deferred_uids.items():
        if per_pod[uid] == 0 and try_number not in run.interrupted_tries and not run.hang:
            found.append(Violation("no_verdict", f"pod {uid[:8]} of try {try_number} was never judged"))
    by_uid = {p["metadata"]["uid"]: p for p in pods}
    for _, uid, _, reason in run.verdicts:
        stamp = ((by_uid.get(uid) or {}).get("metadata", {}).get("annotations") or {}).get(VERDICT_ANNOTATION)
        if stamp and json.loads(stamp).get("reason") != reason:
            found.append(
                Violation(
                    "conflicting_verdicts",
                    f"pod {uid[:8]}: stamped {json.loads(stamp).get('reason')}, acted on {reason}",
                )
            )

    # 3b. Once a verdict fired, the pod is the worker's (review #5): no triggerer deletes it, not even
    # a stale one cancelling its copy of the trigger after another triggerer fired.
    found += _deleted_under_the_worker(run, audit, pods)

    # 4. Every task ends within its bound, and spends its retries before it fails.
    found += _retries_skipped(run, state, run.tries_run)
    if run.hang:
        found.append(
            Violation(
                "hang",
                f"no verdict within {run.bound - run.started:.0f} sim s of the task's start "
                f"nor {run.per_try:.0f} sim s of its trigger's first turn",
            )
        )
    elif state not in TERMINAL:
        found.append(Violation("not_terminal", f"the task ended in {state}"))

    # 5. The verdict matches the scripted fate.
    allowed = set(plan.fate.reasons)
    if run.execution_timeout() is not None:
        allowed.add(fates.TIMEOUT)
    if plan.fate.kind == "missing_volume" and " events at " in plan.describe():
        allowed.add("startup.timeout")  # without the Events feed, a FailedMount is only a slow start
    for try_number, uid, outcome, reason in run.verdicts:
        if reason not in allowed:
            found.append(
                Violation(
                    "wrong_verdict",
                    f"try {try_number} pod {uid[:8]}: {outcome} {reason}, "
                    f"fate {plan.fate.kind} allows {sorted(allowed)}",
                )
            )
    undisturbed = (
        not plan.faults
        and plan.crash is None
        and plan.user_kill is None
        and not plan.waiting_kill
        and not plan.xcom_fault
    )
    if undisturbed and not run.hang:
        expected = {"success": "success", "skipped": "skipped", "failed": "failed", "failed_now": "failed"}[
            plan.fate.terminal
        ]
        if state != expected:
            found.append(
                Violation("wrong_end", f"fate {plan.fate.kind} should end {expected}, ended {state}")
            )
        if plan.fate.terminal == "failed_now" and run_tries(run) > 1:
            found.append(Violation("wrong_end", "a permanent failure was retried"))
    return found


def _deleted_under_the_worker(
    run: ChaosRun, audit: list[dict[str, Any]], pods: list[dict[str, Any]]
) -> list[Violation]:
    requests = [r for r in audit if r.get("kind") == "request"]
    # Only workers create pods: any other client is a triggerer's.
    agents = {r.get("user_agent") for r in requests}
    agents -= {r.get("user_agent") for r in requests if r.get("verb") == "create"}
    name_of = {p["metadata"]["uid"]: p["metadata"]["name"] for p in pods}
    fired = {name_of[uid]: (t, reason) for t, uid, _, reason in run.verdicts if uid in name_of}
    # The firing trigger itself deletes a pod at its execution deadline, before its event leaves.
    fired_at = {name_of[uid]: run.verdict_at.get(uid, 0.0) for _, uid, _, _ in run.verdicts if uid in name_of}
    found = []
    for r in requests:
        if (
            r.get("verb") == "delete"
            and r.get("resource") == "pods"
            and r.get("status") == 200
            and r.get("user_agent") in agents
            and r.get("name") in fired
            and fired_at[r["name"]] <= r["t"] < run.try_ended.get(fired[r["name"]][0], float("inf"))
            # A delete after the user killed the try or its worker died is Airflow's cleanup (no
            # worker acts on the pod); on a loaded machine it can land before the try's end is noted.
            and r["t"] < run.worker_done_at.get(fired[r["name"]][0], float("inf"))
        ):
            try_number, reason = fired[r["name"]]
            found.append(
                Violation(
                    "deleted_under_the_worker",
                    f"a triggerer deleted pod {r['name']} after its verdict {reason} fired, while "
                    f"try {try_number} was still acting on it in the worker",
                )
            )
    return found


def _retries_skipped(run: ChaosRun, state: str | None, tries: int) -> list[Violation]:
    """Airflow owns retries (review #7): a failure that is not permanent costs one try, never the task."""
    plan = run.plan
    if state != "failed" or tries > plan.retries or run.killed_by_user or run.hang:
        return []
    if plan.fate.terminal == "failed_now" and any(r in run.last_error for r in plan.fate.reasons):
        return []  # the fate's permanent cause
    return [
        Violation(
            "retries_skipped",
            f"failed after try {tries} of {plan.retries + 1}, retries left: {run.last_error[:200]}",
        )
    ]


def run_tries(run: ChaosRun) -> int:
    return max([t for t, *_ in run.verdicts], default=1)


#: Runs one simulator serves before a fresh one replaces it. One: a run's result does not depend on
#: the runs before it (a shared simulator's leftover pods stream changes to the next run's
#: cluster-wide watches and add steps to its clock; seed 81 ended 24 simulated seconds earlier
#: after seeds 99-82 than alone). A fresh one also costs less than those leftovers' steps.
RUNS_PER_CLUSTER = 1


def run_seed(env: Environment, seed: int) -> Result:
    env.runs += 1
    if env.runs > RUNS_PER_CLUSTER:
        env.renew()
    return ChaosRun(env, draw_plan(seed)).execute()
