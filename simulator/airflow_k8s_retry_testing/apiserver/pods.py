"""The pod strategy: validation, defaulting and graceful deletion, as kube-apiserver's pod registry.

Graceful deletion lives here whole, whoever deletes (an API client, the Eviction API, the Job
controller, a scripted disruption, the taint manager): the grace period (the request's, else the
pod's ``terminationGracePeriodSeconds``; 0 for a pod never started or already terminal; at least
1 while finalizers hold it), the ``deletionTimestamp``/``deletionGracePeriodSeconds`` mark, the
removal of a pod deleted without grace, and the rule that a finalizer keeps the object until it is
removed. The API server knows nothing of the node side: the kubelet learns of a deletion from the
store, as a real one from its watch, and does its part (stop the containers, then confirm;
``controllers/kubelet.py``). Every write here is also the audit's lifecycle record of it
(``created``, ``deleting``, ``deleted``, ``disruption:EvictionByEvictionAPI``).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from typing import Any

from airflow_k8s_retry_testing.apiserver.errors import Cause
from airflow_k8s_retry_testing.apiserver.validation import DNS_LABEL, LABEL_MESSAGE
from airflow_k8s_retry_testing.store import Obj, Store, now_iso

RESTART_POLICIES = ("Always", "OnFailure", "Never")
#: The condition kube-apiserver gives a pod created with scheduling gates.
SCHEDULING_GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"
_MUTABLE_SPEC_FIELDS = ("activeDeadlineSeconds", "tolerations")
_DEFAULT_TOLERATIONS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")

# -- validation ---------------------------------------------------------------------------------

#: Go's JSON names for the types a pod's string fields may not hold.
_GO_TYPES = {bool: "bool", int: "number", float: "number", list: "array", dict: "object"}


def decode_errors(obj: Any) -> str | None:
    """What kube-apiserver's JSON decoder says about a pod whose env values are not strings (it
    answers 400 before any validation), or ``None``."""
    spec = obj.get("spec") if isinstance(obj, dict) else None
    if not isinstance(spec, dict):
        return None
    for group in ("initContainers", "containers"):
        containers = [c for c in spec.get(group) or [] if isinstance(c, dict)]
        for c in containers:
            for env in [e for e in c.get("env") or [] if isinstance(e, dict)]:
                value = env.get("value")
                if value is not None and not isinstance(value, str):
                    go = _GO_TYPES.get(type(value), "value")
                    return (
                        f'Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal {go} into '
                        f"Go struct field EnvVar.spec.{group}.env.value of type string"
                    )
    return None


def validate_pod_spec(spec: Any) -> list[Cause]:
    if not isinstance(spec, dict):
        return [("FieldValueRequired", "spec", "Required value")]
    if not spec.get("containers"):
        return [("FieldValueRequired", "spec.containers", "Required value")]
    causes = _container_causes(spec)
    causes += _volume_causes(spec)
    causes += _gate_causes(spec)
    policy = spec.get("restartPolicy")
    if policy not in (None, *RESTART_POLICIES):
        causes.append(
            (
                "FieldValueNotSupported",
                "spec.restartPolicy",
                f'Unsupported value: "{policy}": supported values: "Always", "OnFailure", "Never"',
            )
        )
    return causes


def _container_causes(spec: Obj) -> list[Cause]:
    causes: list[Cause] = []
    seen: set[str] = set()
    for group in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(group) or []):
            where = f"spec.{group}[{i}]"
            if not isinstance(c, dict):
                causes.append(("FieldValueInvalid", where, "Invalid value: must be an object"))
                continue
            causes += _container_name_causes(c.get("name"), where, seen)
            if not c.get("image"):
                causes.append(("FieldValueRequired", f"{where}.image", "Required value"))
    return causes


def _container_name_causes(name: str | None, where: str, seen: set[str]) -> list[Cause]:
    if not name:
        return [("FieldValueRequired", f"{where}.name", "Required value")]
    if not DNS_LABEL.match(name) or len(name) > 63:
        return [("FieldValueInvalid", f"{where}.name", f'Invalid value: "{name}": {LABEL_MESSAGE}')]
    if name in seen:
        return [("FieldValueDuplicate", f"{where}.name", f'Duplicate value: "{name}"')]
    seen.add(name)
    return []


def _volume_causes(spec: Obj) -> list[Cause]:
    causes: list[Cause] = []
    volumes: set[str] = set()
    for i, volume in enumerate(spec.get("volumes") or []):
        name = volume.get("name") if isinstance(volume, dict) else None
        if not name:
            causes.append(("FieldValueRequired", f"spec.volumes[{i}].name", "Required value"))
        elif name in volumes:
            causes.append(("FieldValueDuplicate", f"spec.volumes[{i}].name", f'Duplicate value: "{name}"'))
        else:
            volumes.add(name)
    return causes


def _gate_causes(spec: Obj) -> list[Cause]:
    """A new pod's scheduling gates: no name twice, and no node named before the last is lifted."""
    causes: list[Cause] = []
    names = [g.get("name") if isinstance(g, dict) else None for g in spec.get("schedulingGates") or []]
    for i, name in enumerate(names):
        if name in names[:i]:
            causes.append(("FieldValueDuplicate", f"spec.schedulingGates[{i}]", f'Duplicate value: "{name}"'))
    if names and spec.get("nodeName"):
        message = "Forbidden: cannot be set until all schedulingGates have been cleared"
        causes.append(("FieldValueForbidden", "spec.nodeName", message))
    return causes


