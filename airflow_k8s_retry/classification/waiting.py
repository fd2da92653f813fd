"""The matchers of the rule table for pods whose containers have not run to an end: a container
cannot start (image, configuration, crash loop, runtime errors), the pod runs or its node stopped
reporting, the pod is not placed or not started yet, and the catch-all. They continue
``matchers.py`` in the order of the table in ``rules.py``.
"""

from __future__ import annotations

import re
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
    EventView,
    Observation,
)
from airflow_k8s_retry.classification.registry_messages import pull_cause

# --- the kubelet has not caught up, or a container cannot start -----------------------------------


def _behind(obs: Observation, reason: Reason) -> Fact | None:
    seen, wanted = obs.observed_generation, obs.generation
    if seen is None or wanted is None or seen >= wanted:
        return None
    detail = f"status.observedGeneration {seen}, metadata.generation {wanted}"
    evidence = (cite(reason, None, detail),)
    return Fact(Sighting.BEHIND, keys.status_behind(wanted), obs.title, detail, evidence)


def status_behind_spec_while_running(obs: Observation) -> Fact | None:
    """the pod runs (phase `Running` or a container running) and `status.observedGeneration` is
    behind `metadata.generation` (an in-place resize the kubelet has not reported on yet)"""
    return _behind(obs, Reason.STATUS_BEHIND_SPEC) if obs.running else None


def status_behind_spec(obs: Observation) -> Fact | None:
    """`status.observedGeneration` present and behind `metadata.generation` on a pod whose work does
    not run (the kubelet has not yet acted on a spec change, e.g. a new image); absent on clusters
    before 1.33: never matches"""
    return None if obs.running else _behind(obs, Reason.NODE_LOST)


def _waiting(obs: Observation, reason: Reason, waiting: Iterable[str]) -> Fact | None:
    wanted = frozenset(waiting)
    container = first_matching(obs, lambda c: c.waiting_reason in wanted)
    return None if container is None else _waiting_fact(reason, container)


