"""The vocabulary of the classifier: outcomes, reason codes (with what each means and what to do
about it), evidence, per-pod history and verdicts.

The codes' values are public (XCom, trigger events, pod annotations, metrics labels): never rename
one. :func:`hint_for` is the one way to get the fix hint of a reason code (a verdict's, an XCom's):
what a failure report, a UI page or an alert shows next to the reason code, the first thing to
check or change; :func:`meaning_of` is the code's definition, as listed in
``docs/classification.md``. Everything else here is a frozen value with a named conversion to and
from JSON-safe payloads, because verdicts and histories cross process boundaries (trigger kwargs,
trigger events, pod annotations).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any

__all__ = [
    "FAILURE_OUTCOMES",
    "REASONS",
    "Evidence",
    "History",
    "Outcome",
    "Reason",
    "ReasonInfo",
    "Verdict",
    "hint_for",
    "meaning_of",
]


class Outcome(StrEnum):
    """What the caller should do with a pod."""

    WAIT = "wait"
    SUCCEED = "succeed"
    RETRY = "retry"
    FAIL = "fail"
    RELAUNCH = "relaunch"
    SKIP = "skip"

    @property
    def is_final(self) -> bool:
        """True when the pod's business is over and it can be cleaned up."""
        return self is not Outcome.WAIT


FAILURE_OUTCOMES = frozenset({Outcome.RETRY, Outcome.FAIL})


class Reason(StrEnum):
    """Stable reason codes. Values are part of the public contract: never rename one."""

    SUCCEEDED = "pod.succeeded"
    RUNNING = "pod.running"
    RESIZE_INFEASIBLE = "pod.resize_infeasible"
    STATUS_BEHIND_SPEC = "pod.status_behind_spec"
    STARTING = "pod.starting"
    STARTUP_TIMEOUT = "startup.timeout"
    UNSCHEDULABLE = "schedule.unschedulable"
    SCHEDULE_TIMEOUT = "schedule.timeout"
    SCHEDULE_GATED = "schedule.gated"
    SCHEDULE_QUEUE_TIMEOUT = "schedule.queue_timeout"
    IMAGE_INVALID_NAME = "image.invalid_name"
    IMAGE_NEVER_PULL = "image.never_pull"
    IMAGE_NOT_FOUND = "image.not_found"
    IMAGE_UNAUTHORIZED = "image.unauthorized"
    IMAGE_RATE_LIMITED = "image.rate_limited"
    IMAGE_REGISTRY_UNAVAILABLE = "image.registry_unavailable"
    IMAGE_TLS_ERROR = "image.tls_error"
    IMAGE_WRONG_PLATFORM = "image.wrong_platform"
    IMAGE_SHORT_NAME = "image.short_name"
    IMAGE_POLICY_REFUSED = "image.policy_refused"
    IMAGE_PULL_BACKOFF = "image.pull_backoff"
    CONFIG_MISSING_SECRET = "config.missing_secret"
    CONFIG_MISSING_CONFIGMAP = "config.missing_configmap"
    CONFIG_ERROR = "config.error"
    CONFIG_SPEC_CONFLICT = "config.spec_conflict"
    CONTAINER_CREATE_ERROR = "container.create_error"
    VOLUME_MOUNT_FAILED = "volume.mount_failed"
    NODE_DISRUPTION = "node.disruption"
    NODE_LOST = "node.lost"
    CONTAINER_OOM = "container.oom"
    CONTAINER_EXIT_CODE = "container.exit_code"
    CONTAINER_STORAGE_LIMIT = "container.storage_limit"
    DEADLINE_EXCEEDED = "pod.deadline_exceeded"
    DELETED_EXTERNALLY = "pod.deleted_externally"
    POD_FAILED = "pod.failed"
    EXECUTION_TIMEOUT = "execution.timeout"
    API_REJECTED = "api.rejected"
    API_QUOTA_EXCEEDED = "api.quota_exceeded"
    API_UNAUTHORIZED = "api.unauthorized"
    API_CONFLICT = "api.conflict"
    API_UNAVAILABLE = "api.unavailable"
    API_TLS_ERROR = "api.tls_error"
    UNKNOWN = "pod.unknown"


@dataclass(frozen=True)
class ReasonInfo:
    """The documentation of one reason code."""

    meaning: str
    hint: str


