"""The sentences of verdict messages, one formatter per reason code.

Matchers (``matchers.py``) return facts; this module words them for a person. Where several rules
share a reason code, the fact's ``sighting`` picks the sentence. The classifier adds what the
policy decides (the grace left, the relaunch budget, exit-code lists) after this sentence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from airflow_k8s_retry.classification.matchers import Fact, Sighting, exit_detail
from airflow_k8s_retry.classification.model import Reason
from airflow_k8s_retry.classification.observation import Termination

Formatter = Callable[[Fact], str]


def _gone(f: Fact) -> str:
    return f"the pod no longer exists, and before it vanished the cluster {f.detail}"


def _deleted(f: Fact) -> str:
    if f.sighting is Sighting.GONE:
        return (
            "the pod no longer exists: it was deleted outside this task (by a person, a controller "
            "or a namespace deletion) before it finished"
        )
    return (
        f"{f.subject} is being deleted (deletionTimestamp is set) before it finished, "
        "and not by the cluster's disruption handling"
    )


def _succeeded(f: Fact) -> str:
    if f.sighting is Sighting.HELPERS_LEFT:
        return f"every main container of {f.subject} exited 0 ({f.detail} still running)"
    if f.sighting is Sighting.BASE_DONE:
        base = f"the base container {f.container!r} of {f.subject}"
        return f"{base} exited 0; its sidecars do not decide ({f.detail})"
    if f.sighting is Sighting.NATIVE_SIDECARS:
        return f"every main container of {f.subject} exited 0; its native sidecars do not decide ({f.detail})"
    return f"{f.subject} succeeded"


def _disruption(f: Fact) -> str:
    if f.sighting is Sighting.GONE_AFTER:
        return _gone(f)
    if f.sighting is Sighting.CONDITION:
        return f"{f.subject} is being disrupted by the cluster ({f.detail})"
    if f.sighting is Sighting.ADMISSION:
        return (
            f"the node's kubelet refused {f.subject} at admission ({f.detail}); none of the task's code ran"
        )
    return f"the node rejected or removed {f.subject} ({f.detail})"


def _node_lost(f: Fact) -> str:
    if f.sighting is Sighting.GONE_AFTER:
        return _gone(f)
    if f.sighting is Sighting.LOST:
        return (
            f"the kubelet lost track of {f.subject} ({f.detail}); its exit code "
            f"{f.exit_code} does not mean it ran out of memory"
        )
    if f.sighting is Sighting.PHASE:
        return f"{f.subject} is in phase Unknown ({f.detail})"
    if f.sighting is Sighting.BEHIND:
        return f"the node's kubelet has not caught up with a change to the spec of {f.subject} ({f.detail})"
    return f"{f.subject} lost its node ({f.detail})"


def _oom(f: Fact) -> str:
    if f.sighting is Sighting.LOOP:
        limit = f.memory_limit or "not set"
        return f"{f.subject} keeps running out of memory (memory limit {limit}); last run: {f.detail}"
    limit = f"memory limit {f.memory_limit}" if f.memory_limit else "no memory limit set"
    return (
        f"{f.subject} was killed for running out of memory ({limit}, exit code {f.exit_code}); "
        "raise its memory limit or lower its usage"
    )


def _exit_code(f: Fact) -> str:
    if f.sighting is Sighting.LOOP:
        return f"{f.subject} keeps crashing; last run: {f.detail}"
    text = f"{f.subject} failed with {exit_detail(Termination(f.termination_reason, '', f.exit_code))}"
    if f.exit_code == 137 and f.termination_reason != "OOMKilled":
        text += " (killed by a signal; not an out-of-memory kill, the reason does not say OOMKilled)"
    if f.termination_message:
        text += f": {f.termination_message[:500]}"
    return text


def _create_error(f: Fact) -> str:
    if f.sighting is Sighting.FINISHED:
        return f"{f.subject} could not be started ({f.detail})"
    if f.sighting is Sighting.EVENTS:
        return f"{f.subject} cannot get a pod sandbox (network or runtime trouble on the node): {f.detail}"
    return f"{f.subject} cannot be created or started ({f.detail})"


_PULL_TEXT: Mapping[Reason, str] = {
    Reason.IMAGE_NOT_FOUND: "the registry says the image does not exist (check the name and tag; Docker Hub "
    "also says this for a private repository pulled without credentials)",
    Reason.IMAGE_UNAUTHORIZED: "the registry refused access to the image (check imagePullSecrets and their "
    "permissions)",
    Reason.IMAGE_RATE_LIMITED: "the registry is rate-limiting pulls",
    Reason.IMAGE_REGISTRY_UNAVAILABLE: "the registry could not be reached or failed",
    Reason.IMAGE_TLS_ERROR: "the connection to the registry failed its TLS check (an untrusted, expired or "
    "mismatched certificate, or a registry that speaks plain HTTP): a registry or node configuration problem",
    Reason.IMAGE_WRONG_PLATFORM: "the image has no variant for this node's OS and architecture; a node of "
    "the same architecture cannot run it (publish the image for this platform, or pin kubernetes.io/arch)",
    Reason.IMAGE_SHORT_NAME: "the runtime (CRI-O) refuses the unqualified image name under its short-name "
    "policy; name the registry in the image, e.g. docker.io/library/...",
    Reason.IMAGE_POLICY_REFUSED: "the node's image policy refuses it (a signature it requires is missing or "
    "does not verify); every node with the same policy refuses it alike",
}


def _pull(reason: Reason) -> Formatter:
    def word(f: Fact) -> str:
        text = f"{f.subject} cannot pull {f.image or 'its image'}: {_PULL_TEXT[reason]}"
        if f.current:  # the status decayed to the generic back-off text
            return f"{text}; current status: {f.current}; strongest cause seen earlier: {f.detail}"
        return f"{text} ({f.detail})"

    return word


def _waiting(what: str) -> Formatter:
    return lambda f: f"{f.subject}: {what} ({f.detail})"


#: What the newest provisioning Event says, by its reason (``waiting._provisioner_events``).
_PROVISIONER_SAYS = {
    "TriggeredScaleUp": "cluster-autoscaler is adding a node",
    "NotTriggerScaleUp": "cluster-autoscaler will not add a node",
    "FailedScaleUp": "cluster-autoscaler's scale-up failed",
    "Nominated": "a node is being provisioned for it (Karpenter)",
    "FailedScheduling": "Karpenter will not provision a node",
}


def _unschedulable(f: Fact) -> str:
    text = f"{f.subject} cannot be scheduled: {f.detail}"
    if f.related is not None:
        reason, message = f.related
        text += f"; {_PROVISIONER_SAYS.get(reason, reason)} ({message})"
    return text


def _wrong_platform(f: Fact) -> str:
    if f.sighting is Sighting.EXEC_FORMAT:
        image = f" {f.image}" if f.image else ""
        return (
            f"{f.subject} cannot execute its entrypoint ({f.detail}): the image{image} is built for another "
            "architecture than this node's, or its entrypoint is not a binary (a script without a #! line, "
            "a truncated file)"
        )
    return _pull(Reason.IMAGE_WRONG_PLATFORM)(f)


FORMATTERS: Mapping[Reason, Formatter] = {
    Reason.SUCCEEDED: _succeeded,
    Reason.RUNNING: lambda f: f"{f.subject} is running",
    Reason.STATUS_BEHIND_SPEC: lambda f: (
        f"{f.subject} runs, and its node's kubelet has not yet reported on a change to its spec "
        f"({f.detail}); the work goes on, and only evidence that the node or container is gone would end it"
    ),
    Reason.RESIZE_INFEASIBLE: lambda f: (
        f"{f.subject} is running with its current resources; the node refused its in-place resize "
        f"as infeasible ({f.detail})"
    ),
    Reason.STARTUP_TIMEOUT: lambda f: f"{f.subject} has not started yet",
    Reason.SCHEDULE_TIMEOUT: _unschedulable,
    Reason.SCHEDULE_QUEUE_TIMEOUT: lambda f: (
        f"{f.subject} waits behind scheduling gates ({f.detail}): an admission queue holds it, and the "
        "scheduler has not tried to place it yet"
    ),
    Reason.IMAGE_INVALID_NAME: _waiting("the image reference is not valid"),
    Reason.IMAGE_NEVER_PULL: _waiting("imagePullPolicy is Never and the image is not on the node"),
    **{reason: _pull(reason) for reason in _PULL_TEXT},
    Reason.IMAGE_WRONG_PLATFORM: _wrong_platform,
    Reason.IMAGE_PULL_BACKOFF: lambda f: (
        f"{f.subject} cannot pull {f.image or 'its image'} and no cause is known yet ({f.detail})"
    ),
    Reason.CONFIG_MISSING_SECRET: _waiting(
        "a Secret or a key in it is missing (or the secret cache is still syncing)"
    ),
    Reason.CONFIG_MISSING_CONFIGMAP: _waiting(
        "a ConfigMap or a key in it is missing (or the configmap cache is still syncing)"
    ),
    Reason.CONFIG_ERROR: _waiting("its configuration is invalid"),
    Reason.CONFIG_SPEC_CONFLICT: _waiting(
        "its security settings contradict its image; the kubelet refuses it on every node"
    ),
    Reason.CONTAINER_CREATE_ERROR: _create_error,
    Reason.VOLUME_MOUNT_FAILED: lambda f: f"{f.subject} cannot mount a volume: {f.detail}",
    Reason.NODE_DISRUPTION: _disruption,
    Reason.NODE_LOST: _node_lost,
    Reason.CONTAINER_OOM: _oom,
    Reason.CONTAINER_EXIT_CODE: _exit_code,
    Reason.CONTAINER_STORAGE_LIMIT: lambda f: (
        f"{f.subject} was evicted for exceeding its own ephemeral-storage limit ({f.detail}); "
        "a new pod would meet the same limit, so this costs a try: raise the limit or write less"
    ),
    Reason.DEADLINE_EXCEEDED: lambda f: f"{f.subject} ran past its activeDeadlineSeconds ({f.detail})",
    Reason.DELETED_EXTERNALLY: _deleted,
    Reason.POD_FAILED: lambda f: f"{f.subject} failed ({f.detail})",
    Reason.UNKNOWN: lambda f: f"{f.subject} is in a state no rule recognises ({f.detail})",
}


def describe(reason: Reason, fact: Fact) -> str:
    """The sentence for ``fact``, found by a rule that reports ``reason``."""
    return FORMATTERS[reason](fact)
