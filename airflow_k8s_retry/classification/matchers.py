"""The matchers of the rule table: each reads an ``Observation`` and returns the ``Fact`` it found.

A matcher only detects: it says *what* it saw (who, the cluster's own words, the container, the
exit code, the history key its grace timer runs under) and leaves the sentence a person reads to
``wording.describe``. Each matcher's docstring is the wording it matches; the docs table and
``explain --trace`` quote it. The groups below follow the order of the table in ``rules.py``; the
matchers of pods whose containers have not run to an end (they cannot start, they run, they are
not placed yet) continue in ``waiting.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from airflow_k8s_retry.classification import keys
from airflow_k8s_retry.classification.keys import SignalKey
from airflow_k8s_retry.classification.model import Evidence, Reason
from airflow_k8s_retry.classification.observation import (
    ContainerView,
    Observation,
    Termination,
)


class Sighting(StrEnum):
    """How a fact was seen; picks the sentence when several rules share a reason code."""

    GONE = "gone"  # the pod no longer exists
    GONE_AFTER = "gone_after"  # ... and the history explains why
    PHASE = "phase"  # the pod's phase says it
    CONDITION = "condition"  # a pod condition (DisruptionTarget, PodScheduled)
    STATUS = "status"  # the pod's status reason and message
    ADMISSION = "admission"  # the kubelet refused the pod at admission
    DELETING = "deleting"  # metadata.deletionTimestamp
    FINISHED = "finished"  # a container terminated and will not run again
    LOST = "lost"  # the kubelet lost track of a container
    HELPERS_LEFT = "helpers_left"  # the main containers are done, helpers still run
    BASE_DONE = "base_done"  # the base container is done; its sidecars do not decide
    NATIVE_SIDECARS = "native_sidecars"  # the main containers are done; native sidecars do not decide
    BEHIND = "behind"  # the kubelet's status is older than the pod's spec (observedGeneration)
    GATED = "gated"  # scheduling gates hold the pod back (spec.schedulingGates)
    EXEC_FORMAT = "exec_format"  # the runtime could not execute the entrypoint (exec format error)
    WAITING = "waiting"  # a container waits with this reason
    PULL = "pull"  # a pull error whose cause is known
    LOOP = "loop"  # CrashLoopBackOff
    EVENTS = "events"  # the pod's Events say it
    PENDING = "pending"  # pending, nothing known


@dataclass(frozen=True)
class Fact:
    """What a matcher found. ``key`` is the signal its grace timer and the history use."""

    sighting: Sighting
    key: SignalKey
    subject: str  # who: "pod ns/name", "container 'base'", "init container 'init'"
    detail: str = ""  # what the cluster said, in its own words
    evidence: tuple[Evidence, ...] = ()
    container: str | None = None
    exit_code: int | None = None
    #: Signals that extend the grace while fresh (cluster-autoscaler scale-ups).
    extension_keys: tuple[SignalKey, ...] = ()
    image: str = ""
    memory_limit: str = ""
    #: The current status text when the fact rests on an earlier, stronger sighting (decayed).
    current: str = ""
    #: A related Event: (its reason, its message), e.g. the latest cluster-autoscaler answer.
    related: tuple[str, str] | None = None
    #: The termination reason and message of a finished container (``Error``, ``OOMKilled``...).
    termination_reason: str = ""
    termination_message: str = ""


Matcher = Callable[[Observation], Fact | None]


# --- helpers -------------------------------------------------------------------------------------

#: Status reasons of the kubelet evicting or stopping a pod that ran (admission has its own rule).
DISRUPTION_STATUS_REASONS = frozenset({"Evicted", "Shutdown", "NodeShutdown", "Terminated", "Preempting"})
#: Status reasons of kubelet admission rejections other than a predicate or an ``OutOf<resource>``.
ADMISSION_STATUS_REASONS = frozenset(
    {"UnexpectedAdmissionError", "UnexpectedPredicateFailureType", "InvalidNodeInfo", "TopologyAffinityError"}
)
#: The status message of a kubelet admission rejection: "Pod was rejected: <why>" since 1.22, and
#: "Pod Predicate <X> failed" / "Pod Node didn't have enough resource: ..." before.
_ADMISSION_MESSAGE = re.compile(
    r"^Pod (?:was rejected: |Predicate \w+ failed|Node didn't have enough resource)", re.IGNORECASE
)
START_FAILURE_REASONS = frozenset({"StartError", "ContainerCannotRun"})
SIGNALS = {137: "SIGKILL", 143: "SIGTERM", 139: "SIGSEGV", 134: "SIGABRT"}
#: Containers that never exit by themselves and only serve the main containers: the cncf provider's
#: XCom sidecar (it waits to be told to stop after the result is read) and the istio proxy.
HELPER_CONTAINERS = frozenset({"airflow-xcom-sidecar", "istio-proxy"})
#: The runtime (runc, crun, a shell's ``exec``) saying the entrypoint is not a binary this node can
#: execute: "exec /app: exec format error" (runc 1.1+), "exec user process caused: exec format error"
#: (older runc), "exec container process `/app`: Exec format error" (crun). A program of the task
#: that fails to start another one says "fork/exec ..." and is not the image's entrypoint.
_EXEC_FORMAT = re.compile(r"(?<!fork/)\bexec\b[^\n]{0,300}?\bexec format error", re.IGNORECASE)
#: Kubelet eviction messages that blame the pod's own ephemeral-storage limits, not the node.
_OWN_STORAGE_LIMIT = re.compile(
    r"exceeds the total limit of containers|exceeded its local ephemeral storage limit"
    r"|usage of emptydir volume .* exceeds the limit",
    re.IGNORECASE,
)


def _finished(obs: Observation, container: ContainerView) -> Termination | None:
    """The container's termination when it will not be restarted: the pod failed, or neither its
    restart rules nor its restart policy (its own, else the pod's) restart it after this exit."""
    term = container.terminated
    if term is None:
        return None
    if obs.phase == "Failed":
        return term
    if container.sidecar or container.restarts_after(term.exit_code, obs.restart_policy):
        return None
    return term


def first_matching(obs: Observation, found: Callable[[ContainerView], bool]) -> ContainerView | None:
    """The first container that keeps the pod from its work (``Observation.blocks``) and matches."""
    return next((c for c in obs.containers if obs.blocks(c) and found(c)), None)


def _first_finished(
    obs: Observation, found: Callable[[ContainerView, Termination], bool]
) -> tuple[ContainerView, Termination] | None:
    """The first finished container matching ``found`` and its termination; sidecars last, as the
    kubelet kills them when the pod ends."""
    ordered = sorted(obs.containers, key=lambda c: c.sidecar)  # stable: init first within each group
    for container in ordered:
        if not obs.decides(container):
            continue  # a sidecar's ending never decides the task when the pod names its base container
        term = _finished(obs, container)
        if term is not None and found(container, term):
            return container, term
    return None


def cite(reason: Reason, container: ContainerView | None, detail: str, source: str = "status") -> Evidence:
    return Evidence(reason, source, detail, container.name if container else None)


def join(*parts: str) -> str:
    return ": ".join(p for p in parts if p)


def exit_detail(term: Termination) -> str:
    code = term.exit_code
    detail = f"exit code {code}" if code is not None else "no exit code"
    if code is not None and code in SIGNALS:
        detail += f" ({SIGNALS[code]})"
    if term.reason:
        detail += f", reason {term.reason}"
    return detail


# --- gone or finished ----------------------------------------------------------------------------


def _gone_after(reason: Reason, doc: str, *seen: SignalKey, events: frozenset[str] = frozenset()) -> Matcher:
    """Match a vanished pod whose history, or whose Events, show the cluster was taking it away.

    The Events count because a pod can vanish before anyone observed it disrupted (a triggerer
    hand-over, a watch that caught up late): the event outlives the pod.
    """

    def match(obs: Observation) -> Fact | None:
        if obs.exists:
            return None
        what = "marked it for disruption" if reason is Reason.NODE_DISRUPTION else "lost its node"
        if any(obs.history.since(k) is not None for k in seen):
            evidence = (cite(reason, None, "pod not found after " + what, "api"),)
            return Fact(Sighting.GONE_AFTER, keys.gone_after(reason), "the pod", what, evidence)
        told = obs.events_named(*events)
        if not told:
            return None
        event = told[-1]
        detail = f"pod not found after event {join(event.reason, event.message)}"
        evidence = (cite(reason, None, detail, "event"),)
        return Fact(
            Sighting.GONE_AFTER, keys.gone_after(reason), "the pod", f"{what} ({event.reason})", evidence
        )

    match.__name__ = f"gone_after_{reason.name.lower()}"
    match.__doc__ = doc
    return match


gone_after_disruption = _gone_after(
    Reason.NODE_DISRUPTION,
    "the pod no longer exists, and an earlier observation saw a disruption "
    "(`disruption_target`, `node_rejected`, `admission_rejected`) or its Events say it was "
    "`Preempted` (the scheduler) or `Evicted` (the kubelet)",
    keys.NODE_DISRUPTION,
    events=frozenset({"Preempted", "Evicted"}),
)
gone_after_node_lost = _gone_after(
    Reason.NODE_LOST,
    "the pod no longer exists, and an earlier observation saw its node lost "
    "(`node_lost`, `container_status_unknown`, `phase_unknown`) or its Events say its node was "
    "not ready (`NodeNotReady`, the node controller)",
    keys.NODE_LOST,
    keys.NODE_LOST_UNKNOWN_PHASE,
    events=frozenset({"NodeNotReady"}),
)


def pod_gone(obs: Observation) -> Fact | None:
    """the pod no longer exists (404, watch `DELETED`)"""
    if obs.exists:
        return None
    evidence = (cite(Reason.DELETED_EXTERNALLY, None, "pod not found", "api"),)
    return Fact(Sighting.GONE, keys.POD_GONE, "the pod", evidence=evidence)


def succeeded(obs: Observation) -> Fact | None:
    """phase `Succeeded`"""
    if obs.phase != "Succeeded":
        return None
    return Fact(Sighting.PHASE, keys.POD_SUCCEEDED, obs.title)


# --- infrastructure took the pod away or refused it ----------------------------------------------


def storage_limit(obs: Observation) -> Fact | None:
    """evicted for the pod's own ephemeral-storage limit ("exceeds the total limit of containers",
    "exceeded its local ephemeral storage limit", emptyDir over its limit)"""
    cond = obs.condition("DisruptionTarget")
    texts = [obs.message] if obs.reason == "Evicted" else []
    if cond is not None and cond.status == "True" and cond.reason == "TerminationByKubelet":
        texts.append(cond.message)
    detail = next((t for t in texts if _OWN_STORAGE_LIMIT.search(t)), None)
    if detail is None:
        return None
    evidence = (cite(Reason.CONTAINER_STORAGE_LIMIT, None, detail),)
    return Fact(Sighting.STATUS, keys.STORAGE_LIMIT, obs.title, detail, evidence)


def disruption_target(obs: Observation) -> Fact | None:
    """condition `DisruptionTarget=True` (`PreemptionByScheduler`, `EvictionByEvictionAPI`,
    `DeletionByTaintManager`, `DeletionByPodGC`, `TerminationByKubelet`)"""
    cond = obs.condition("DisruptionTarget")
    if cond is None or cond.status != "True":
        return None
    detail = join(cond.reason, cond.message)
    evidence = (cite(Reason.NODE_DISRUPTION, None, f"DisruptionTarget: {detail}"),)
    return Fact(Sighting.CONDITION, keys.NODE_DISRUPTION, obs.title, detail or "DisruptionTarget", evidence)


def node_lost(obs: Observation) -> Fact | None:
    """status reason `NodeLost`"""
    if obs.reason != "NodeLost":
        return None
    detail = join(obs.reason, obs.message)
    return Fact(Sighting.STATUS, keys.NODE_LOST, obs.title, detail, (cite(Reason.NODE_LOST, None, detail),))


def node_rejected(obs: Observation) -> Fact | None:
    """status reason `Evicted`, `Shutdown`, `NodeShutdown`, `Terminated`, `Preempting`"""
    if obs.reason not in DISRUPTION_STATUS_REASONS:
        return None
    detail = join(obs.reason, obs.message)
    evidence = (cite(Reason.NODE_DISRUPTION, None, detail),)
    return Fact(Sighting.STATUS, keys.NODE_DISRUPTION, obs.title, detail, evidence)


def admission_rejected(obs: Observation) -> Fact | None:
    """status message `Pod was rejected: ...` (kubelet 1.22+) or `Pod Predicate <X> failed` /
    `Pod Node didn't have enough resource: ...` (older), for any predicate (`NodeAffinity`,
    `TaintToleration`, `PodFitsHostPorts`, `MatchNodeSelector`, ...); status reason `OutOf<resource>`
    (`OutOfcpu`, `OutOfmemory`, `OutOfpods`, `OutOfnvidia.com/gpu`), `UnexpectedAdmissionError`,
    `TopologyAffinityError`"""
    by_reason = obs.reason.startswith("OutOf") or obs.reason in ADMISSION_STATUS_REASONS
    by_message = obs.phase in ("Failed", "") and bool(_ADMISSION_MESSAGE.match(obs.message))
    if not (by_reason or by_message):
        return None
    detail = join(obs.reason, obs.message)
    evidence = (cite(Reason.NODE_DISRUPTION, None, detail),)
    return Fact(Sighting.ADMISSION, keys.NODE_DISRUPTION, obs.title, detail, evidence)


def container_status_unknown(obs: Observation) -> Fact | None:
    """a container terminated with `ContainerStatusUnknown` (exit 137, not an OOM kill)"""
    for container in obs.containers:
        if not obs.blocks(container):
            continue  # a native sidecar beside running main containers is restarted by the kubelet
        for term in (container.terminated, container.last_terminated):
            if term is not None and term.reason == "ContainerStatusUnknown":
                detail = join(term.reason, term.message)
                return Fact(
                    Sighting.LOST,
                    keys.NODE_LOST,
                    container.label,
                    detail,
                    (cite(Reason.NODE_LOST, container, detail),),
                    container.name,
                    term.exit_code,
                )
    return None


# --- a container finished badly, or the pod failed -----------------------------------------------


def deadline_exceeded(obs: Observation) -> Fact | None:
    """status reason `DeadlineExceeded` (`activeDeadlineSeconds`)"""
    if obs.reason != "DeadlineExceeded":
        return None
    detail = join(obs.reason, obs.message)
    evidence = (cite(Reason.DEADLINE_EXCEEDED, None, detail),)
    return Fact(Sighting.STATUS, keys.POD_DEADLINE, obs.title, detail, evidence)


def deleted_while_running(obs: Observation) -> Fact | None:
    """`deletionTimestamp` on an unfinished pod without `DisruptionTarget`, whose containers exited
    only by the deletion's SIGTERM/SIGKILL (143/137, not OOMKilled)"""
    if not obs.deleting:
        return None
    # A deletion stops the containers with SIGTERM (exit 143), then SIGKILL (137): those exits are
    # the deletion's doing. Any other exit happened before the deletion and speaks for itself.
    for container in obs.containers:
        term = container.terminated
        if container.sidecar:
            continue  # a native sidecar's exit never speaks for the task
        if term is not None and (term.exit_code not in (None, 0, 137, 143) or term.reason == "OOMKilled"):
            return None
    evidence = (cite(Reason.DELETED_EXTERNALLY, None, "metadata.deletionTimestamp set"),)
    return Fact(Sighting.DELETING, keys.POD_DELETING, obs.title, evidence=evidence)


def _finished_fact(
    obs: Observation,
    reason: Reason,
    key: Callable[[str], SignalKey],
    found: Callable[[ContainerView, Termination], bool],
    detail: Callable[[Termination], str],
) -> Fact | None:
    hit = _first_finished(obs, found)
    if hit is None:
        return None
    container, term = hit
    text = detail(term)
    return Fact(
        Sighting.FINISHED,
        key(container.name),
        container.label,
        text,
        (cite(reason, container, text),),
        container.name,
        term.exit_code,
        memory_limit=container.memory_limit,
        termination_reason=term.reason,
        termination_message=term.message,
    )


def exec_format_error(obs: Observation) -> Fact | None:
    """a failed or crash-looping container whose waiting message, termination message (with
    `FallbackToLogsOnError`, the end of its log) or log tail says the runtime could not execute its
    entrypoint: "exec /app: exec format error", "exec user process caused: exec format error",
    "exec container process `/app`: Exec format error"
    """
    for container in obs.containers:
        if not (obs.blocks(container) and obs.decides(container)):
            continue
        failed = [
            t for t in (container.terminated, container.last_terminated) if t is not None and t.exit_code
        ]
        texts = [("status", container.waiting_message), *(("status", t.message) for t in failed)]
        if failed or container.waiting_reason:
            texts.append(("log", obs.log_tails.get(container.name, "")))
        hits = ((source, _EXEC_FORMAT.search(text)) for source, text in texts)
        source, found = next(((s, m) for s, m in hits if m is not None), ("", None))
        if found is None:
            continue
        detail = found.group(0)  # the runtime's line only: the rest of a log or message is the task's
        return Fact(
            Sighting.EXEC_FORMAT,
            keys.of_container(Reason.IMAGE_WRONG_PLATFORM, container.name),
            container.label,
            detail,
            (cite(Reason.IMAGE_WRONG_PLATFORM, container, detail, source),),
            container.name,
            image=container.image,
        )
    return None


def oom_killed(obs: Observation) -> Fact | None:
    """a finished container terminated with reason `OOMKilled`"""
    return _finished_fact(
        obs,
        Reason.CONTAINER_OOM,
        keys.container_oom,
        lambda c, t: t.reason == "OOMKilled",
        lambda t: join(exit_detail(t), t.message),
    )


def start_failure(obs: Observation) -> Fact | None:
    """a finished container terminated with `StartError` / `ContainerCannotRun`"""
    return _finished_fact(
        obs,
        Reason.CONTAINER_CREATE_ERROR,
        keys.container_start,
        lambda c, t: t.reason in START_FAILURE_REASONS,
        lambda t: join(t.reason, t.message),
    )


def exit_code(obs: Observation) -> Fact | None:
    """a finished container exited non-zero (init containers first)"""
    return _finished_fact(
        obs,
        Reason.CONTAINER_EXIT_CODE,
        keys.container_exit,
        lambda c, t: t.exit_code is not None and t.exit_code != 0,
        lambda t: join(exit_detail(t), t.message),
    )


def main_containers_done(obs: Observation) -> Fact | None:
    """restartPolicy `Never`, phase `Running`, every main container exited 0 and only the XCom
    sidecar (`airflow-xcom-sidecar`) or `istio-proxy` still runs; or, when the pod names its base
    container (annotation `airflow-k8s-retry.io/base-container`), phase `Running` or `Failed` and the
    base container exited 0, whatever its sidecars do; native sidecars (init containers with
    restartPolicy `Always`) never count, whatever their exit codes"""
    native = any(c.sidecar for c in obs.containers)
    phases = ("Running", "Failed") if obs.base or native else ("Running",)
    if obs.restart_policy != "Never" or obs.phase not in phases:
        return None
    main = [c for c in obs.containers if not c.init and c.name not in HELPER_CONTAINERS and obs.decides(c)]
    if not main:
        return None
    inits_done = all(c.sidecar or c.terminated is not None for c in obs.containers if c.init)
    done = [_finished(obs, c) for c in main]
    if not inits_done or not all(t is not None and t.exit_code == 0 for t in done):
        return None
    if obs.base:
        return Fact(
            Sighting.BASE_DONE, keys.POD_SUCCEEDED, obs.title, _sidecar_states(obs), container=obs.base
        )
    if native:
        return Fact(Sighting.NATIVE_SIDECARS, keys.POD_SUCCEEDED, obs.title, _sidecar_states(obs))
    helpers = ", ".join(sorted(c.name for c in obs.containers if c.name in HELPER_CONTAINERS)) or "sidecars"
    return Fact(Sighting.HELPERS_LEFT, keys.POD_SUCCEEDED, obs.title, helpers)


def _sidecar_states(obs: Observation) -> str:
    """The native sidecars and the other main containers (those that do not decide): "log-shipper
    exited 1, proxy running"."""
    states = []
    for c in obs.containers:
        if (c.init and not c.sidecar) or c.name == obs.base or (not c.sidecar and obs.decides(c)):
            continue
        code = c.terminated.exit_code if c.terminated is not None else None
        states.append(f"{c.name} {'running' if c.terminated is None else f'exited {code}'}")
    return ", ".join(states) or "no sidecars"


def pod_failed(obs: Observation) -> Fact | None:
    """phase `Failed`, nothing more specific"""
    if obs.phase != "Failed":
        return None
    detail = join(obs.reason, obs.message) or "no reason given"
    return Fact(Sighting.PHASE, keys.POD_FAILED, obs.title, detail, (cite(Reason.POD_FAILED, None, detail),))