# fmt: off
REASONS: Mapping[Reason, ReasonInfo] = {
    Reason.SUCCEEDED:                  ReasonInfo("the pod succeeded", "nothing to do"),
    Reason.RUNNING:                    ReasonInfo("the pod runs (wait, re-check deadline)", "nothing to do; the pod is re-checked until it finishes"),
    Reason.RESIZE_INFEASIBLE:          ReasonInfo("the pod runs, but the node refused an in-place resize as infeasible (wait, re-check deadline)", "the pod keeps its current resources; resize within what one node can hold, or give the next try the new size"),
    Reason.STATUS_BEHIND_SPEC:         ReasonInfo("the kubelet has not yet reported on the pod's latest spec: `observedGeneration` < `generation` (wait)", "nothing to do if it clears in seconds; if it lasts, check the node's kubelet (kubectl describe node)"),
    Reason.STARTING:                   ReasonInfo("the pod is pending with no known problem yet (wait)", "nothing to do yet; if it stays pending, look at the pod's Events"),
    Reason.STARTUP_TIMEOUT:            ReasonInfo("pending longer than `startup_timeout`", "read the pod's Events (kubectl describe pod) for what it waited on, or raise startup_timeout"),
    Reason.UNSCHEDULABLE:              ReasonInfo("the scheduler cannot place the pod yet (wait)", "check the pod's requests, nodeSelector, affinity and tolerations against the nodes"),
    Reason.SCHEDULE_TIMEOUT:           ReasonInfo("unschedulable longer than `schedule_timeout` (plus the time a node being provisioned for it may take)", "lower the pod's requests, relax its nodeSelector/affinity/tolerations, or add capacity"),
    Reason.SCHEDULE_GATED:             ReasonInfo("the pod waits behind scheduling gates (`spec.schedulingGates`, e.g. Kueue's admission queue) and has not been considered for scheduling yet (wait)", "nothing to do while the queue works; if it lasts, look at the queue (kubectl get workloads for Kueue) or whoever owns the gate"),
    Reason.SCHEDULE_QUEUE_TIMEOUT:     ReasonInfo("held by scheduling gates longer than `queue_timeout` (the task's `execution_timeout` ends the wait first when it is set)", "check why the queue never admitted the pod (Kueue: the Workload's QuotaReserved/Admitted message), or raise queue_timeout"),
    Reason.IMAGE_INVALID_NAME:         ReasonInfo("the image reference cannot be parsed", "fix the image reference: lowercase repository, registry/repository:tag or @sha256:digest"),
    Reason.IMAGE_NEVER_PULL:           ReasonInfo("`imagePullPolicy: Never` and the image is not on the node", "preload the image on every node, or set imagePullPolicy to IfNotPresent"),
    Reason.IMAGE_NOT_FOUND:            ReasonInfo("the registry says the image or tag does not exist", "check the image name and tag (and, for Docker Hub, the pull secret of a private repository)"),
    Reason.IMAGE_UNAUTHORIZED:         ReasonInfo("the registry refused the credentials (or had none)", "check imagePullSecrets: the secret exists in the namespace, is not expired and may read this repository"),
    Reason.IMAGE_RATE_LIMITED:         ReasonInfo("the registry, or the kubelet's own pull QPS, is throttling pulls", "authenticate pulls, use a registry mirror or pull-through cache, or pull less often"),
    Reason.IMAGE_REGISTRY_UNAVAILABLE: ReasonInfo("the registry failed (5xx), could not be reached, or the transfer was cut off", "check the registry's status and the node's network, DNS and proxy to the registry"),
    Reason.IMAGE_TLS_ERROR:            ReasonInfo("the node does not trust the registry's certificate, or TLS is misconfigured", "install the registry's CA on the nodes (or renew its expired certificate); an HTTP-only registry needs a runtime mirror entry"),
    Reason.IMAGE_WRONG_PLATFORM:       ReasonInfo("the image has no variant for the node's OS/architecture, or its entrypoint is not a binary the node can run (`exec format error`)", "publish the image for this platform, or pin the pod with nodeSelector kubernetes.io/arch"),
    Reason.IMAGE_SHORT_NAME:           ReasonInfo("CRI-O refused an unqualified image name (short-name policy)", "use a fully qualified image name, e.g. docker.io/library/python:3.12"),
    Reason.IMAGE_POLICY_REFUSED:       ReasonInfo("the node's image policy refused the image: a signature it requires is missing or does not verify (CRI-O `SignatureValidationFailed`, containerd's image verifier)", "sign the image (or fix its signature) so the node's policy accepts it, or ask the cluster's admins which registries and signers the policy trusts"),
    Reason.IMAGE_PULL_BACKOFF:         ReasonInfo("pulls fail and no cause was ever reported", "run kubectl describe pod for the pull error, and check the image name and registry access"),
    Reason.CONFIG_MISSING_SECRET:      ReasonInfo("a Secret, or a key in it, is missing", "create the Secret (and key) the pod references in its namespace, or fix the reference"),
    Reason.CONFIG_MISSING_CONFIGMAP:   ReasonInfo("a ConfigMap, or a key in it, is missing", "create the ConfigMap (and key) the pod references in its namespace, or fix the reference"),
    Reason.CONFIG_ERROR:               ReasonInfo("another container configuration error (one that may clear: a cache still syncing, a file or subPath another container creates)", "read the CreateContainerConfigError message: a bad subPath or env reference"),
    Reason.CONFIG_SPEC_CONFLICT:       ReasonInfo("the container's security settings contradict its image, so the kubelet refuses it on every node (`runAsNonRoot` with a root, non-numeric or invalid image user, or `runAsUser: 0`)", "give the container a non-root numeric user (securityContext.runAsUser, or a numeric USER in the image), or drop runAsNonRoot"),
    Reason.CONTAINER_CREATE_ERROR:     ReasonInfo("the runtime could not create or start the container, or its sandbox", "read the runtime's message: a wrong command or entrypoint, a failing hook, or CNI/runtime trouble on the node"),
    Reason.VOLUME_MOUNT_FAILED:        ReasonInfo("a volume cannot be attached or mounted", "check the PVC and its volume (still attached elsewhere? right zone?) and any Secret or ConfigMap volume"),
    Reason.NODE_DISRUPTION:            ReasonInfo("the cluster took the pod away: preemption, eviction, drain, taint, shutdown, admission", "nothing in the task to fix; if it keeps happening, check the node (taints, labels, capacity, drains) and the pod's PriorityClass"),
    Reason.NODE_LOST:                  ReasonInfo("the pod's node or container was lost (phase `Unknown`, `ContainerStatusUnknown`, `NodeLost`)", "check the node's health (kubectl describe node); nothing in the task to fix"),
    Reason.CONTAINER_OOM:              ReasonInfo("a container was killed for exceeding its memory limit", "raise the container's memory limit, or make the task use less memory"),
    Reason.CONTAINER_EXIT_CODE:        ReasonInfo("a container exited non-zero", "read the container's log (kept in the failure report) for the error the task raised"),
    Reason.CONTAINER_STORAGE_LIMIT:    ReasonInfo("the kubelet evicted the pod for exceeding its own ephemeral-storage limit", "raise the ephemeral-storage limit or emptyDir sizeLimit, or write less to local disk"),
    Reason.DEADLINE_EXCEEDED:          ReasonInfo("`activeDeadlineSeconds` ended the pod", "raise activeDeadlineSeconds, or make the task finish sooner"),
    Reason.DELETED_EXTERNALLY:         ReasonInfo("someone else deleted the pod before it finished", "find who deleted the pod (audit log, controllers, namespace cleanup) and stop it"),
    Reason.POD_FAILED:                 ReasonInfo("phase `Failed` without a more specific cause", "read the pod's status message and Events (kubectl describe pod)"),
    Reason.UNKNOWN:                    ReasonInfo("a state no rule recognises", "read the pod's status and Events; report the state if it should have a rule"),
    Reason.EXECUTION_TIMEOUT:          ReasonInfo("the task's `execution_timeout` ended the wait (set by the trigger)", "raise the task's execution_timeout, or make the task finish sooner"),
    Reason.API_REJECTED:               ReasonInfo("the API refused to create the pod: 422 invalid spec, 400, 404 namespace, 403 RBAC / PodSecurity / LimitRange (set by the operator; permanent)", "fix what the API's message names: the pod spec field, the service account's RBAC or the namespace"),
    Reason.API_QUOTA_EXCEEDED:         ReasonInfo("a ResourceQuota is full: 403 `exceeded quota` at create (set by the operator; an Airflow retry)", "wait for the quota to free up, raise the namespace's ResourceQuota, or request less"),
    Reason.API_UNAUTHORIZED:           ReasonInfo("401 at create: an expired or rotating credential (set by the operator; an Airflow retry)", "check the connection's credentials (token, exec plugin) if it keeps happening"),
    Reason.API_CONFLICT:               ReasonInfo("409 at create after the adoption found no pod of this try (set by the operator; an Airflow retry)", "nothing to fix if it is rare; otherwise look for something creating pods with the same names"),
    Reason.API_UNAVAILABLE:            ReasonInfo("429, 5xx or no answer at create, after in-process retries (set by the operator; an Airflow retry)", "check the API server's health and the network path to it"),
    Reason.API_TLS_ERROR:              ReasonInfo("the API server's certificate did not verify against the connection's CA (set by the operator; permanent)", "fix the connection's CA (certificate-authority data in its kubeconfig) or the server's certificate"),
}
# fmt: on


