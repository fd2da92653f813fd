"""The default classification rules: one ordered table, first match wins, catch-all last.

Each ``Rule`` is data: a name, the reason code it reports, the outcome once its grace is over,
its default grace (seconds, or the name of a ``FailurePolicy`` field), a matcher that reads an
``Observation``, and one line saying why the rule exists. The matchers are small pure functions;
the order of ``RULES`` is the precedence, read top to bottom:

1. the pod is gone or finished (success before anything else);
2. infrastructure took the pod away (relaunch, it was not the task's fault);
3. a container finished badly (OOM, start error, exit code) or the pod failed otherwise;
4. a container cannot start (image, configuration, crash loop, runtime errors);
5. the pod runs (a re-check deadline, not a failure);
6. the pod is not placed or not started yet (scheduling, volumes, sandbox, startup timeout);
7. anything else (a long timeout, never a hang).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache

from airflow_k8s_retry.classification.model import Evidence, Outcome, Reason
from airflow_k8s_retry.classification.observation import (
    BENIGN_WAITING_REASONS,
    PULL_WAITING_REASONS,
    ContainerView,
    Observation,
    Termination,
)
from airflow_k8s_retry.classification.registry_messages import pull_cause


@dataclass(frozen=True)
class Match:
    """What a matcher found: the message for people, and the signal key its grace timer uses."""

    message: str
    key: str
    evidence: tuple[Evidence, ...] = ()
    container: str | None = None
    exit_code: int | None = None
    #: Signals that extend the grace while fresh (cluster-autoscaler scale-ups).
    extension_keys: tuple[str, ...] = ()


Matcher = Callable[[Observation], Match | None]


@dataclass(frozen=True)
class Rule:
    """One row of the classification table.

    ``grace`` is seconds to wait (on our clock, from when the signal was first seen) before the
    outcome applies, or the name of a ``FailurePolicy`` field holding it, or ``None`` to act at
    once. A rule whose ``outcome`` is ``WAIT`` always waits, with ``grace`` as its re-check period.
    ``waiting_reason`` is reported while the grace runs when it differs from ``reason``.
    """

    name: str
    reason: Reason
    outcome: Outcome
    grace: float | str | None
    match: Matcher
    why: str
    waiting_reason: Reason | None = None
    extension: str | None = None  # FailurePolicy field: extra grace while a fresh extension signal exists


# --- helpers -------------------------------------------------------------------------------------

DISRUPTION_STATUS_REASONS = frozenset(
    {
        "Evicted",
        "Shutdown",
        "NodeShutdown",
        "Terminated",
        "UnexpectedAdmissionError",
        "NodeAffinity",
        "Preempting",
    }
)
START_FAILURE_REASONS = frozenset({"StartError", "ContainerCannotRun"})
SIGNALS = {137: "SIGKILL", 143: "SIGTERM", 139: "SIGSEGV", 134: "SIGABRT"}


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
) -> ContainerView | None:
    """The first finished container matching ``found``; sidecars last, as the kubelet kills them on exit."""
    ordered = sorted(obs.containers, key=lambda c: c.sidecar)  # stable: init first within each group
    return next((c for c in ordered if (t := _finished(obs, c)) is not None and found(c, t)), None)


def _evidence(
    reason: Reason, container: ContainerView | None, detail: str, source: str = "status"
) -> Evidence:
    return Evidence(reason, source, detail, container.name if container else None)


def _join(*parts: str) -> str:
    return ": ".join(p for p in parts if p)


def _exit_detail(term: Termination) -> str:
    code = term.exit_code
    detail = f"exit code {code}" if code is not None else "no exit code"
    if code is not None and code in SIGNALS:
        detail += f" ({SIGNALS[code]})"
    if term.reason:
        detail += f", reason {term.reason}"
    return detail


# --- matchers: gone or finished ------------------------------------------------------------------


def _pod_gone(obs: Observation) -> Match | None:
    if obs.exists:
        return None
    text = (
        "the pod no longer exists: it was deleted outside this task (by a person, a controller "
        "or a namespace deletion) before it finished"
    )
    return Match(text, "pod.gone", (_evidence(Reason.DELETED_EXTERNALLY, None, "pod not found", "api"),))


def _gone_after(reason: Reason, *keys: str) -> Matcher:
    """Match a vanished pod whose history shows the cluster was already taking it away."""

    def match(obs: Observation) -> Match | None:
        if obs.exists or not any(obs.history.since(k) is not None for k in keys):
            return None
        what = "marked it for disruption" if reason is Reason.NODE_DISRUPTION else "lost its node"
        text = f"the pod no longer exists, and before it vanished the cluster {what}"
        return Match(
            text, f"{reason.value}.gone", (_evidence(reason, None, "pod not found after " + what, "api"),)
        )

    match.__name__ = f"gone_after_{reason.name.lower()}"
    return match


def _succeeded(obs: Observation) -> Match | None:
    if obs.phase != "Succeeded":
        return None
    return Match(f"{obs.title} succeeded", "pod.succeeded")


# --- matchers: infrastructure --------------------------------------------------------------------


#: Kubelet eviction messages that blame the pod's own ephemeral-storage limits, not the node.
_OWN_STORAGE_LIMIT = re.compile(
    r"exceeds the total limit of containers|exceeded its local ephemeral storage limit"
    r"|usage of emptydir volume .* exceeds the limit",
    re.IGNORECASE,
)


def _storage_limit(obs: Observation) -> Match | None:
    cond = obs.condition("DisruptionTarget")
    texts = [obs.message] if obs.reason == "Evicted" else []
    if cond is not None and cond.status == "True" and cond.reason == "TerminationByKubelet":
        texts.append(cond.message)
    detail = next((t for t in texts if _OWN_STORAGE_LIMIT.search(t)), None)
    if detail is None:
        return None
    text = (
        f"{obs.title} was evicted for exceeding its own ephemeral-storage limit ({detail}); "
        "a new pod would meet the same limit, so this costs a try: raise the limit or write less"
    )
    return Match(text, "container.storage_limit", (_evidence(Reason.CONTAINER_STORAGE_LIMIT, None, detail),))


def _disruption_target(obs: Observation) -> Match | None:
    cond = obs.condition("DisruptionTarget")
    if cond is None or cond.status != "True":
        return None
    detail = _join(cond.reason, cond.message)
    text = f"{obs.title} is being disrupted by the cluster ({detail or 'DisruptionTarget'})"
    return Match(
        text, "node.disruption", (_evidence(Reason.NODE_DISRUPTION, None, f"DisruptionTarget: {detail}"),)
    )


def _node_lost_status(obs: Observation) -> Match | None:
    if obs.reason != "NodeLost":
        return None
    detail = _join(obs.reason, obs.message)
    return Match(
        f"{obs.title} lost its node ({detail})", "node.lost", (_evidence(Reason.NODE_LOST, None, detail),)
    )


def _disruption_status(obs: Observation) -> Match | None:
    if obs.reason not in DISRUPTION_STATUS_REASONS and not obs.reason.startswith("OutOf"):
        return None
    detail = _join(obs.reason, obs.message)
    text = f"the node rejected or removed {obs.title} ({detail})"
    return Match(text, "node.disruption", (_evidence(Reason.NODE_DISRUPTION, None, detail),))


def _container_status_unknown(obs: Observation) -> Match | None:
    def unknown(c: ContainerView) -> bool:
        return any(
            t is not None and t.reason == "ContainerStatusUnknown" for t in (c.terminated, c.last_terminated)
        )

    container = _first(obs, unknown)
    if container is None:
        return None
    term = (
        container.terminated
        if container.terminated and container.terminated.reason == "ContainerStatusUnknown"
        else container.last_terminated
    )
    assert term is not None
    detail = _join(term.reason, term.message)
    text = (
        f"the kubelet lost track of {container.label} ({detail}); its exit code "
        f"{term.exit_code} does not mean it ran out of memory"
    )
    return Match(text, "node.lost", (_evidence(Reason.NODE_LOST, container, detail),), container.name)


def _phase_unknown(obs: Observation) -> Match | None:
    if obs.phase != "Unknown":
        return None
    detail = obs.message or "the node stopped reporting"
    return Match(
        f"{obs.title} is in phase Unknown ({detail})",
        "node.lost.unknown_phase",
        (_evidence(Reason.NODE_LOST, None, f"phase Unknown: {detail}"),),
    )


# --- matchers: finished badly --------------------------------------------------------------------


def _deadline_exceeded(obs: Observation) -> Match | None:
    if obs.reason != "DeadlineExceeded":
        return None
    detail = _join(obs.reason, obs.message)
    return Match(
        f"{obs.title} ran past its activeDeadlineSeconds ({detail})",
        "pod.deadline",
        (_evidence(Reason.DEADLINE_EXCEEDED, None, detail),),
    )


def _oom_killed(obs: Observation) -> Match | None:
    container = _first_finished(obs, lambda c, t: t.reason == "OOMKilled")
    if container is None:
        return None
    term = _finished(obs, container)
    assert term is not None
    limit = f"memory limit {container.memory_limit}" if container.memory_limit else "no memory limit set"
    text = (
        f"{container.label} was killed for running out of memory ({limit}, exit code {term.exit_code}); "
        "raise its memory limit or lower its usage"
    )
    return Match(
        text,
        f"container.oom:{container.name}",
        (_evidence(Reason.CONTAINER_OOM, container, _join(_exit_detail(term), term.message)),),
        container.name,
        term.exit_code,
    )


def _start_failure(obs: Observation) -> Match | None:
    container = _first_finished(obs, lambda c, t: t.reason in START_FAILURE_REASONS)
    if container is None:
        return None
    term = _finished(obs, container)
    assert term is not None
    detail = _join(term.reason, term.message)
    return Match(
        f"{container.label} could not be started ({detail})",
        f"container.start:{container.name}",
        (_evidence(Reason.CONTAINER_CREATE_ERROR, container, detail),),
        container.name,
        term.exit_code,
    )


def _exit_code(obs: Observation) -> Match | None:
    container = _first_finished(obs, lambda c, t: t.exit_code is not None and t.exit_code != 0)
    if container is None:
        return None
    term = _finished(obs, container)
    assert term is not None and term.exit_code is not None
    text = f"{container.label} failed with {_exit_detail(term)}"
    if term.exit_code == 137 and term.reason != "OOMKilled":
        text += " (killed by a signal; not an out-of-memory kill, the reason does not say OOMKilled)"
    if term.message:
        text += f": {term.message[:500]}"
    return Match(
        text,
        f"container.exit:{container.name}",
        (_evidence(Reason.CONTAINER_EXIT_CODE, container, _join(_exit_detail(term), term.message)),),
        container.name,
        term.exit_code,
    )


#: Containers that never exit by themselves and only serve the main containers: the cncf provider's
#: XCom sidecar (it waits to be told to stop after the result is read) and the istio proxy.
HELPER_CONTAINERS = frozenset({"airflow-xcom-sidecar", "istio-proxy"})


def _main_containers_done(obs: Observation) -> Match | None:
    if obs.phase != "Running" or obs.restart_policy != "Never":
        return None
    main = [c for c in obs.containers if not c.init and c.name not in HELPER_CONTAINERS]
    if not main or any(c.sidecar for c in main):
        return None
    inits_done = all(c.sidecar or c.terminated is not None for c in obs.containers if c.init)
    if not inits_done or not all(c.terminated is not None and c.terminated.exit_code == 0 for c in main):
        return None
    helpers = ", ".join(sorted(c.name for c in obs.containers if c.name in HELPER_CONTAINERS)) or "sidecars"
    return Match(f"every main container of {obs.title} exited 0 ({helpers} still running)", "pod.succeeded")


def _pod_failed(obs: Observation) -> Match | None:
    if obs.phase != "Failed":
        return None
    detail = _join(obs.reason, obs.message) or "no reason given"
    return Match(
        f"{obs.title} failed ({detail})", "pod.failed", (_evidence(Reason.POD_FAILED, None, detail),)
    )


def _deleted_while_running(obs: Observation) -> Match | None:
    if not obs.deleting:
        return None
    # A deletion stops the containers with SIGTERM (exit 143), then SIGKILL (137): those exits are
    # the deletion's doing. Any other exit happened before the deletion and speaks for itself.
    for container in obs.containers:
        term = container.terminated
        if term is not None and term.exit_code not in (None, 0, 137, 143):
            return None
        if term is not None and term.reason == "OOMKilled":
            return None
    text = (
        f"{obs.title} is being deleted (deletionTimestamp is set) before it finished, "
        "and not by the cluster's disruption handling"
    )
    return Match(
        text, "pod.deleting", (_evidence(Reason.DELETED_EXTERNALLY, None, "metadata.deletionTimestamp set"),)
    )


# --- matchers: cannot start ----------------------------------------------------------------------


def _waiting(obs: Observation, reasons: Iterable[str]) -> ContainerView | None:
    wanted = frozenset(reasons)
    return _first(obs, lambda c: c.waiting_reason in wanted)


def _waiting_match(obs: Observation, reason: Reason, waiting: Iterable[str], text: str) -> Match | None:
    container = _waiting(obs, waiting)
    if container is None:
        return None
    detail = _join(container.waiting_reason, container.waiting_message)
    return Match(
        f"{container.label}: {text} ({detail})",
        f"{reason.value}:{container.name}",
        (_evidence(reason, container, detail),),
        container.name,
    )


def _invalid_image_name(obs: Observation) -> Match | None:
    return _waiting_match(
        obs, Reason.IMAGE_INVALID_NAME, ["InvalidImageName"], "the image reference is not valid"
    )


def _image_never_pull(obs: Observation) -> Match | None:
    return _waiting_match(
        obs,
        Reason.IMAGE_NEVER_PULL,
        ["ErrImageNeverPull"],
        "imagePullPolicy is Never and the image is not on the node",
    )


_PULL_TEXT = {
    Reason.IMAGE_NOT_FOUND: "the registry says the image does not exist (check the name and tag; Docker Hub "
    "also says this for a private repository pulled without credentials)",
    Reason.IMAGE_UNAUTHORIZED: "the registry refused access to the image (check imagePullSecrets and their "
    "permissions)",
    Reason.IMAGE_RATE_LIMITED: "the registry is rate-limiting pulls",
    Reason.IMAGE_REGISTRY_UNAVAILABLE: "the registry could not be reached or failed",
}


def _pull(cause: Reason) -> Matcher:
    def match(obs: Observation) -> Match | None:
        for container in obs.containers:
            if container.waiting_reason not in PULL_WAITING_REASONS:
                continue
            evidence = obs.pull_causes.get(container.name)
            if evidence is None or evidence.reason is not cause:
                continue
            text = f"{container.label} cannot pull {container.image or 'its image'}: {_PULL_TEXT[cause]}"
            if pull_cause(container.waiting_message) is cause:
                text += f" ({evidence.message[:400]})"
            else:  # the status decayed to the generic back-off text
                text += f"; current status: {container.waiting_message or container.waiting_reason}; "
                text += f"strongest cause seen earlier: {evidence.message[:400]}"
            return Match(text, f"{cause.value}:{container.name}", (evidence,), container.name)
        return None

    match.__name__ = f"pull_{cause.name.lower()}"
    return match


def _pull_backoff(obs: Observation) -> Match | None:
    container = _first(obs, lambda c: c.waiting_reason in PULL_WAITING_REASONS)
    if container is None:
        return None
    detail = _join(container.waiting_reason, container.waiting_message)
    text = (
        f"{container.label} cannot pull {container.image or 'its image'} and no cause is known yet ({detail})"
    )
    return Match(
        text,
        f"{Reason.IMAGE_PULL_BACKOFF.value}:{container.name}",
        (_evidence(Reason.IMAGE_PULL_BACKOFF, container, detail),),
        container.name,
    )


def _config(kind: str | None) -> Matcher:
    def match(obs: Observation) -> Match | None:
        container = _first(
            obs, lambda c: c.waiting_reason == "CreateContainerConfigError" and _config_kind(c) == kind
        )
        if container is None:
            return None
        reason = {"secret": Reason.CONFIG_MISSING_SECRET, "configmap": Reason.CONFIG_MISSING_CONFIGMAP}.get(
            kind or "", Reason.CONFIG_ERROR
        )
        detail = _join(container.waiting_reason, container.waiting_message)
        what = {
            "secret": "a Secret or a key in it is missing (or the secret cache is still syncing)",
            "configmap": "a ConfigMap or a key in it is missing (or the configmap cache is still syncing)",
        }.get(kind or "", "its configuration is invalid")
        return Match(
            f"{container.label}: {what} ({detail})",
            f"{reason.value}:{container.name}",
            (_evidence(reason, container, detail),),
            container.name,
        )

    match.__name__ = f"config_{kind or 'other'}"
    return match


def _config_kind(container: ContainerView) -> str | None:
    message = container.waiting_message.lower()
    if "secret" in message:
        return "secret"
    if "configmap" in message or "config map" in message:
        return "configmap"
    return None


def _crash_loop(oom: bool) -> Matcher:
    def match(obs: Observation) -> Match | None:
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
            detail = _join(_exit_detail(last), last.message[:300])
        else:
            detail = container.waiting_message or "no termination recorded"
        what = "keeps running out of memory" if oom else "keeps crashing"
        limit = f" (memory limit {container.memory_limit or 'not set'})" if oom else ""
        return Match(
            f"{container.label} {what}{limit}; last run: {detail}",
            f"{reason.value}.loop:{container.name}",
            (_evidence(reason, container, detail),),
            container.name,
            last.exit_code if last is not None else None,
        )

    match.__name__ = "crash_loop_oom" if oom else "crash_loop"
    return match


def _container_error(obs: Observation) -> Match | None:
    known = BENIGN_WAITING_REASONS | PULL_WAITING_REASONS | {"CrashLoopBackOff"}
    container = _first(obs, lambda c: c.waiting_reason not in known)
    if container is None:
        return None
    detail = _join(container.waiting_reason, container.waiting_message)
    return Match(
        f"{container.label} cannot be created or started ({detail})",
        f"{Reason.CONTAINER_CREATE_ERROR.value}:{container.name}",
        (_evidence(Reason.CONTAINER_CREATE_ERROR, container, detail),),
        container.name,
    )


# --- matchers: running ---------------------------------------------------------------------------


def _running(obs: Observation) -> Match | None:
    if obs.phase != "Running":
        return None
    return Match(f"{obs.title} is running", "pod.running")


# --- matchers: not placed or not started ---------------------------------------------------------


def _unschedulable(obs: Observation) -> Match | None:
    cond = obs.condition("PodScheduled")
    if cond is None or cond.status != "False":
        return None
    failed = obs.events_named("FailedScheduling")
    detail = cond.message or (failed[-1].message if failed else "") or cond.reason or "no reason given"
    text = f"{obs.title} cannot be scheduled: {detail}"
    evidence = [_evidence(Reason.UNSCHEDULABLE, None, _join("PodScheduled=False", cond.reason, cond.message))]
    scale_ups = obs.events_named("TriggeredScaleUp")
    refusals = obs.events_named("NotTriggerScaleUp")
    latest = max((*scale_ups, *refusals), key=lambda e: e.stamp, default=None)
    if latest is not None:
        verb = "is adding a node" if latest.reason == "TriggeredScaleUp" else "will not add a node"
        text += f"; cluster-autoscaler {verb} ({latest.message})"
        evidence.append(_evidence(Reason.UNSCHEDULABLE, None, f"{latest.reason}: {latest.message}", "event"))
    return Match(
        text,
        "schedule.unschedulable",
        tuple(evidence),
        extension_keys=tuple(f"schedule.scale_up:{e.identity}" for e in scale_ups),
    )


def _pending_with_events(reasons: tuple[str, ...], reason: Reason, what: str) -> Matcher:
    def match(obs: Observation) -> Match | None:
        if obs.phase not in ("Pending", ""):
            return None
        found = obs.events_named(*reasons)
        if not found:
            return None
        latest = found[-1]
        return Match(
            f"{obs.title} {what}: {latest.message[:500]}",
            reason.value,
            (_evidence(reason, None, f"{latest.reason}: {latest.message}", "event"),),
        )

    match.__name__ = reason.name.lower()
    return match


def _pending(obs: Observation) -> Match | None:
    if obs.phase != "Pending":
        return None
    return Match(f"{obs.title} has not started yet", "pod.pending")


def _anything(obs: Observation) -> Match | None:
    phase = obs.phase or "not reported"
    return Match(
        f"{obs.title} is in a state no rule recognises (phase {phase})",
        "pod.unrecognised",
        (_evidence(Reason.UNKNOWN, None, f"phase {phase}"),),
    )


# --- the table -----------------------------------------------------------------------------------

RULES: tuple[Rule, ...] = (
    Rule(
        "gone_after_disruption",
        Reason.NODE_DISRUPTION,
        Outcome.RELAUNCH,
        None,
        _gone_after(Reason.NODE_DISRUPTION, "node.disruption"),
        "a pod that vanishes after a DisruptionTarget or an eviction was taken by the cluster",
    ),
    Rule(
        "gone_after_node_lost",
        Reason.NODE_LOST,
        Outcome.RELAUNCH,
        None,
        _gone_after(Reason.NODE_LOST, "node.lost", "node.lost.unknown_phase"),
        "a pod that vanishes after its node stopped reporting was garbage-collected with the node",
    ),
    Rule(
        "pod_gone",
        Reason.DELETED_EXTERNALLY,
        Outcome.RETRY,
        None,
        _pod_gone,
        "a pod that vanished before finishing was deleted by someone else; the try cannot complete",
    ),
    Rule(
        "succeeded",
        Reason.SUCCEEDED,
        Outcome.SUCCEED,
        None,
        _succeeded,
        "phase Succeeded is final, whatever else the status says",
    ),
    Rule(
        "storage_limit",
        Reason.CONTAINER_STORAGE_LIMIT,
        Outcome.RETRY,
        None,
        _storage_limit,
        "an eviction for the pod's own ephemeral-storage limit would repeat on any node: not a disruption",
    ),
    Rule(
        "disruption_target",
        Reason.NODE_DISRUPTION,
        Outcome.RELAUNCH,
        None,
        _disruption_target,
        "the cluster is taking the pod away (preemption, eviction, taint, GC, kubelet): not the task's fault",
    ),
    Rule(
        "node_lost",
        Reason.NODE_LOST,
        Outcome.RELAUNCH,
        None,
        _node_lost_status,
        "the node controller gave up on the pod's node",
    ),
    Rule(
        "node_rejected",
        Reason.NODE_DISRUPTION,
        Outcome.RELAUNCH,
        None,
        _disruption_status,
        "the kubelet evicted, shut down or refused the pod (Evicted, NodeShutdown, OutOf*, admission)",
    ),
    Rule(
        "container_status_unknown",
        Reason.NODE_LOST,
        Outcome.RELAUNCH,
        None,
        _container_status_unknown,
        "the kubelet lost the container (exit 137 here is not an OOM kill)",
    ),
    Rule(
        "deadline_exceeded",
        Reason.DEADLINE_EXCEEDED,
        Outcome.RETRY,
        None,
        _deadline_exceeded,
        "activeDeadlineSeconds ended the pod",
    ),
    Rule(
        "deleted_while_running",
        Reason.DELETED_EXTERNALLY,
        Outcome.RETRY,
        None,
        _deleted_while_running,
        "deletionTimestamp on an unfinished pod without DisruptionTarget: someone deleted it",
    ),
    Rule(
        "oom_killed",
        Reason.CONTAINER_OOM,
        Outcome.RETRY,
        None,
        _oom_killed,
        "only the reason OOMKilled proves an out-of-memory kill",
    ),
    Rule(
        "start_failure",
        Reason.CONTAINER_CREATE_ERROR,
        Outcome.RETRY,
        None,
        _start_failure,
        "the runtime could not start the command (StartError, ContainerCannotRun)",
    ),
    Rule(
        "exit_code",
        Reason.CONTAINER_EXIT_CODE,
        Outcome.RETRY,
        None,
        _exit_code,
        "a container that will not be restarted exited non-zero; exit-code lists may skip or fail it",
    ),
    Rule(
        "main_containers_done",
        Reason.SUCCEEDED,
        Outcome.SUCCEED,
        None,
        _main_containers_done,
        "under restartPolicy Never the work is done once every main container exited 0, even while "
        "the XCom sidecar waits to be read",
    ),
    Rule(
        "pod_failed",
        Reason.POD_FAILED,
        Outcome.RETRY,
        None,
        _pod_failed,
        "phase Failed with no more specific explanation",
    ),
    Rule(
        "invalid_image_name",
        Reason.IMAGE_INVALID_NAME,
        Outcome.FAIL,
        None,
        _invalid_image_name,
        "a malformed image reference never becomes valid",
    ),
    Rule(
        "image_never_pull",
        Reason.IMAGE_NEVER_PULL,
        Outcome.FAIL,
        None,
        _image_never_pull,
        "imagePullPolicy Never with a missing image is a spec error",
    ),
    Rule(
        "image_not_found",
        Reason.IMAGE_NOT_FOUND,
        Outcome.RETRY,
        90.0,
        _pull(Reason.IMAGE_NOT_FOUND),
        "confirm across observations: a just-pushed tag or a registry hiccup can look missing",
    ),
    Rule(
        "image_unauthorized",
        Reason.IMAGE_UNAUTHORIZED,
        Outcome.RETRY,
        120.0,
        _pull(Reason.IMAGE_UNAUTHORIZED),
        "pull secrets may still be propagating, and throttled registries also answer denied",
    ),
    Rule(
        "image_rate_limited",
        Reason.IMAGE_RATE_LIMITED,
        Outcome.RETRY,
        900.0,
        _pull(Reason.IMAGE_RATE_LIMITED),
        "the kubelet's back-off (up to 300 s between pulls) usually rides out a rate limit",
    ),
    Rule(
        "image_registry_unavailable",
        Reason.IMAGE_REGISTRY_UNAVAILABLE,
        Outcome.RETRY,
        900.0,
        _pull(Reason.IMAGE_REGISTRY_UNAVAILABLE),
        "registry outages and network errors are usually transient",
    ),
    Rule(
        "image_pull_backoff",
        Reason.IMAGE_PULL_BACKOFF,
        Outcome.RETRY,
        300.0,
        _pull_backoff,
        "only the generic back-off text and no earlier cause: give the kubelet a few pulls",
    ),
    Rule(
        "missing_secret",
        Reason.CONFIG_MISSING_SECRET,
        Outcome.RETRY,
        60.0,
        _config("secret"),
        "'failed to sync secret cache' is transient and a Secret may be created just after the pod",
    ),
    Rule(
        "missing_configmap",
        Reason.CONFIG_MISSING_CONFIGMAP,
        Outcome.RETRY,
        60.0,
        _config("configmap"),
        "as for Secrets: the ConfigMap may be created just after the pod",
    ),
    Rule(
        "config_error",
        Reason.CONFIG_ERROR,
        Outcome.RETRY,
        60.0,
        _config(None),
        "other CreateContainerConfigError (runAsNonRoot with a root image, a bad subPath): grace, then retry",
    ),
    Rule(
        "crash_loop_oom",
        Reason.CONTAINER_OOM,
        Outcome.RETRY,
        180.0,
        _crash_loop(oom=True),
        "a restarting container that keeps being OOM-killed",
    ),
    Rule(
        "crash_loop",
        Reason.CONTAINER_EXIT_CODE,
        Outcome.RETRY,
        180.0,
        _crash_loop(oom=False),
        "a restarting container that keeps failing; give it a few restarts",
    ),
    Rule(
        "container_error",
        Reason.CONTAINER_CREATE_ERROR,
        Outcome.RETRY,
        180.0,
        _container_error,
        "CreateContainerError, RunContainerError, *HookError and any other waiting error may be transient",
    ),
    Rule(
        "running",
        Reason.RUNNING,
        Outcome.WAIT,
        "running_recheck",
        _running,
        "a running pod is healthy; the deadline is only a safety re-check",
    ),
    Rule(
        "phase_unknown",
        Reason.NODE_LOST,
        Outcome.RELAUNCH,
        300.0,
        _phase_unknown,
        "phase Unknown means the node stopped reporting; give it 5 minutes to come back",
    ),
    Rule(
        "unschedulable",
        Reason.SCHEDULE_TIMEOUT,
        Outcome.RETRY,
        "schedule_timeout",
        _unschedulable,
        "capacity may appear (autoscaler, finishing pods); a fresh scale-up extends the wait",
        waiting_reason=Reason.UNSCHEDULABLE,
        extension="scale_up_timeout",
    ),
    Rule(
        "volume_mount_failed",
        Reason.VOLUME_MOUNT_FAILED,
        Outcome.RETRY,
        300.0,
        _pending_with_events(
            ("FailedMount", "FailedAttachVolume"), Reason.VOLUME_MOUNT_FAILED, "cannot mount a volume"
        ),
        "attach and mount errors often clear when a volume detaches from its previous node",
    ),
    Rule(
        "sandbox_failed",
        Reason.CONTAINER_CREATE_ERROR,
        Outcome.RETRY,
        180.0,
        _pending_with_events(
            ("FailedCreatePodSandBox",),
            Reason.CONTAINER_CREATE_ERROR,
            "cannot get a pod sandbox (network or runtime trouble on the node)",
        ),
        "CNI and runtime hiccups usually clear; a new pod may land on a healthier node",
    ),
    Rule(
        "starting",
        Reason.STARTUP_TIMEOUT,
        Outcome.RETRY,
        "startup_timeout",
        _pending,
        "pending with no known problem is normal, but not forever",
        waiting_reason=Reason.STARTING,
    ),
    Rule(
        "unrecognised",
        Reason.UNKNOWN,
        Outcome.RETRY,
        "startup_timeout",
        _anything,
        "catch-all: an unexpected state gets the startup timeout, never an endless wait",
    ),
)


@cache
def graceable_reasons() -> frozenset[Reason]:
    """Reason codes whose grace a ``FailurePolicy`` may set."""
    return frozenset(r.reason for r in RULES if r.grace is not None and r.outcome is not Outcome.WAIT)


@cache
def overridable_reasons() -> frozenset[Reason]:
    """Reason codes whose outcome a ``FailurePolicy`` may set."""
    return frozenset(r.reason for r in RULES if r.outcome not in (Outcome.WAIT, Outcome.SUCCEED))


def rule_named(name: str) -> Rule:
    for rule in RULES:
        if rule.name == name:
            return rule
    raise KeyError(f"no rule named {name!r}; rules: {', '.join(r.name for r in RULES)}")
