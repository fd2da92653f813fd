"""A soak's plan, drawn from its seed: each task's fate, the scenario the control plane plays for
it, and what the monkey does and when.

A fate here is one the real control plane can play (``tools.controlplane``):
the run endings (exit 0, exit N, OOM), image pulls (not found, a throttle that ends, an invalid
name), a missing Secret, an unschedulable request, a pod that outlives ``execution_timeout``, the
disruptions (an eviction through the Eviction API, a deletion by someone else, a preemption by the
real scheduler for a pod of a higher priority, the node lost by stopping its KWOK process), and a
user who marks the deferred task failed through the REST API. Each task has its own image and its
own pod-name prefix, so the scenario's image behaviours and disruptions hit exactly its pods. Only
the preempted fate's pods request CPU (the unschedulable fate's request fits no node), so a
preemption, which takes every pod requesting CPU from the victim's node, takes only pods of that
fate (of several of its tasks at once when their pods share that node).

The plan is JSON: the DAG file (``dags/soak.py``) builds the tasks from it, the soak (``run.py``)
starts the control plane from it and judges the end against it. One seed, one plan.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: Real seconds per simulated second on the control plane (pods' run times, throttles, disruptions).
TIME_SCALE = 0.2
DAG_ID = "soak"
#: Every task's ``execution_timeout`` (real seconds), except the fate that outlives a shorter one.
EXECUTION_TIMEOUT = 900
#: Fates and their weights: each about equally likely, a lost node rarer (it takes a third of the
#: cluster's running pods with it, not one task's).
WEIGHTS: dict[str, float] = {
    "succeed": 3,
    "exit_code": 1,
    "oom": 1,
    "pull_not_found": 1,
    "pull_rate_limited_recovers": 1,
    "pull_invalid_name": 1,
    "missing_secret": 1,
    "unschedulable": 1,
    "execution_timeout": 0.5,
    "disruption_evict": 1,
    "disruption_delete": 1,
    "disruption_preempt": 1,
    "disruption_node_lost": 0.25,
    "user_kill": 1,
}
#: The scenario's disruption kind of each disruption fate.
DISRUPTIONS = {
    "disruption_evict": "evict",
    "disruption_delete": "delete",
    "disruption_preempt": "preempt",
    "disruption_node_lost": "node_lost",
}
#: Fates whose cause fails the task at once, whatever its retries (the default classification).
PERMANENT = frozenset({"pull_invalid_name"})
#: Each ``api_KIND`` action's fault window on the proxy in front of kube-apiserver
#: (``tests/support/api_faults.py``): (seconds, share of the requests it answers wrongly).
API_WINDOWS: dict[str, tuple[float, float]] = {
    "http_5xx": (20, 0.3),
    "http_429": (20, 0.3),
    "reset": (20, 0.2),
    "lost_answer": (30, 0.5),  # of the writes only
    "slow": (30, 0.3),
    "watch_gone": (30, 0.5),  # of the watches only
    "watch_cut": (5, 1.0),  # every watch open when it starts, and any that streams in the 5 s
}
#: The monkey's actions and their weights. ``api`` opens a fault window of the next kind of a
#: seeded shuffle of :data:`API_WINDOWS`, so seven API actions bring every kind once.
ACTIONS: dict[str, float] = {
    "sigkill_triggerer": 2,
    "sigterm_triggerer": 1,
    "sigkill_scheduler": 1,
    "sigterm_scheduler": 1,
    "sigkill_worker": 1,
    "restart_kube_apiserver": 1,
    "api": 3.5,
}


@dataclass
class TaskPlan:
    task_id: str
    fate: str
    image: str
    retries: int
    #: RetryingPodOperator arguments beyond the common ones (JSON: the DAG file builds the objects).
    operator: dict[str, Any] = field(default_factory=dict)
    #: Seconds after the task first defers at which the user marks it failed (``user_kill``).
    kill_after: float | None = None

    @property
    def prefix(self) -> str:
        """The pod-name prefix the scenario's disruptions match: the operator's ``name`` (the DAG
        file gives it), then the try's digest."""
        return f"{self.task_id}-{self.fate.replace('_', '-')}-"