def _waiting_fact(reason: Reason, container: ContainerView) -> Fact:
    """The fact that ``container`` waits for ``reason``, citing its waiting reason and message."""
    detail = join(container.waiting_reason, container.waiting_message)
    return Fact(
        Sighting.WAITING,
        keys.of_container(reason, container.name),
        container.label,
        detail,
        (cite(reason, container, detail),),
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
_pulled_policy = _pull(Reason.IMAGE_POLICY_REFUSED, "")


def image_policy_refused(obs: Observation) -> Fact | None:
    """waiting `SignatureValidationFailed`, or a pull error (status or Events) or `CreateContainerError`
    saying the node's image policy refused the image: "SignatureValidationFailed: Source image
    rejected: A signature was required, but no signature exists" (CRI-O), "Source image rejected:
    ..." (CRI-O before it used that code), "image verifier bindir blocked pull of ..." (containerd 2)"""
    # The kubelet reports this waiting reason only when the runtime said so (ErrSignatureValidationFailed).
    said = _waiting(obs, Reason.IMAGE_POLICY_REFUSED, ["SignatureValidationFailed"])
    pulled = said or _pulled_policy(obs)
    if pulled is not None:
        return pulled
    # CRI-O also checks the policy when it creates the container (an image pulled before it changed).
    container = first_matching(
        obs,
        lambda c: (
            c.waiting_reason == "CreateContainerError"
            and pull_cause(c.waiting_message) is Reason.IMAGE_POLICY_REFUSED
        ),
    )
    return None if container is None else _waiting_fact(Reason.IMAGE_POLICY_REFUSED, container)


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


#: The kubelet's ``verifyRunAsNonRoot`` (pkg/kubelet/kuberuntime/security_context_others.go and
#: _windows.go): the container's effective security context against the user its image config names.
#: Both are the same on every node and at every later time, so no wait or retry changes the answer.
_NON_ROOT_CONFLICT = re.compile(
    r"container has runAsNonRoot and image (?:will run as root|has non-numeric user|has an invalid user id)"
    r"|runAsUser breaks non-root policy|will be regarded as root identity and will break non-root policy",
)


def config_spec_conflict(obs: Observation) -> Fact | None:
    """`CreateContainerConfigError` from the kubelet's non-root check: "container has runAsNonRoot and
    image will run as root", "... image has non-numeric user (nobody), cannot verify user is non-root",
    "... image has an invalid user id", "container's runAsUser breaks non-root policy"
    """
    container = first_matching(
        obs,
        lambda c: (
            c.waiting_reason == "CreateContainerConfigError"
            and _NON_ROOT_CONFLICT.search(c.waiting_message) is not None
        ),
    )
    return None if container is None else _waiting_fact(Reason.CONFIG_SPEC_CONFLICT, container)


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
    'any other `CreateContainerConfigError` (e.g. "services have not yet been read at least once, cannot '
    'construct envvars", "failed to prepare subPath for volumeMount")',
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
    return None if container is None else _waiting_fact(Reason.CONTAINER_CREATE_ERROR, container)


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


def scheduling_gated(obs: Observation) -> Fact | None:
    """`spec.schedulingGates` not empty (an admission queue such as Kueue's `kueue.x-k8s.io/admission`
    holds the pod; the API server sets `PodScheduled=False` with reason `SchedulingGated`)"""
    if not obs.exists or not obs.scheduling_gates or obs.phase not in ("Pending", ""):
        return None
    gates = ", ".join(obs.scheduling_gates)
    cond = obs.condition("PodScheduled")
    said = join("PodScheduled=False", cond.reason, cond.message) if cond is not None else ""
    evidence = (cite(Reason.SCHEDULE_GATED, None, join(f"spec.schedulingGates [{gates}]", said)),)
    return Fact(Sighting.GATED, keys.SCHEDULING_GATED, obs.title, gates, evidence)


#: Events that say a node is being provisioned for the pod: cluster-autoscaler's scale-up, and
#: Karpenter's (and EKS Auto Mode's) nomination to a NodeClaim it launches or a node that just joined.
_PROVISIONING = frozenset({"TriggeredScaleUp", "Nominated"})
#: Events that say no node is coming: cluster-autoscaler found no node group to grow, or (GKE) its
#: scale-up failed; Karpenter could not fit the pod to any NodePool ("Failed to schedule pod, ...").
_NOT_PROVISIONING = frozenset({"NotTriggerScaleUp", "FailedScaleUp"})
_KARPENTER_REFUSAL = "Failed to schedule pod, "


def _provisioner_events(obs: Observation) -> tuple[list[EventView], list[EventView]]:
    """The Events promising a node for the pod, and those saying none is coming, oldest first."""
    promised = [
        e
        for e in obs.events_named(*_PROVISIONING)
        if e.reason != "Nominated" or "should schedule on" in e.message
    ]
    refused = [*obs.events_named(*_NOT_PROVISIONING)]
    refused += [e for e in obs.events_named("FailedScheduling") if e.message.startswith(_KARPENTER_REFUSAL)]
    return promised, sorted(refused, key=lambda e: e.stamp)


def unschedulable(obs: Observation) -> Fact | None:
    """`PodScheduled=False` (`Unschedulable`); a node being provisioned for it (`TriggeredScaleUp`,
    Karpenter's `Nominated` "Pod should schedule on: nodeclaim/...") extends the wait until an Event
    says provisioning failed (`NotTriggerScaleUp`, `FailedScaleUp`, Karpenter's "Failed to schedule
    pod, ...")"""
    cond = obs.condition("PodScheduled")
    if cond is None or cond.status != "False":
        return None
    scheduler = [
        e for e in obs.events_named("FailedScheduling") if not e.message.startswith(_KARPENTER_REFUSAL)
    ]
    detail = cond.message or (scheduler[-1].message if scheduler else "") or cond.reason or "no reason given"
    evidence = [cite(Reason.UNSCHEDULABLE, None, join("PodScheduled=False", cond.reason, cond.message))]
    promised, refused = _provisioner_events(obs)
    # A refusal newer than a promise ends the extension: only promises made after it still count.
    last_refusal = refused[-1].stamp if refused else ""
    extending = [e for e in promised if e.stamp > last_refusal]
    latest = max((*promised, *refused), key=lambda e: e.stamp, default=None)
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
        extension_keys=tuple(keys.scale_up(e.identity) for e in extending),
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