def hint_for(reason: Reason | str) -> str | None:
    """The one-line fix hint of a reason code (a :class:`Reason` or its value): what the user
    should do; ``None`` for a code this version does not know (a newer release wrote it).

    Example:
        >>> hint_for("image.short_name")
        'use a fully qualified image name, e.g. docker.io/library/python:3.12'
        >>> hint_for("no.such_code") is None
        True
    """
    try:
        return REASONS[Reason(reason)].hint or None
    except ValueError:
        return None


def meaning_of(reason: Reason | str) -> str:
    """What a reason code means, in one line."""
    return REASONS[Reason(reason)].meaning


@dataclass(frozen=True)
class Evidence:
    """One thing seen about a pod that supports a verdict (a status field or an Event)."""

    reason: Reason
    source: str  # "status", "event", "api" or "trigger"
    message: str
    container: str | None = None
    seen_at: float = 0.0  # epoch seconds on our clock

    def to_payload(self) -> dict[str, Any]:
        return {**asdict(self), "reason": self.reason.value}

    @classmethod
    def from_payload(cls, data: Mapping[str, Any]) -> Evidence:
        return cls(
            reason=Reason(data["reason"]),
            source=str(data["source"]),
            message=str(data["message"]),
            container=data.get("container"),
            seen_at=float(data.get("seen_at", 0.0)),
        )


