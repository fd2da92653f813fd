"""The matchers of the rule table: each reads an ``Observation`` and returns the ``Fact`` it found.

A matcher only detects: it says *what* it saw (who, the cluster's own words, the container, the
exit code, the history key its grace timer runs under) and leaves the sentence a person reads to
``wording.describe``. Each matcher's docstring is the wording it matches; the docs table and
``explain --trace`` quote it. The groups below follow the order of the table in ``rules.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

from airflow_k8s_retry.classification import keys
from airflow_k8s_retry.classification.keys import SignalKey
from airflow_k8s_retry.classification.model import Evidence, Reason
from airflow_k8s_retry.classification.observation import (
    BENIGN_WAITING_REASONS,
    IMAGE_WAITING_REASONS,
    PULL_WAITING_REASONS,
    ContainerView,
    Observation,
    Termination,
)
from airflow_k8s_retry.classification.registry_messages import pull_cause


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
#: Kubelet eviction messages that blame the pod's own ephemeral-storage limits, not the node.
_OWN_STORAGE_LIMIT = re.compile(
    r"exceeds the total limit of containers|exceeded its local ephemeral storage limit"
    r"|usage of emptydir volume .* exceeds the limit",
    re.IGNORECASE,
)


def _finished(obs: Observation, container: ContainerView) -> Termination | None:
    """The container's termination when it will not be restarted."""
    term = container.terminated
    if term is None:
        return None
    if obs.phase == "Failed" or (obs.restart_policy == "Never" and not container.sidecar):
        return term
    return None


def _first(obs: Observation, found: Callable[[ContainerView], bool]) -> ContainerView | None:
    return next((c for c in obs.containers if found(c)), None)


def _first_finished(
    obs: Observation, found: Callable[[ContainerView, Termination], bool]
) -> tuple[ContainerView, Termination] | None:
    """The first finished container matching ``found`` and its termination; sidecars last, as the
    kubelet kills them when the pod ends."""
    ordered = sorted(obs.containers, key=lambda c: c.sidecar)  # stable: init first within each group
    for container in ordered:
        term = _finished(obs, container)
        if term is not None and found(container, term):
            return container, term
    return None


def _evidence(
    reason: Reason, container: ContainerView | None, detail: str, source: str = "status"
) -> Evidence:
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
            evidence = (_evidence(reason, None, "pod not found after " + what, "api"),)
            return Fact(Sighting.GONE_AFTER, keys.gone_after(reason), "the pod", what, evidence)
        told = obs.events_named(*events)
        if not told:
            return None
        event = told[-1]
        detail = f"pod not found after event {join(event.reason, event.message)}"
        evidence = (_evidence(reason, None, detail, "event"),)
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
    evidence = (_evidence(Reason.DELETED_EXTERNALLY, None, "pod not found", "api"),)
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
    evidence = (_evidence(Reason.CONTAINER_STORAGE_LIMIT, None, detail),)
    return Fact(Sighting.STATUS, keys.STORAGE_LIMIT, obs.title, detail, evidence)


def disruption_target(obs: Observation) -> Fact | None:
    """condition `DisruptionTarget=True` (`PreemptionByScheduler`, `EvictionByEvictionAPI`,
    `DeletionByTaintManager`, `DeletionByPodGC`, `TerminationByKubelet`)"""
    cond = obs.condition("DisruptionTarget")
    if cond is None or cond.status != "True":
        return None
    detail = join(cond.reason, cond.message)
    evidence = (_evidence(Reason.NODE_DISRUPTION, None, f"DisruptionTarget: {detail}"),)
    return Fact(Sighting.CONDITION, keys.NODE_DISRUPTION, obs.title, detail or "DisruptionTarget", evidence)


def node_lost(obs: Observation) -> Fact | None:
    """status reason `NodeLost`"""
    if obs.reason != "NodeLost":
        return None
    detail = join(obs.reason, obs.message)
    return Fact(
        Sighting.STATUS, keys.NODE_LOST, obs.title, detail, (_evidence(Reason.NODE_LOST, None, detail),)
    )


def node_rejected(obs: Observation) -> Fact | None:
    """status reason `Evicted`, `Shutdown`, `NodeShutdown`, `Terminated`, `Preempting`"""
    if obs.reason not in DISRUPTION_STATUS_REASONS:
        return None
    detail = join(obs.reason, obs.message)
    evidence = (_evidence(Reason.NODE_DISRUPTION, None, detail),)
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
    evidence = (_evidence(Reason.NODE_DISRUPTION, None, detail),)
    return Fact(Sighting.ADMISSION, keys.NODE_DISRUPTION, obs.title, detail, evidence)


