"""Pod fates: what the simulated cluster does to a task's pods, and which verdicts that allows.

Every scenario kind ``FakeCluster`` has is a fate: each image pull behaviour (with and without a
recovery), each run ending (exit 0, exit N, OOM, a skip exit code), missing Secrets (env and volume),
an unschedulable request, ``activeDeadlineSeconds``, each disruption kind, and a pod that outlives
``execution_timeout``. A fate names the verdict reasons the classifier may reach for it; the
invariant "the verdict matches the scripted fate" is checked against that set.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

#: Verdicts any fate may end in because of what the harness does around it.
TIMEOUT = "execution.timeout"


@dataclass
class Fate:
    """What happens to the pods of one task, and what the operator is told to do about it."""

    kind: str
    image: dict[str, Any]
    #: Verdict reasons the classifier may reach for the first pod of a try.
    reasons: frozenset[str]
    #: Extra operator arguments (resources, env, volumes, timeouts).
    operator: dict[str, Any] = field(default_factory=dict)
    #: ``(kind, after_seconds)`` disruption of the first pod of each try.
    disruption: tuple[str, float] | None = None
    #: Whether the task may end successful / skipped when nothing else interferes.
    terminal: str = "failed"  # success | skipped | failed (retries spent) | failed_now (permanent)
    #: Upper bound of simulated seconds one pod needs to reach its verdict.
    bound: float = 0.0


def _run(rng: random.Random, **extra: Any) -> dict[str, Any]:
    return {"duration_seconds": round(rng.uniform(5, 60), 1), **extra}


def draw(rng: random.Random, seed: int) -> Fate:
    """A random fate (each kind about equally likely)."""
    kind = rng.choice(KINDS)
    return FATES[kind](rng, seed)


def succeed(rng: random.Random, seed: int) -> Fate:
    return Fate(
        "succeed",
        {"run": _run(rng, exit_code=0)},
        frozenset({"pod.succeeded"}),
        terminal="success",
        bound=100,
    )


def exit_code(rng: random.Random, seed: int) -> Fate:
    return Fate(
        "exit_code",
        {"run": _run(rng, exit_code=rng.choice([1, 2, 3, 42]))},
        frozenset({"container.exit_code"}),
        bound=100,
    )


def skip(rng: random.Random, seed: int) -> Fate:
    return Fate(
        "skip",
        {"run": _run(rng, exit_code=99)},
        frozenset({"container.exit_code"}),
        operator={"skip_on_exit_code": 99},
        terminal="skipped",
        bound=100,
    )


def oom(rng: random.Random, seed: int) -> Fate:
    return Fate("oom", {"run": _run(rng, oom=True)}, frozenset({"container.oom"}), bound=100)


def not_found(rng: random.Random, seed: int) -> Fate:
    return Fate("pull_not_found", {"pull": "not_found"}, frozenset({"image.not_found"}), bound=400)


def unauthorized(rng: random.Random, seed: int) -> Fate:
    return Fate("pull_unauthorized", {"pull": "unauthorized"}, frozenset({"image.unauthorized"}), bound=450)


def rate_limited_recovers(rng: random.Random, seed: int) -> Fate:
    # The registry throttles for a while, then serves: the kubelet's back-off rides it out.
    return Fate(
        "pull_rate_limited_recovers",
        {"pull": "rate_limited", "for_seconds": round(rng.uniform(20, 200)), "run": _run(rng)},
        frozenset({"pod.succeeded"}),
        terminal="success",
        bound=700,
    )


def rate_limited(rng: random.Random, seed: int) -> Fate:
    return Fate("pull_rate_limited", {"pull": "rate_limited"}, frozenset({"image.rate_limited"}), bound=1300)


def invalid_name(rng: random.Random, seed: int) -> Fate:
    return Fate(
        "pull_invalid_name",
        {"pull": "invalid_name"},
        frozenset({"image.invalid_name"}),
        terminal="failed_now",
        bound=60,
    )


def missing_secret(rng: random.Random, seed: int) -> Fate:
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": f"absent-{seed}", "key": "token"}}}]
    return Fate(
        "missing_secret",
        {"run": _run(rng)},
        frozenset({"config.missing_secret"}),
        operator={"env_vars": env},
        bound=300,
    )


def missing_volume(rng: random.Random, seed: int) -> Fate:
    volumes = [{"name": "creds", "secret": {"secretName": f"absent-{seed}"}}]
    mounts = [{"name": "creds", "mountPath": "/creds"}]
    return Fate(
        "missing_volume",
        {"run": _run(rng)},
        frozenset({"volume.mount_failed"}),
        operator={"volumes": volumes, "volume_mounts": mounts},
        bound=600,
    )


def unschedulable(rng: random.Random, seed: int) -> Fate:
    return Fate(
        "unschedulable",
        {"run": _run(rng)},
        frozenset({"schedule.timeout"}),
        operator={"container_resources": {"requests": {"cpu": "4000"}}, "schedule_timeout_seconds": 120},
        bound=400,
    )


def deadline(rng: random.Random, seed: int) -> Fate:
    return Fate(
        "active_deadline",
        {"run": {"duration_seconds": 10_000}},
        frozenset({"pod.deadline_exceeded"}),
        operator={"active_deadline_seconds": rng.randint(15, 60)},
        bound=200,
    )


def _disrupted(kind: str, reasons: set[str]) -> Any:
    def make(rng: random.Random, seed: int) -> Fate:
        # The first pod of each try is disrupted while it runs; its relaunch succeeds. A deletion
        # is no disruption: it costs the try, and every try's first pod is deleted, so the task fails.
        return Fate(
            f"disruption_{kind}",
            {"run": {"duration_seconds": round(rng.uniform(60, 120))}},
            frozenset(reasons),
            disruption=(kind, round(rng.uniform(5, 40), 1)),
            terminal="failed" if kind == "delete" else "success",
            bound=900,
        )

    return make


def outlives_timeout(rng: random.Random, seed: int) -> Fate:
    return Fate(
        "execution_timeout",
        {"run": {"duration_seconds": 10_000}},
        frozenset({TIMEOUT}),
        operator={"execution_timeout": rng.randint(60, 240)},
        bound=500,
    )


FATES = {
    "succeed": succeed,
    "exit_code": exit_code,
    "skip": skip,
    "oom": oom,
    "pull_not_found": not_found,
    "pull_unauthorized": unauthorized,
    "pull_rate_limited_recovers": rate_limited_recovers,
    "pull_rate_limited": rate_limited,
    "pull_invalid_name": invalid_name,
    "missing_secret": missing_secret,
    "missing_volume": missing_volume,
    "unschedulable": unschedulable,
    "active_deadline": deadline,
    "disruption_evict": _disrupted("evict", {"node.disruption", "pod.succeeded"}),
    "disruption_preempt": _disrupted("preempt", {"node.disruption", "pod.succeeded"}),
    "disruption_node_lost": _disrupted("node_lost", {"node.lost", "node.disruption", "pod.succeeded"}),
    "disruption_delete": _disrupted("delete", {"pod.deleted_externally", "pod.succeeded"}),
    "execution_timeout": outlives_timeout,
}
KINDS = tuple(FATES)