@dataclass(frozen=True)
class History:
    """What the classifier remembers about one pod between observations.

    ``first_seen`` maps a signal key (usually a reason code, optionally with a container name) to
    the epoch second it was first observed, so grace timers survive restarts. ``strongest`` is the
    most specific image-pull cause seen so far (statuses and events), so that a message that decays
    to the generic back-off text keeps its meaning.
    """

    first_seen: Mapping[str, float] = field(default_factory=dict)
    strongest: Evidence | None = None

    def seen(self, key: str, now: float) -> History:
        """Return a history where ``key`` is first seen at ``now`` unless it was seen earlier."""
        if key in self.first_seen:
            return self
        return replace(self, first_seen={**self.first_seen, key: now})

    def since(self, key: str) -> float | None:
        return self.first_seen.get(key)

    def to_payload(self) -> dict[str, Any]:
        return {
            "first_seen": dict(sorted(self.first_seen.items())),
            "strongest": self.strongest.to_payload() if self.strongest else None,
        }

    @classmethod
    def from_payload(cls, data: Mapping[str, Any] | None) -> History:
        if not data:
            return cls()
        strongest = data.get("strongest")
        return cls(
            first_seen={str(k): float(v) for k, v in dict(data.get("first_seen") or {}).items()},
            strongest=Evidence.from_payload(strongest) if strongest else None,
        )


@dataclass(frozen=True)
class Verdict:
    """One decision about one pod.

    ``deadline`` (epoch seconds) is set for every ``WAIT``: the moment the verdict changes if
    nothing else happens. ``history`` is the updated memory to pass to the next ``classify`` call.
    """

    outcome: Outcome
    reason: Reason
    message: str
    rule: str
    deadline: float | None = None
    evidence: tuple[Evidence, ...] = ()
    history: History = field(default_factory=History)

    def __post_init__(self) -> None:
        if self.outcome is Outcome.WAIT and (self.deadline is None or not math.isfinite(self.deadline)):
            raise ValueError(f"a wait verdict needs a finite deadline (rule {self.rule})")

    def summary(self) -> dict[str, str]:
        """Outcome, reason code and message: what a task publishes (XCom) about its failure."""
        return {"outcome": self.outcome.value, "reason": self.reason.value, "message": self.message}

    def to_payload(self) -> dict[str, Any]:
        return {
            **self.summary(),
            "rule": self.rule,
            "deadline": self.deadline,
            "evidence": [e.to_payload() for e in self.evidence],
            "history": self.history.to_payload(),
        }

    @classmethod
    def from_payload(cls, data: Mapping[str, Any]) -> Verdict:
        return cls(
            outcome=Outcome(data["outcome"]),
            reason=Reason(data["reason"]),
            message=str(data["message"]),
            rule=str(data["rule"]),
            deadline=None if data.get("deadline") is None else float(data["deadline"]),
            evidence=tuple(Evidence.from_payload(e) for e in data.get("evidence") or ()),
            history=History.from_payload(data.get("history")),
        )
