"""Hypothesis strategies for pods as the API returns them: realistic statuses, and plain garbage."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

PHASES = ["Pending", "Running", "Succeeded", "Failed", "Unknown", "", None, "Terminating"]
POD_REASONS = [
    None,
    "",
    "Evicted",
    "DeadlineExceeded",
    "Shutdown",
    "NodeShutdown",
    "Terminated",
    "OutOfcpu",
    "OutOfmemory",
    "OutOfpods",
    "OutOfnvidia.com/gpu",
    "UnexpectedAdmissionError",
    "NodeAffinity",
    "TaintToleration",
    "PodFitsHostPorts",
    "MatchNodeSelector",
    "TopologyAffinityError",
    "NodeLost",
    "Preempting",
    "SomethingNew",
]
WAITING_REASONS = [
    "ContainerCreating",
    "PodInitializing",
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "ImageInspectError",
    "RegistryUnavailable",
    "SignatureValidationFailed",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "PreStartHookError",
    "PostStartHookError",
    "PreCreateHookError",
    "KillContainerError",
    "VerifyNonRootError",
    "CrashLoopBackOff",
    "ContainerStatusUnknown",
    "",
]
TERMINATED_REASONS = [
    "Completed",
    "Error",
    "OOMKilled",
    "ContainerStatusUnknown",
    "StartError",
    "ContainerCannotRun",
    "DeadlineExceeded",
    "",
    "Unknown",
]
MESSAGES = [
    None,
    "",
    'Back-off pulling image "docker.io/acme/etl:1"',
    "rpc error: code = Unknown desc = 429 Too Many Requests - Server message: toomanyrequests: limit",
    'failed to resolve reference "ghcr.io/acme/etl:1": ghcr.io/acme/etl:1: not found',
    "pull access denied, repository does not exist or may require authorization",
    "unauthorized: authentication required",
    "dial tcp 10.0.0.1:443: i/o timeout",
    "503 Service Unavailable",
    'secret "db" not found',
    'configmap "cfg" not found',
    "failed to sync secret cache: timed out waiting for the condition",
    "container has runAsNonRoot and image will run as root",
    "The container could not be located when the pod was terminated",
    "Pod was rejected: Predicate TaintToleration failed",
    "Pod Predicate NodeAffinity failed",
    "Pod Node didn't have enough resource: pods, requested: 1, used: 110, capacity: 110",
    "x509: certificate signed by unknown authority",
    "http: server gave HTTP response to HTTPS client",
    'failed to pull and unpack image "ghcr.io/a/b:1": no match for platform in manifest: not found',
    "no matching manifest for linux/arm64/v8 in the manifest list entries",
    'short-name "busybox:latest" did not resolve to an alias and no unqualified-search registries are',
    "short name mode is enforcing, but image name alpine:latest returns ambiguous list",
    "rpc error: code = Canceled desc = context canceled",
    "net/http: request canceled",
    "x" * 3000,
]
EVENT_REASONS = [
    "Failed",
    "BackOff",
    "Pulling",
    "Pulled",
    "FailedMount",
    "FailedAttachVolume",
    "FailedScheduling",
    "TriggeredScaleUp",
    "NotTriggerScaleUp",
    "FailedCreatePodSandBox",
    "Evicted",
    "Killing",
    "Scheduled",
    "InspectFailed",
    "ErrImageNeverPull",
]
CONTAINER_NAMES = ["base", "sidecar", "init-a", "init-b", "istio-proxy"]
STAMPS = st.sampled_from([None, "2026-03-14T09:27:01Z", "2026-03-14T09:28:05Z", "2026-03-14T10:00:00Z"])


@st.composite
def container_state(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["waiting"] * 4 + ["running", "terminated", "terminated", "none", "empty"]))
    if kind == "waiting":
        return {
            "waiting": {
                "reason": draw(st.sampled_from(WAITING_REASONS)),
                "message": draw(st.sampled_from(MESSAGES)),
            }
        }
    if kind == "running":
        return {"running": {"startedAt": "2026-03-14T09:27:10Z"}}
    if kind == "terminated":
        return {
            "terminated": {
                "reason": draw(st.sampled_from(TERMINATED_REASONS)),
                "exitCode": draw(
                    st.one_of(
                        st.sampled_from([0, 1, 2, 3, 42, 100, 128, 137, 143, 255]),
                        st.integers(-5, 300),
                        st.none(),
                    )
                ),
                "message": draw(st.sampled_from(MESSAGES)),
            }
        }
    return {} if kind == "empty" else {"waiting": None}


@st.composite
def container_statuses(draw: st.DrawFn, names: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "image": draw(st.sampled_from(["docker.io/acme/etl:1", "ghcr.io/acme/etl:1", ""])),
            "state": draw(container_state()),
            "lastState": draw(st.one_of(st.just({}), container_state())),
            "restartCount": draw(st.integers(0, 5)),
        }
        for name in names
    ]


#: PodScheduled, DisruptionTarget and resize (PodResizePending) reasons, and none.
CONDITION_REASONS = [
    *("Unschedulable", "SchedulingGated", "EvictionByEvictionAPI", "Infeasible", "Deferred"),
    *("", None),
]
RESTART_ON_42 = [{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]


@st.composite
def conditions(draw: st.DrawFn) -> list[dict[str, Any]]:
    # DisruptionTarget is rarer than the others, as on a real cluster.
    drawn = draw(
        st.lists(
            st.sampled_from(
                ["PodScheduled"] * 3
                + ["Ready", "Initialized", "DisruptionTarget", "PodResizePending", "PodResizeInProgress"]
            )
        )
    )
    kinds = list(dict.fromkeys(drawn))
    return [
        {
            "type": kind,
            "status": draw(st.sampled_from(["True", "False", "Unknown"])),
            "reason": draw(st.sampled_from(CONDITION_REASONS)),
            "message": draw(st.sampled_from(MESSAGES)),
        }
        for kind in kinds
    ]


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    """A pod shaped like the API's JSON, in any state the kubelet and controllers can write."""
    mains = draw(
        st.lists(st.sampled_from(["base", "sidecar", "istio-proxy"]), min_size=1, max_size=3, unique=True)
    )
    inits = draw(st.lists(st.sampled_from(["init-a", "init-b"]), max_size=2, unique=True))
    restart = draw(st.sampled_from(["Never", "OnFailure", "Always", None]))
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": n,
                "image": "docker.io/acme/etl:1",
                "resources": {"limits": {"memory": draw(st.sampled_from(["512Mi", None]))}},
                # Container restart rules (KEP-5307): a container-level policy, sometimes with rules.
                **draw(
                    st.sampled_from(
                        [
                            {},
                            {},
                            {"restartPolicy": "Never", "restartPolicyRules": RESTART_ON_42},
                            {"restartPolicy": "OnFailure"},
                        ]
                    )
                ),
            }
            for n in mains
        ],
        "initContainers": [
            {
                "name": n,
                "image": "ghcr.io/acme/init:1",
                "restartPolicy": draw(st.sampled_from([None, "Always"])),
            }
            for n in inits
        ],
    }
    if restart is not None:
        spec["restartPolicy"] = restart
    phase = draw(st.sampled_from(PHASES + ["Pending"] * 6 + ["Running"] * 2))
    status: dict[str, Any] = {"phase": phase, "conditions": draw(conditions())}
    # Most pods carry no status reason and few are being deleted: keep the container rules busy.
    reason = draw(st.sampled_from(POD_REASONS + [None] * 3 * len(POD_REASONS)))
    if reason is not None:
        status["reason"] = reason
        status["message"] = draw(st.sampled_from(MESSAGES))
    if draw(st.integers(0, 4)) > 0:
        status["containerStatuses"] = draw(container_statuses(mains))
    if draw(st.booleans()):
        status["initContainerStatuses"] = draw(container_statuses(inits))
    metadata: dict[str, Any] = {"name": "p-1", "namespace": "ns", "uid": "u-1"}
    if draw(st.booleans()):  # observedGeneration (1.33+): mostly caught up, sometimes behind
        metadata["generation"] = draw(st.integers(1, 3))
        status["observedGeneration"] = draw(st.integers(1, 3))
    if draw(st.integers(0, 9)) == 0:
        metadata["deletionTimestamp"] = "2026-03-14T09:41:00Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


