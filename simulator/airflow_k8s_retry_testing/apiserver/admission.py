"""What a real API server's admission and the Eviction API decide, as pure functions of the
objects: PodSecurity (a namespace's ``pod-security.kubernetes.io/enforce`` label), ResourceQuota
and PodDisruptionBudget.

Each answers with the API server's own words (held to a real kube-apiserver by
``tests/cluster/fidelity/test_admission.py``). They cover a subset, named in each docstring and in
docs/simulator.md; what they do not check is admitted.
"""

from __future__ import annotations

from airflow_k8s_retry_testing.apiserver.errors import ApiError
from airflow_k8s_retry_testing.scenario import parse_quantity
from airflow_k8s_retry_testing.store import Obj, Store

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
ENFORCE_VERSION_LABEL = "pod-security.kubernetes.io/enforce-version"
#: The PodSecurity levels that check anything (``privileged`` allows all).
CHECKED_LEVELS = ("baseline", "restricted")


# -- PodSecurity ------------------------------------------------------------------------------


def _containers(pod: Obj) -> list[Obj]:
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def _quoted(names: list[str]) -> str:
    return ", ".join(f'"{n}"' for n in names)


def _plural(word: str, names: list[str]) -> str:
    return f"{word}{'s' if len(names) > 1 else ''} {_quoted(names)}"