def container_status_unknown(obs: Observation) -> Fact | None:
    """a container terminated with `ContainerStatusUnknown` (exit 137, not an OOM kill)"""
    for container in obs.containers:
        for term in (container.terminated, container.last_terminated):
            if term is not None and term.reason == "ContainerStatusUnknown":
                detail = join(term.reason, term.message)
                return Fact(
                    Sighting.LOST,
                    keys.NODE_LOST,
                    container.label,
                    detail,
                    (_evidence(Reason.NODE_LOST, container, detail),),
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
    evidence = (_evidence(Reason.DEADLINE_EXCEEDED, None, detail),)
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
        if term is not None and (term.exit_code not in (None, 0, 137, 143) or term.reason == "OOMKilled"):
            return None
    evidence = (_evidence(Reason.DELETED_EXTERNALLY, None, "metadata.deletionTimestamp set"),)
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
        (_evidence(reason, container, text),),
        container.name,
        term.exit_code,
        memory_limit=container.memory_limit,
        termination_reason=term.reason,
        termination_message=term.message,
    )


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
    sidecar (`airflow-xcom-sidecar`) or `istio-proxy` still runs"""
    if obs.phase != "Running" or obs.restart_policy != "Never":
        return None
    main = [c for c in obs.containers if not c.init and c.name not in HELPER_CONTAINERS]
    if not main or any(c.sidecar for c in main):
        return None
    inits_done = all(c.sidecar or c.terminated is not None for c in obs.containers if c.init)
    if not inits_done or not all(c.terminated is not None and c.terminated.exit_code == 0 for c in main):
        return None
    helpers = ", ".join(sorted(c.name for c in obs.containers if c.name in HELPER_CONTAINERS)) or "sidecars"
    return Fact(Sighting.HELPERS_LEFT, keys.POD_SUCCEEDED, obs.title, helpers)


def pod_failed(obs: Observation) -> Fact | None:
    """phase `Failed`, nothing more specific"""
    if obs.phase != "Failed":
        return None
    detail = join(obs.reason, obs.message) or "no reason given"
    return Fact(
        Sighting.PHASE, keys.POD_FAILED, obs.title, detail, (_evidence(Reason.POD_FAILED, None, detail),)
    )


# --- a container cannot start --------------------------------------------------------------------


def _waiting(obs: Observation, reason: Reason, waiting: Iterable[str]) -> Fact | None:
    wanted = frozenset(waiting)
    container = _first(obs, lambda c: c.waiting_reason in wanted)
    if container is None:
        return None
    detail = join(container.waiting_reason, container.waiting_message)
    return Fact(
        Sighting.WAITING,
        keys.of_container(reason, container.name),
        container.label,
        detail,
        (_evidence(reason, container, detail),),
        container.name,
        image=container.image,
    )


def invalid_image_name(obs: Observation) -> Fact | None:
    """waiting `InvalidImageName`"""
    return _waiting(obs, Reason.IMAGE_INVALID_NAME, ["InvalidImageName"])


def image_never_pull(obs: Observation) -> Fact | None:
    """waiting `ErrImageNeverPull`"""
    return _waiting(obs, Reason.IMAGE_NEVER_PULL, ["ErrImageNeverPull"])


def _pull(cause: Reason, doc: str) -> Matcher:
    def match(obs: Observation) -> Fact | None:
        for container in obs.containers:
            if container.waiting_reason not in IMAGE_WAITING_REASONS:
                continue
            evidence = obs.pull_causes.get(container.name)
            if evidence is None or evidence.reason is not cause:
                continue
            decayed = pull_cause(container.waiting_message) is not cause
            return Fact(
                Sighting.PULL,
                keys.of_container(cause, container.name),
                container.label,
                evidence.message[:400],
                (evidence,),
                container.name,
                image=container.image,
                current=(container.waiting_message or container.waiting_reason) if decayed else "",
            )
        return None

    match.__name__ = f"pull_{cause.name.lower()}"
    match.__doc__ = doc
    return match


_CAUSE = "pull or inspect error whose strongest cause (status or Events)"
image_wrong_platform = _pull(
    Reason.IMAGE_WRONG_PLATFORM,
    f'{_CAUSE} is the platform: "no match for platform in manifest" (containerd), "no matching manifest '
    'for linux/arm64/v8 in the manifest list entries" (dockershim, moby), "no image found in manifest list '
    'for architecture" (CRI-O)',
)
image_short_name = _pull(
    Reason.IMAGE_SHORT_NAME,
    f"{_CAUSE} is CRI-O's short-name policy: \"short-name ... did not resolve to an alias and no "
    'unqualified-search registries are defined", "short name mode is enforcing, but image name ... returns '
    'ambiguous list", "no registries configured while trying to pull an unqualified image"',
)
image_not_found = _pull(
    Reason.IMAGE_NOT_FOUND,
    f'{_CAUSE} is "not found", "manifest unknown", "repository does not exist"',
)
image_unauthorized = _pull(
    Reason.IMAGE_UNAUTHORIZED,
    f'{_CAUSE} is "unauthorized", "denied", "authentication required", 401, 403, "no basic auth credentials"',
)
image_rate_limited = _pull(
    Reason.IMAGE_RATE_LIMITED,
    f'{_CAUSE} is 429, "toomanyrequests", "rate exceeded", "pull QPS exceeded", quota exceeded',
)
image_tls_error = _pull(
    Reason.IMAGE_TLS_ERROR,
    f'{_CAUSE} is TLS: "x509: certificate signed by unknown authority", "x509: certificate has expired or is '
    'not yet valid", "x509: certificate is valid for ..., not ...", "tls: failed to verify certificate", '
    '"http: server gave HTTP response to HTTPS client"',
)
image_registry_unavailable = _pull(
    Reason.IMAGE_REGISTRY_UNAVAILABLE,
    f'{_CAUSE} is the registry or the transport: 5xx, "i/o timeout", "TLS handshake timeout", '
    '"net/http: request canceled", "context canceled", "connection refused", "no such host"',
)


def image_pull_backoff(obs: Observation) -> Fact | None:
    """pull error with only the generic "Back-off pulling image" text and no earlier cause"""
    return _waiting(obs, Reason.IMAGE_PULL_BACKOFF, PULL_WAITING_REASONS)


def _config_kind(container: ContainerView) -> str | None:
    message = container.waiting_message.lower()
    if "secret" in message:
        return "secret"
    if "configmap" in message or "config map" in message:
        return "configmap"
    return None


def _config(kind: str | None, reason: Reason, doc: str) -> Matcher:
    def match(obs: Observation) -> Fact | None:
        container = _first(
            obs, lambda c: c.waiting_reason == "CreateContainerConfigError" and _config_kind(c) == kind
        )
        if container is None:
            return None
        detail = join(container.waiting_reason, container.waiting_message)
        return Fact(
            Sighting.WAITING,
            keys.of_container(reason, container.name),
            container.label,
            detail,
            (_evidence(reason, container, detail),),
            container.name,
        )

    match.__name__ = f"config_{kind or 'other'}"
    match.__doc__ = doc
    return match


missing_secret = _config(
    "secret",
    Reason.CONFIG_MISSING_SECRET,
    '`CreateContainerConfigError` about a Secret (missing, missing key, "failed to sync secret cache")',
)
missing_configmap = _config(
    "configmap", Reason.CONFIG_MISSING_CONFIGMAP, "`CreateContainerConfigError` about a ConfigMap"
)
config_error = _config(
    None,
    Reason.CONFIG_ERROR,
    "any other `CreateContainerConfigError` (e.g. `runAsNonRoot` with a root image)",
)


def _crash_loop(oom: bool, doc: str) -> Matcher:
    def match(obs: Observation) -> Fact | None:
        def looping(c: ContainerView) -> bool:
            if c.waiting_reason != "CrashLoopBackOff":
                return False
            last_oom = c.last_terminated is not None and c.last_terminated.reason == "OOMKilled"
            return last_oom == oom

        container = _first(obs, looping)
        if container is None:
            return None
        last = container.last_terminated
        reason = Reason.CONTAINER_OOM if oom else Reason.CONTAINER_EXIT_CODE
        if last is not None:
            detail = join(exit_detail(last), last.message[:300])
        else:
            detail = container.waiting_message or "no termination recorded"
        return Fact(
            Sighting.LOOP,
            keys.crash_loop(reason, container.name),
            container.label,
            detail,
            (_evidence(reason, container, detail),),
            container.name,
            last.exit_code if last is not None else None,
            memory_limit=container.memory_limit,
        )

    match.__name__ = "crash_loop_oom" if oom else "crash_loop"
    match.__doc__ = doc
    return match


crash_loop_oom = _crash_loop(
    True, "`CrashLoopBackOff` after an `OOMKilled` run (restartPolicy `OnFailure`/`Always`)"
)
crash_loop = _crash_loop(False, "`CrashLoopBackOff` after any other failed run")


def container_error(obs: Observation) -> Fact | None:
    """`CreateContainerError`, `RunContainerError`, `PreStartHookError`, `PostStartHookError`,
    `PreCreateHookError`, `ImageInspectError`, `KillContainerError`, `VerifyNonRootError`, any other
    waiting reason"""
    known = BENIGN_WAITING_REASONS | PULL_WAITING_REASONS | {"CrashLoopBackOff"}
    container = _first(obs, lambda c: c.waiting_reason not in known)
    if container is None:
        return None
    detail = join(container.waiting_reason, container.waiting_message)
    return Fact(
        Sighting.WAITING,
        keys.of_container(Reason.CONTAINER_CREATE_ERROR, container.name),
        container.label,
        detail,
        (_evidence(Reason.CONTAINER_CREATE_ERROR, container, detail),),
        container.name,
    )


# --- the pod runs, or its node stopped reporting -------------------------------------------------


def running(obs: Observation) -> Fact | None:
    """phase `Running`"""
    if obs.phase != "Running":
        return None
    return Fact(Sighting.PHASE, keys.POD_RUNNING, obs.title)


def phase_unknown(obs: Observation) -> Fact | None:
    """phase `Unknown` (the node stopped reporting)"""
    if obs.phase != "Unknown":
        return None
    detail = obs.message or "the node stopped reporting"
    evidence = (_evidence(Reason.NODE_LOST, None, f"phase Unknown: {detail}"),)
    return Fact(Sighting.PHASE, keys.NODE_LOST_UNKNOWN_PHASE, obs.title, detail, evidence)


# --- not placed or not started yet ---------------------------------------------------------------


def unschedulable(obs: Observation) -> Fact | None:
    """`PodScheduled=False` (`Unschedulable`, `SchedulingGated`)"""
    cond = obs.condition("PodScheduled")
    if cond is None or cond.status != "False":
        return None
    failed = obs.events_named("FailedScheduling")
    detail = cond.message or (failed[-1].message if failed else "") or cond.reason or "no reason given"
    evidence = [_evidence(Reason.UNSCHEDULABLE, None, join("PodScheduled=False", cond.reason, cond.message))]
    scale_ups = obs.events_named("TriggeredScaleUp")
    refusals = obs.events_named("NotTriggerScaleUp")
    latest = max((*scale_ups, *refusals), key=lambda e: e.stamp, default=None)
    related = None
    if latest is not None:
        related = (latest.reason, latest.message)
        evidence.append(_evidence(Reason.UNSCHEDULABLE, None, f"{latest.reason}: {latest.message}", "event"))
    return Fact(
        Sighting.CONDITION,
        keys.UNSCHEDULABLE,
        obs.title,
        detail,
        tuple(evidence),
        extension_keys=tuple(keys.scale_up(e.identity) for e in scale_ups),
        related=related,
    )


def _pending_with_events(reasons: tuple[str, ...], reason: Reason, doc: str) -> Matcher:
    def match(obs: Observation) -> Fact | None:
        if obs.phase not in ("Pending", ""):
            return None
        found = obs.events_named(*reasons)
        if not found:
            return None
        latest = found[-1]
        evidence = (_evidence(reason, None, f"{latest.reason}: {latest.message}", "event"),)
        return Fact(Sighting.EVENTS, keys.of_reason(reason), obs.title, latest.message[:500], evidence)

    match.__name__ = reason.name.lower()
    match.__doc__ = doc
    return match


volume_mount_failed = _pending_with_events(
    ("FailedMount", "FailedAttachVolume"),
    Reason.VOLUME_MOUNT_FAILED,
    "pending with `FailedMount` / `FailedAttachVolume` Events",
)
sandbox_failed = _pending_with_events(
    ("FailedCreatePodSandBox",),
    Reason.CONTAINER_CREATE_ERROR,
    "pending with `FailedCreatePodSandBox` Events (CNI, runtime)",
)


def pending(obs: Observation) -> Fact | None:
    """pending, no known problem"""
    if obs.phase != "Pending":
        return None
    return Fact(Sighting.PENDING, keys.POD_PENDING, obs.title)


# --- anything else -------------------------------------------------------------------------------


def anything(obs: Observation) -> Fact | None:
    """anything else (catch-all)"""
    phase = obs.phase or "not reported"
    evidence = (_evidence(Reason.UNKNOWN, None, f"phase {phase}"),)
    return Fact(Sighting.PHASE, keys.POD_UNRECOGNISED, obs.title, f"phase {phase}", evidence)
