"""The matchers of the rule table for pods whose containers have not run to an end: a container
cannot start (image, configuration, crash loop, runtime errors), the pod runs or its node stopped
reporting, the pod is not placed or not started yet, and the catch-all. They continue
``matchers.py`` in the order of the table in ``rules.py``.
"""

from __future__ import annotations

from collections.abc import Iterable

from airflow_k8s_retry.classification import keys
from airflow_k8s_retry.classification.matchers import (
    Fact,
    Matcher,
    Sighting,
    cite,
    exit_detail,
    first_matching,
    join,
)
from airflow_k8s_retry.classification.model import Reason
from airflow_k8s_retry.classification.observation import (
    BENIGN_WAITING_REASONS,
    IMAGE_WAITING_REASONS,
    PULL_WAITING_REASONS,
    ContainerView,
    Observation,
)
from airflow_k8s_retry.classification.registry_messages import pull_cause

# --- the kubelet has not caught up, or a container cannot start -----------------------------------


def status_behind_spec(obs: Observation) -> Fact | None:
    """`status.observedGeneration` present and behind `metadata.generation` (the kubelet has not yet
    acted on a spec change, e.g. a resize); absent on clusters before 1.33: never matches"""
    seen, wanted = obs.observed_generation, obs.generation
    if seen is None or wanted is None or seen >= wanted:
        return None
    detail = f"status.observedGeneration {seen}, metadata.generation {wanted}"
    evidence = (cite(Reason.NODE_LOST, None, detail),)
    return Fact(Sighting.BEHIND, keys.status_behind(wanted), obs.title, detail, evidence)


def _waiting(obs: Observation, reason: Reason, waiting: Iterable[str]) -> Fact | None:
    wanted = frozenset(waiting)
    container = first_matching(obs, lambda c: c.waiting_reason in wanted)
    return None if container is None else _waiting_fact(reason, container, image=container.image)


def _waiting_fact(reason: Reason, container: ContainerView, *, image: str = "") -> Fact:
    """The fact that ``container`` waits for ``reason``, citing its waiting reason and message."""
    detail = join(container.waiting_reason, container.waiting_message)
    return Fact(
        Sighting.WAITING,
        keys.of_container(reason, container.name),
        container.label,
        detail,
        (cite(reason, container, detail),),
        container.name,
        image=image,
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
            if container.waiting_reason not in IMAGE_WAITING_REASONS or not obs.blocks(container):
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
        container = first_matching(
            obs, lambda c: c.waiting_reason == "CreateContainerConfigError" and _config_kind(c) == kind
        )
        return None if container is None else _waiting_fact(reason, container)

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
            last = c.last_terminated
            if last is not None and c.restarted_by_rule(last.exit_code):
                return False  # its restart rule asked for this restart: not a failure (KEP-5307)
            last_oom = last is not None and last.reason == "OOMKilled"
            return last_oom == oom

        container = first_matching(obs, looping)
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
            (cite(reason, container, detail),),
            container.name,
            last.exit_code if last is not None else None,
            memory_limit=container.memory_limit,
        )

    match.__name__ = "crash_loop_oom" if oom else "crash_loop"
    match.__doc__ = doc
    return match


crash_loop_oom = _crash_loop(
    True,
    "`CrashLoopBackOff` after an `OOMKilled` run (restartPolicy `OnFailure`/`Always`), not of a native "
    "sidecar beside started main containers, nor after an exit a `restartPolicyRules` rule restarts",
)
crash_loop = _crash_loop(
    False,
    "`CrashLoopBackOff` after any other failed run, with the same exceptions",
)


def container_error(obs: Observation) -> Fact | None:
    """`CreateContainerError`, `RunContainerError`, `PreStartHookError`, `PostStartHookError`,
    `PreCreateHookError`, `ImageInspectError`, `KillContainerError`, `VerifyNonRootError`, any other
    waiting reason"""
    known = BENIGN_WAITING_REASONS | PULL_WAITING_REASONS | {"CrashLoopBackOff"}
    container = first_matching(obs, lambda c: c.waiting_reason not in known)
    if container is None:
        return None
    detail = join(container.waiting_reason, container.waiting_message)
    return Fact(
        Sighting.WAITING,
        keys.of_container(Reason.CONTAINER_CREATE_ERROR, container.name),
        container.label,
        detail,
        (cite(Reason.CONTAINER_CREATE_ERROR, container, detail),),
        container.name,
    )


# --- the pod runs, or its node stopped reporting -------------------------------------------------


def resize_infeasible(obs: Observation) -> Fact | None:
    """phase `Running` and condition `PodResizePending=True` with reason `Infeasible` (an in-place
    resize the node can never hold; the containers keep their current resources)"""
    cond = obs.condition("PodResizePending")
    if obs.phase != "Running" or cond is None or cond.status != "True" or cond.reason != "Infeasible":
        return None
    detail = cond.message or "no message"
    evidence = (cite(Reason.RESIZE_INFEASIBLE, None, f"PodResizePending: Infeasible: {detail}"),)
    return Fact(Sighting.CONDITION, keys.POD_RUNNING, obs.title, detail, evidence)


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
    evidence = (cite(Reason.NODE_LOST, None, f"phase Unknown: {detail}"),)
    return Fact(Sighting.PHASE, keys.NODE_LOST_UNKNOWN_PHASE, obs.title, detail, evidence)


# --- not placed or not started yet ---------------------------------------------------------------


def unschedulable(obs: Observation) -> Fact | None:
    """`PodScheduled=False` (`Unschedulable`, `SchedulingGated`)"""
    cond = obs.condition("PodScheduled")
    if cond is None or cond.status != "False":
        return None
    failed = obs.events_named("FailedScheduling")
    detail = cond.message or (failed[-1].message if failed else "") or cond.reason or "no reason given"
    evidence = [cite(Reason.UNSCHEDULABLE, None, join("PodScheduled=False", cond.reason, cond.message))]
    scale_ups = obs.events_named("TriggeredScaleUp")
    refusals = obs.events_named("NotTriggerScaleUp")
    latest = max((*scale_ups, *refusals), key=lambda e: e.stamp, default=None)
    related = None
    if latest is not None:
        related = (latest.reason, latest.message)
        evidence.append(cite(Reason.UNSCHEDULABLE, None, f"{latest.reason}: {latest.message}", "event"))
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
        evidence = (cite(reason, None, f"{latest.reason}: {latest.message}", "event"),)
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
    evidence = (cite(Reason.UNKNOWN, None, f"phase {phase}"),)
    return Fact(Sighting.PHASE, keys.POD_UNRECOGNISED, obs.title, f"phase {phase}", evidence)