def added_gates(old: Obj, new: Obj) -> list[Cause]:
    """Scheduling gates may only be removed after a pod is created, as kube-apiserver says."""
    before = {g.get("name") for g in old.get("schedulingGates") or [] if isinstance(g, dict)}
    return [
        (
            "FieldValueForbidden",
            f"spec.schedulingGates[{i}].name",
            f"Forbidden: only deletion is allowed, but found new scheduling gate '{g.get('name')}'",
        )
        for i, g in enumerate(new.get("schedulingGates") or [])
        if isinstance(g, dict) and g.get("name") not in before
    ]


def pod_spec_immutable(old: Obj, new: Obj) -> list[Cause]:
    def strip(spec: Obj) -> Obj:
        spec = copy.deepcopy(spec)
        spec.pop("schedulingGates", None)  # judged by added_gates
        for group in ("containers", "initContainers"):
            for c in spec.get(group) or []:
                c.pop("image", None)
        for name in _MUTABLE_SPEC_FIELDS:
            spec.pop(name, None)
        return spec

    if strip(old) != strip(new):
        return [
            (
                "FieldValueForbidden",
                "spec",
                "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
                "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                "(allow it to be set to 1 if it was previously negative)",
            )
        ]
    return []


# -- defaulting ---------------------------------------------------------------------------------


