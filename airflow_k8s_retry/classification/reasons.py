"""What each reason code means and what to do about it: one line each, kept with the rules.

``hint_for(reason)`` is the public way to get the fix hint of a verdict (``Verdict.hint`` calls it).
It is what a failure report, a UI page or an alert should show next to the reason code: the first
thing to check or change. ``meaning`` is the reason code's definition, as listed in
``docs/classification.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from airflow_k8s_retry.classification.codes import Reason


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


def hint_for(reason: Reason | str) -> str:
    """The one-line fix hint of a reason code: what the user should do.

    Example:
        >>> hint_for("image.short_name")
        'use a fully qualified image name, e.g. docker.io/library/python:3.12'
    """
    return REASONS[Reason(reason)].hint


def meaning_of(reason: Reason | str) -> str:
    """What a reason code means, in one line."""
    return REASONS[Reason(reason)].meaning