def baseline_violations(pod: Obj) -> list[str]:
    """The Pod Security Standards' baseline checks this simulator knows, in the order the API
    server lists them: host namespaces, hostPath volumes, host ports, privileged containers."""
    spec = pod.get("spec") or {}
    out: list[str] = []
    hosts = [f"{key}=true" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    if hosts:
        out.append(f"host namespaces ({', '.join(hosts)})")
    volumes = [v["name"] for v in spec.get("volumes") or [] if "hostPath" in v]
    if volumes:
        out.append(f"hostPath volumes ({_plural('volume', volumes)})")
    ports = [
        (c["name"], str(p["hostPort"]))
        for c in _containers(pod)
        for p in c.get("ports") or []
        if p.get("hostPort")
    ]
    if ports:
        names = sorted({n for n, _ in ports})
        out.append(
            f"hostPort ({_plural('container', names)} {'uses' if len(names) == 1 else 'use'} "
            f"{'hostPort' if len(ports) == 1 else 'hostPorts'} {', '.join(p for _, p in ports)})"
        )
    privileged = [c["name"] for c in _containers(pod) if (c.get("securityContext") or {}).get("privileged")]
    if privileged:
        out.append(
            f"privileged ({_plural('container', privileged)} must not set securityContext.privileged=true)"
        )
    return out


def pod_security_refusal(namespace: Obj, pod: Obj) -> str | None:
    """The 403 message for a pod the namespace's enforced level forbids, or ``None``."""
    labels = (namespace.get("metadata") or {}).get("labels") or {}
    level = labels.get(ENFORCE_LABEL)
    if level not in CHECKED_LEVELS:
        return None
    violations = baseline_violations(pod)
    if not violations:
        return None
    version = labels.get(ENFORCE_VERSION_LABEL, "latest")
    name = (pod.get("metadata") or {}).get("name", "")
    return f'pods "{name}" is forbidden: violates PodSecurity "{level}:{version}": {", ".join(violations)}'


# -- ResourceQuota ----------------------------------------------------------------------------

#: Quota keys this simulator counts: the number of pods and the pods' compute requests/limits.
COMPUTE = {
    "requests.cpu": ("requests", "cpu"),
    "cpu": ("requests", "cpu"),
    "requests.memory": ("requests", "memory"),
    "memory": ("requests", "memory"),
    "limits.cpu": ("limits", "cpu"),
    "limits.memory": ("limits", "memory"),
}


def _terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def pod_usage(pod: Obj, key: str) -> float:
    """What one pod counts against the quota key ``key`` (base units: cores, bytes, pods)."""
    if key == "pods":
        return 1.0
    kind, resource = COMPUTE[key]
    spec = pod.get("spec") or {}
    main = sum(
        parse_quantity(((c.get("resources") or {}).get(kind) or {}).get(resource, 0), key)
        for c in spec.get("containers") or []
    )
    init = max(
        (
            parse_quantity(((c.get("resources") or {}).get(kind) or {}).get(resource, 0), key)
            for c in spec.get("initContainers") or []
        ),
        default=0.0,
    )
    return max(main, init)


def _format(key: str, value: float) -> str:
    if key == "pods":
        return str(int(value))
    if key.endswith("cpu"):
        return f"{round(value * 1000)}m" if not float(value).is_integer() else str(int(value))
    return str(int(value))


def quota_status(quota: Obj, pods: list[Obj]) -> Obj:
    """``status`` of a ResourceQuota over the namespace's pods (non-terminal ones count)."""
    hard = dict((quota.get("spec") or {}).get("hard") or {})
    counted = [k for k in hard if k == "pods" or k in COMPUTE]
    live = [p for p in pods if not _terminal(p)]
    used = {k: _format(k, sum(pod_usage(p, k) for p in live)) for k in counted}
    return {"hard": hard, "used": used}


def quota_refusal(quota: Obj, pods: list[Obj], pod: Obj) -> str | None:
    """The 403 message for a pod this quota has no room for, or ``None``."""
    hard = (quota.get("spec") or {}).get("hard") or {}
    counted = sorted(k for k in hard if k == "pods" or k in COMPUTE)
    live = [p for p in pods if not _terminal(p)]
    name = (pod.get("metadata") or {}).get("name", "")
    quota_name = quota["metadata"]["name"]
    missing = [k for k in counted if k != "pods" and not _specifies(pod, k)]
    if missing:
        return f'pods "{name}" is forbidden: failed quota: {quota_name}: must specify {",".join(missing)}'
    over = [
        k
        for k in counted
        if sum(pod_usage(p, k) for p in live) + pod_usage(pod, k) > parse_quantity(hard[k], k)
    ]
    if not over:
        return None

    def part(values: dict[str, float]) -> str:
        return ",".join(f"{k}={_format(k, values[k])}" for k in over)

    requested = {k: pod_usage(pod, k) for k in over}
    used = {k: sum(pod_usage(p, k) for p in live) for k in over}
    limited = {k: parse_quantity(hard[k], k) for k in over}
    return (
        f'pods "{name}" is forbidden: exceeded quota: {quota_name}, requested: {part(requested)}, '
        f"used: {part(used)}, limited: {part(limited)}"
    )


def _specifies(pod: Obj, key: str) -> bool:
    kind, resource = COMPUTE[key]
    return all(
        resource in (((c.get("resources") or {}).get(kind)) or {})
        for c in (pod.get("spec") or {}).get("containers") or []
    )


# -- PodDisruptionBudget ----------------------------------------------------------------------


def selects(selector: Obj, labels: dict[str, str]) -> bool:
    """A LabelSelector (``matchLabels`` and ``matchExpressions``) against ``labels``."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _healthy(pod: Obj) -> bool:
    if pod["metadata"].get("deletionTimestamp") or _terminal(pod):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _count(value: int | str, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return -(-int(value[:-1]) * total // 100)  # rounded up, as the disruption controller does
    return int(value)


def budget_status(budget: Obj, pods: list[Obj]) -> Obj:
    """``status`` of a PodDisruptionBudget over the namespace's pods."""
    spec = budget.get("spec") or {}
    selector = spec.get("selector") or {}
    matching = [
        p for p in pods if not _terminal(p) and selects(selector, (p["metadata"].get("labels") or {}))
    ]
    expected = len(matching)
    healthy = sum(1 for p in matching if _healthy(p))
    if "maxUnavailable" in spec:
        desired = max(0, expected - _count(spec["maxUnavailable"], expected))
    else:
        desired = _count(spec.get("minAvailable", 1), expected)
    allowed = max(0, healthy - desired)
    return {
        "observedGeneration": budget["metadata"].get("generation", 1),
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "disruptionsAllowed": allowed,
        "conditions": [
            {
                "type": "DisruptionAllowed",
                "status": "True" if allowed else "False",
                "reason": "SufficientPods" if allowed else "InsufficientPods",
                "message": "",
                "observedGeneration": budget["metadata"].get("generation", 1),
                "lastTransitionTime": budget["metadata"].get("creationTimestamp"),
            }
        ],
    }


def eviction_refusal(budgets: list[Obj], pods: list[Obj], pod: Obj) -> Obj | None:
    """The 429 Status details for evicting ``pod`` (a healthy pod a budget has no room for), or
    ``None`` when the eviction may go ahead."""
    labels = pod["metadata"].get("labels") or {}
    mine = [b for b in budgets if selects((b.get("spec") or {}).get("selector") or {}, labels)]
    if not mine or not _healthy(pod):
        return None
    for budget in mine:
        status = budget_status(budget, pods)
        if status["disruptionsAllowed"] < 1:
            name = budget["metadata"]["name"]
            return {
                "causes": [
                    {
                        "reason": "DisruptionBudget",
                        "message": f"The disruption budget {name} needs {status['desiredHealthy']} healthy "
                        f"pods and has {status['currentHealthy']} currently",
                    }
                ]
            }
    return None


EVICTION_REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."


# -- what the API server does with them -------------------------------------------------------

#: Objects whose ``status`` a controller keeps (the quota and disruption controllers): here it is
#: worked out whenever one is read.
COMPUTED_STATUS = frozenset({"resourcequotas", "poddisruptionbudgets"})


def with_status(store: Store, resource: str, obj: Obj) -> Obj:
    """``obj`` as a client reads it: a quota or budget with its status up to date."""
    if resource not in COMPUTED_STATUS:
        return obj
    pods = store.items("pods", obj["metadata"].get("namespace", ""))
    status = quota_status(obj, pods) if resource == "resourcequotas" else budget_status(obj, pods)
    return {**obj, "status": status}


def limit_range_refusal(limit_range: Obj, pod: Obj) -> str | None:
    """The LimitRanger's 403 message for a container whose limit is above a ``Container`` maximum."""
    name = (pod.get("metadata") or {}).get("name", "")
    for item in (limit_range.get("spec") or {}).get("limits") or []:
        if item.get("type") != "Container":
            continue
        for resource, most in (item.get("max") or {}).items():
            for c in (pod.get("spec") or {}).get("containers") or []:
                limit = ((c.get("resources") or {}).get("limits") or {}).get(resource)
                if limit is not None and parse_quantity(limit, resource) > parse_quantity(most, resource):
                    return (
                        f'pods "{name}" is forbidden: maximum {resource} usage per Container is {most}, '
                        f"but limit is {limit}"
                    )
    return None


def admit_pod(store: Store, pod: Obj, namespace: str) -> None:
    """PodSecurity, then LimitRange maxima, then ResourceQuota, as the API server admits a pod:
    403 with their words."""
    name = pod["metadata"]["name"]
    ns = store.get("namespaces", "", namespace) or {}
    refusal = pod_security_refusal(ns, pod)
    for limit_range in sorted(store.items("limitranges", namespace), key=lambda q: q["metadata"]["name"]):
        if refusal is not None:
            break
        refusal = limit_range_refusal(limit_range, pod)
    pods = store.items("pods", namespace)
    for quota in sorted(store.items("resourcequotas", namespace), key=lambda q: q["metadata"]["name"]):
        if refusal is not None:
            break
        refusal = quota_refusal(quota, pods, pod)
    if refusal is not None:
        raise ApiError(403, refusal, details={"name": name, "kind": "pods"})


def check_eviction(store: Store, pod: Obj) -> None:
    """429 for evicting a pod its PodDisruptionBudget has no room for."""
    namespace = pod["metadata"].get("namespace", "")
    details = eviction_refusal(
        store.items("poddisruptionbudgets", namespace), store.items("pods", namespace), pod
    )
    if details is not None:
        raise ApiError(429, EVICTION_REFUSED, details=details)