def default_pod(pod: Obj) -> None:
    """Fill in the defaults the apiserver's defaulting and admission add to a new pod."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tolerations = spec.setdefault("tolerations", [])
    for key in _DEFAULT_TOLERATIONS:
        if not any(t.get("key") == key for t in tolerations):
            tolerations.append(
                {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            )
    containers = [c for group in ("initContainers", "containers") for c in spec.get(group) or []]
    for c in containers:
        _default_container(c)
    pod["status"] = {"phase": "Pending", "qosClass": qos_class(containers)}
    if spec.get("schedulingGates"):
        pod["status"]["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "lastProbeTime": None,
                "lastTransitionTime": now_iso(),
                "reason": "SchedulingGated",
                "message": SCHEDULING_GATED_MESSAGE,
            }
        ]


def _default_container(c: Obj) -> None:
    image = c.get("image", "")
    tagless = ":" not in image.rsplit("/", 1)[-1] and "@" not in image
    c.setdefault("imagePullPolicy", "Always" if tagless or image.endswith(":latest") else "IfNotPresent")
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    resources = c.setdefault("resources", {})
    if resources.get("limits") and not resources.get("requests"):
        resources["requests"] = dict(resources["limits"])


def qos_class(containers: list[Obj]) -> str:
    """Guaranteed (every container's cpu and memory limits equal its requests), Burstable or BestEffort."""
    guaranteed = True
    any_resources = False
    for c in containers:
        resources = c.get("resources") or {}
        if resources.get("requests") or resources.get("limits"):
            any_resources = True
        limits = resources.get("limits") or {}
        requests = resources.get("requests") or {}
        if not limits.get("cpu") or not limits.get("memory") or requests != limits:
            guaranteed = False
    return "Guaranteed" if guaranteed and any_resources else ("Burstable" if any_resources else "BestEffort")


# -- creation ---------------------------------------------------------------------------------


def store_new(store: Store, pod: Obj) -> None:
    """Store a pod just created (ADDED), defaulted and admitted: the scheduler and the kubelet
    learn of it from the store."""
    store.put("pods", pod, "ADDED")
    store.lifecycle(pod, "created", labels=dict(pod["metadata"].get("labels") or {}))


# -- graceful deletion --------------------------------------------------------------------------


def spec_grace(pod: Mapping[str, Any]) -> int:
    """The pod's own termination grace period (30 s by default)."""
    return int(pod["spec"].get("terminationGracePeriodSeconds", 30))


def held_by_finalizers(pod: Mapping[str, Any]) -> bool:
    """A finalizer keeps a deleted pod's object until it is removed."""
    return bool(pod["metadata"].get("finalizers"))


def stamp_deletion(pod: Obj, grace: int) -> Obj:
    """A copy of ``pod`` marked for deletion in ``grace`` seconds: the one place this is written."""
    marked = copy.deepcopy(pod)
    marked["metadata"]["deletionTimestamp"] = now_iso(time.time() + grace)
    marked["metadata"]["deletionGracePeriodSeconds"] = grace
    return marked


def _mark(store: Store, pod: Obj, grace: int) -> Obj:
    """Store ``pod`` marked for deletion in ``grace`` seconds (MODIFIED); the first mark is audited."""
    first = not pod["metadata"].get("deletionTimestamp")
    marked = stamp_deletion(pod, grace)
    store.put("pods", marked, "MODIFIED")
    if first:
        store.lifecycle(marked, "deleting", grace_seconds=grace)
    return marked


def mark_deleted(store: Store, pod: Obj, grace: int) -> Obj:
    """Mark a pod not yet marked for deletion (a graceful deletion); returns the pod as stored."""
    if pod["metadata"].get("deletionTimestamp"):
        return pod
    return _mark(store, pod, grace)


def remove(store: Store, pod: Obj) -> None:
    """The object goes for good (DELETED): a deletion without grace, or one the kubelet confirmed."""
    removed = store.remove("pods", pod["metadata"].get("namespace", ""), pod["metadata"]["name"])
    if removed is not None:
        store.lifecycle(removed, "deleted")


def deletion_grace(pod: Obj, requested: Any) -> int:
    """The grace period a DELETE of ``pod`` gets (``requested``: the DeleteOptions', or None)."""
    grace = int(requested) if requested is not None else spec_grace(pod)
    grace = max(grace, 0)
    phase = (pod.get("status") or {}).get("phase")
    if not pod["spec"].get("nodeName") or phase in ("Succeeded", "Failed"):
        grace = 0
    if grace == 0 and held_by_finalizers(pod):
        grace = 1  # with finalizers the object must stay until they are removed
    return grace


def delete_pod(store: Store, current: Obj, requested_grace: Any) -> Obj:
    """The API's DELETE of a pod: mark it; with grace the kubelet stops it and confirms, without
    (never while finalizers hold it) the object goes at once. Returns the pod as it was last stored."""
    grace = deletion_grace(current, requested_grace)
    if grace > 0:
        return mark_deleted(store, current, grace)
    # The API server writes the deletion mark first, a deletion without grace too (watchers see
    # MODIFIED, then DELETED), and then removes the object at once.
    marked = _mark(store, current, 0)
    remove(store, marked)
    return marked


def evict_pod(store: Store, pod: Obj, requested_grace: Any) -> None:
    """The Eviction API once its budget allows: the ``DisruptionTarget`` condition, then the pod's
    deletion with the eviction's grace period (kube-apiserver's ``addConditionAndDeletePod``)."""
    targeted = copy.deepcopy(pod)
    status = targeted.setdefault("status", {})
    condition: Obj = {
        "type": "DisruptionTarget",
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": now_iso(),
        "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting",
    }
    status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != "DisruptionTarget"]
    status["conditions"].append(condition)
    store.put("pods", targeted, "MODIFIED")
    store.lifecycle(targeted, "disruption:EvictionByEvictionAPI")
    delete_pod(store, targeted, requested_grace)