@st.composite
def events(draw: st.DrawFn) -> list[dict[str, Any]]:
    """The pod's Events: pull failures, mounts, scheduling and autoscaler events, some of other pods."""
    out = []
    for _ in range(draw(st.integers(0, 5))):
        name = draw(st.sampled_from(CONTAINER_NAMES))
        field = draw(st.sampled_from([None, f"spec.containers{{{name}}}", f"spec.initContainers{{{name}}}"]))
        involved: dict[str, Any] = {
            "kind": "Pod",
            "name": "p-1",
            "uid": draw(st.sampled_from(["u-1", "u-0", None])),
        }
        if field:
            involved["fieldPath"] = field
        out.append(
            {
                "reason": draw(st.sampled_from(EVENT_REASONS)),
                "message": draw(st.sampled_from(MESSAGES)),
                "type": draw(st.sampled_from(["Normal", "Warning"])),
                "count": draw(st.one_of(st.none(), st.integers(1, 50))),
                "lastTimestamp": draw(STAMPS),
                "involvedObject": involved,
            }
        )
    return out


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=25,
)


@st.composite
def garbage_pods(draw: st.DrawFn) -> Any:
    """Anything JSON can hold, sometimes shaped a little like a pod."""
    keys = st.sampled_from(
        ["metadata", "spec", "status", "phase", "containerStatuses", "conditions", "state"]
    )
    shaped = st.dictionaries(keys, JSON, max_size=4)
    return draw(
        st.one_of(JSON, shaped, st.fixed_dictionaries({"status": shaped, "spec": shaped, "metadata": shaped}))
    )