@dataclass
class Plan:
    seed: int
    tasks: list[TaskPlan]
    #: (seconds after the DAG run starts, action) for the monkey, in order.
    monkey: list[tuple[float, str]]

    @property
    def execution_timeout(self) -> float:
        return float(EXECUTION_TIMEOUT)

    def scenario(self) -> dict[str, Any]:
        """The control plane's scenario: every task's image behaviour and disruption."""
        images: dict[str, Any] = {}
        disruptions: list[dict[str, Any]] = []
        for task in self.tasks:
            images[task.image] = _image(task, random.Random(f"{self.seed}-{task.task_id}"))
            kind = DISRUPTIONS.get(task.fate)
            if kind is not None:
                disruptions.append(
                    {"pod_name_prefix": task.prefix, "after_seconds": 100, "kind": kind, "count": 1}
                )
        return {"time_scale": TIME_SCALE, "images": images, "disruptions": disruptions}

    def to_json(self) -> str:
        return json.dumps(
            {
                "seed": self.seed,
                "dag_id": DAG_ID,
                "execution_timeout": EXECUTION_TIMEOUT,
                "tasks": [asdict(t) for t in self.tasks],
                "monkey": self.monkey,
            }
        )

    @classmethod
    def load(cls, path: Path) -> Plan:
        data = json.loads(path.read_text())
        tasks = [TaskPlan(**t) for t in data["tasks"]]
        return cls(int(data["seed"]), tasks, [(float(t), str(a)) for t, a in data["monkey"]])


def _image(task: TaskPlan, rng: random.Random) -> dict[str, Any]:
    """What the control plane does with the task's image (simulated seconds)."""
    run = {"duration_seconds": round(rng.uniform(20, 150)), "log": "done"}
    match task.fate:
        case "exit_code":
            return {"run": {**run, "exit_code": rng.choice([1, 2, 3, 42])}}
        case "oom":
            return {"run": {**run, "oom": True}}
        case "pull_not_found":
            return {"pull": "not_found"}
        case "pull_invalid_name":
            return {"pull": "invalid_name"}
        case "pull_rate_limited_recovers":
            return {"pull": "rate_limited", "for_seconds": round(rng.uniform(20, 150)), "run": run}
        case "execution_timeout" | "user_kill":
            return {"run": {"duration_seconds": 100_000}}
        case "disruption_evict" | "disruption_delete" | "disruption_preempt" | "disruption_node_lost":
            # Runs past the disruption (100 s after creation) so the trigger watches it happen.
            return {"run": {**run, "duration_seconds": round(rng.uniform(150, 300))}}
        case _:
            return {"run": run}


def _operator(fate: str, task_id: str) -> dict[str, Any]:
    """The fate's own operator arguments (graces shortened so a soak ends in minutes)."""
    match fate:
        case "pull_not_found":
            return {"grace": {"image.not_found": 20}}
        case "pull_rate_limited_recovers":
            return {"grace": {"image.rate_limited": 240}}
        case "missing_secret":
            env = [{"name": "TOKEN", "secret": f"absent-{task_id}", "key": "token"}]
            return {"grace": {"config.missing_secret": 20}, "secret_env": env}
        case "unschedulable":
            return {"cpu_request": "4000", "schedule_timeout_seconds": 40}
        case "execution_timeout":
            return {"execution_timeout": 60}
        case "disruption_preempt":  # only a pod that requests CPU can be preempted for CPU
            return {"cpu_request": "100m"}
        case _:
            return {}


def draw(seed: int, tasks: int, *, monkey_every: float = 45.0, monkey_for: float | None = None) -> Plan:
    """The plan of a soak of ``tasks`` tasks: fates by :data:`WEIGHTS`, retries 0 to 2, and a monkey
    action about every ``monkey_every`` seconds for ``monkey_for`` seconds (by default as long as
    the soak is likely to take, about 3 s per task and 5 minutes)."""
    rng = random.Random(seed)
    fates, weights = zip(*WEIGHTS.items(), strict=True)
    plans: list[TaskPlan] = []
    for index in range(tasks):
        fate = rng.choices(fates, weights)[0]
        task_id = f"t{index:03d}"
        plans.append(
            TaskPlan(
                task_id=task_id,
                fate=fate,
                image=f"soak.example.com/{task_id}:1",
                retries=rng.randint(0, 2),
                operator=_operator(fate, task_id),
                kill_after=round(rng.uniform(5, 40), 1) if fate == "user_kill" else None,
            )
        )
    actions, action_weights = zip(*ACTIONS.items(), strict=True)
    span = monkey_for if monkey_for is not None else 300 + 3 * tasks
    monkey: list[tuple[float, str]] = []
    at = rng.uniform(0.5, 1.5) * monkey_every
    kinds: list[str] = []
    while at < span:
        action = rng.choices(actions, action_weights)[0]
        if action == "api":
            if not kinds:
                kinds = rng.sample(sorted(API_WINDOWS), len(API_WINDOWS))
            action = f"api_{kinds.pop()}"
        monkey.append((round(at, 1), action))
        at += rng.uniform(0.5, 1.5) * monkey_every
    return Plan(seed, plans, monkey)
