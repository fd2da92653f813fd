"""The scenario language on a real control plane: images' fates as KWOK Stages.

KWOK plays the kubelet of its nodes by applying Stages: when a pod matches a Stage's selector, the
Stage's status template is applied to it after the Stage's delay, and its Event is recorded. This
module turns a :class:`~airflow_k8s_retry_testing.scenario.Scenario` into that configuration:

* every pod gets an IP and waits in ``ContainerCreating``, as after admission;
* a pod that refers (``env``/``envFrom``) to a Secret or ConfigMap the scenario does not create
  waits in ``CreateContainerConfigError`` with the kubelet's message;
* an image with a failing ``pull`` waits in ``ErrImagePull``, then ``ImagePullBackOff``, and
  tries again (containerd's message texts, the same ones the simulator writes);
  ``invalid_name`` waits in ``InvalidImageName`` for good; with ``for_seconds``, the first pull
  that starts after the outage works (the harness's registry controller stamps each pod of the
  image with the time the outage ends, counted from the image's first pull anywhere);
* every other pod starts, runs ``run.duration_seconds`` and terminates with its exit code
  (``Completed``, ``Error`` or ``OOMKilled``); images not listed exit 0 after 1 s;
* a pod being deleted is removed, as a kubelet confirms a deletion.

A node's status names its KWOK process's port (``daemonEndpoints``), so the API server reaches
it as it reaches a kubelet: ``pods/log`` is served from the files the harness writes
(``run.log``, see :mod:`.podlogs`).

Everything the real backend cannot honour raises :class:`UnsupportedScenario` naming the key:
there is no silent fallback to different behaviour.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from airflow_k8s_retry_testing.controllers.registry import pull_error
from airflow_k8s_retry_testing.scenario import ImageBehaviour, Scenario, ScenarioError

#: The jq query every image Stage selects on: the pod's first (main) container's image.
IMAGE_KEY = ".spec.containers.[0].image"
#: Delays of the kubelet's steps, in scenario seconds (scaled by ``time_scale``).
CREATE_SECONDS = 0.05
PULL_FAIL_SECONDS = 0.3
BACKOFF_SECONDS = 1.0
PULL_RETRY_SECONDS = 10.0
START_SECONDS = 0.2
DELETE_SECONDS = 0.0
#: The annotation the harness's registry controller puts on each pod of an image whose pull fails
#: for ``for_seconds``: the Unix time from which pulls of that image work (a registry outage is
#: global, so it counts from the first pull attempt of the image anywhere in the cluster).
REGISTRY_UP_AT = "testing.airflow-k8s-retry.io/registry-up-at"
#: The Kubernetes minor release the control plane runs (tools/controlplane/go.mod pins it).
KUBERNETES_MINOR = 36


class UnsupportedScenario(ScenarioError):
    """The scenario asks for something the real control plane cannot do."""


def check_supported(scenario: Scenario, where: str = "scenario") -> None:
    """Raise :class:`UnsupportedScenario` for the first key the real backend cannot honour."""
    if scenario.faults:
        raise UnsupportedScenario(
            f"{where}.faults: a real kube-apiserver cannot be told to fail requests; "
            "run API-fault scenarios on FakeCluster"
        )
    if scenario.autoscaler is not None:
        raise UnsupportedScenario(
            f"{where}.autoscaler: the real control plane has no cluster autoscaler; "
            "run autoscaler scenarios on FakeCluster"
        )
    if scenario.kubernetes_version not in ("1.31", f"1.{KUBERNETES_MINOR}"):
        raise UnsupportedScenario(
            f"{where}.kubernetes_version: the control plane runs Kubernetes 1.{KUBERNETES_MINOR}, "
            f"not {scenario.kubernetes_version}; drop the key or set it to '1.{KUBERNETES_MINOR}'"
        )
    for ref, behaviour in scenario.images.items():
        if behaviour.for_pods is not None:
            raise UnsupportedScenario(
                f"{where}.images[{ref!r}].for_pods: the control plane's registry outages end by "
                "time only; use for_seconds, or run it on FakeCluster"
            )
        if behaviour.run.xcom is not None:
            raise UnsupportedScenario(
                f"{where}.images[{ref!r}].run.xcom: reading the XCom sidecar needs exec, and KWOK's "
                "only exec runs the command on the machine that runs KWOK; run it on FakeCluster"
            )
    for spec in (*scenario.secrets, *scenario.configmaps):
        if spec.data is None:
            continue
        if not spec.data:
            raise UnsupportedScenario(
                f"{where}: {spec.namespace}/{spec.name} has empty data; give at least one key"
            )


def _ms(seconds: float, scenario: Scenario) -> int:
    return round(seconds * scenario.time_scale * 1000)


def _quote(text: str) -> str:
    """A YAML double-quoted scalar (JSON's escapes are YAML's) that no Go template action opens."""
    if "{{" in text:
        raise UnsupportedScenario(f"text {text!r} may not contain '{{{{'")
    return json.dumps(text)


def _stage(
    name: str,
    expressions: list[dict[str, Any]],
    *,
    delay_ms: int,
    status: str | None = None,
    event: tuple[str, str, str] | None = None,
    delete: bool = False,
) -> dict[str, Any]:
    nxt: dict[str, Any] = {}
    if status is not None:
        nxt["statusTemplate"] = status
    if event is not None:
        nxt["event"] = {"type": event[0], "reason": event[1], "message": event[2]}
    if delete:
        nxt["delete"] = True
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {"matchExpressions": expressions},
            "delay": {"durationMilliseconds": delay_ms},
            "next": nxt,
        },
    }


def _expr(key: str, operator: str, values: Iterable[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": operator}
    if values is not None:
        out["values"] = list(values)
    return out


ALIVE = _expr(".metadata.deletionTimestamp", "DoesNotExist")
PENDING = _expr(".status.phase", "In", ["Pending"])


def _waiting(reason: str) -> dict[str, Any]:
    return _expr(".status.containerStatuses.[0].state.waiting.reason", "In", [reason])


#: A pod past admission (it has an IP) whose containers are being created.
CREATING = [ALIVE, PENDING, _expr(".status.podIP", "Exists"), _waiting("ContainerCreating")]


def _first_container_status(state: str) -> str:
    """Container statuses with the first container in ``state`` (YAML lines) and the others creating."""
    return (
        "containerStatuses:\n"
        "{{ range $i, $c := .spec.containers }}\n"
        "- image: {{ $c.image | Quote }}\n"
        "  name: {{ $c.name | Quote }}\n"
        "  ready: false\n"
        "  restartCount: 0\n"
        "  started: false\n"
        "  state:\n"
        "{{ if eq $i 0 }}\n"
        f"{state}"
        "{{ else }}\n"
        "    waiting:\n"
        "      reason: ContainerCreating\n"
        "{{ end }}\n"
        "{{ end }}\n"
    )


def _waiting_state(reason: str, message: str) -> str:
    return f"    waiting:\n      reason: {reason}\n      message: {_quote(message)}\n"


CREATE_STATUS = """\
{{ $now := Now }}
conditions:
- type: PodReadyToStartContainers
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
- type: Initialized
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
- type: Ready
  status: "False"
  reason: ContainersNotReady
  message: UNREADY
  lastTransitionTime: {{ $now | Quote }}
- type: ContainersReady
  status: "False"
  reason: ContainersNotReady
  message: UNREADY
  lastTransitionTime: {{ $now | Quote }}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    waiting:
      reason: ContainerCreating
{{ end }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
hostIPs:
- ip: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: POD_IP
phase: Pending
startTime: {{ $now | Quote }}
""".replace(
    "UNREADY",
    "'containers with unready status: ["
    "{{ range $i, $c := .spec.containers }}{{ if $i }} {{ end }}{{ $c.name }}{{ end }}]'",
).replace(
    "POD_IP",
    '{{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) '
    '( or .metadata.name "" ) ( or .metadata.namespace "" ) | Quote }}',
)

RUNNING_STATUS = """\
{{ $now := Now }}
conditions:
- type: Ready
  status: "True"
  reason: ""
  message: ""
  lastTransitionTime: {{ $now | Quote }}
- type: ContainersReady
  status: "True"
  reason: ""
  message: ""
  lastTransitionTime: {{ $now | Quote }}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  imageID: {{ printf "%s@sha256:%s" .image ( sha256sum .image ) | Quote }}
  containerID: {{ printf "containerd://%s" ( sha256sum ( printf "%s/%s" $.metadata.uid .name ) ) | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
phase: Running
"""


def _terminated_status(exit_code: int, oom: bool) -> str:
    reason = "OOMKilled" if oom else ("Completed" if exit_code == 0 else "Error")
    phase = "Succeeded" if exit_code == 0 else "Failed"
    pod_reason = "PodCompleted" if exit_code == 0 else "PodFailed"
    return (
        "{{ $now := Now }}\n"
        "conditions:\n"
        "- type: Ready\n"
        '  status: "False"\n'
        f"  reason: {pod_reason}\n"
        '  message: ""\n'
        "  lastTransitionTime: {{ $now | Quote }}\n"
        "- type: ContainersReady\n"
        '  status: "False"\n'
        f"  reason: {pod_reason}\n"
        '  message: ""\n'
        "  lastTransitionTime: {{ $now | Quote }}\n"
        "- type: PodReadyToStartContainers\n"
        '  status: "False"\n'
        "  lastTransitionTime: {{ $now | Quote }}\n"
        "containerStatuses:\n"
        "{{ range $i, $c := .spec.containers }}\n"
        "{{ $was := index $.status.containerStatuses $i }}\n"
        "- image: {{ $c.image | Quote }}\n"
        "  imageID: {{ $was.imageID | Quote }}\n"
        "  containerID: {{ $was.containerID | Quote }}\n"
        "  name: {{ $c.name | Quote }}\n"
        "  ready: false\n"
        "  restartCount: 0\n"
        "  started: false\n"
        "  state:\n"
        "    terminated:\n"
        f"      exitCode: {exit_code}\n"
        f"      reason: {reason}\n"
        "      startedAt: {{ $was.state.running.startedAt | Quote }}\n"
        "      finishedAt: {{ $now | Quote }}\n"
        "      containerID: {{ $was.containerID | Quote }}\n"
        "{{ end }}\n"
        f"phase: {phase}\n"
    )


def _config_refs_query(known: list[str]) -> str:
    """jq: the first Secret/ConfigMap (``secret:NS/NAME``) a pod's env needs that does not exist."""
    refs = (
        ".metadata.namespace as $ns | [.spec.containers[] | ("
        "((.env // [])[] | .valueFrom.secretKeyRef | select(. != null and .optional != true) "
        '| "secret:\\($ns)/\\(.name)"), '
        "((.envFrom // [])[] | .secretRef | select(. != null and .optional != true) "
        '| "secret:\\($ns)/\\(.name)"), '
        "((.env // [])[] | .valueFrom.configMapKeyRef | select(. != null and .optional != true) "
        '| "configmap:\\($ns)/\\(.name)"), '
        "((.envFrom // [])[] | .configMapRef | select(. != null and .optional != true) "
        '| "configmap:\\($ns)/\\(.name)"))]'
    )
    return f"{refs} - {json.dumps(known)} | .[0]"


def _first_missing(ref: str, kind: str) -> str:
    """A template line: if ``$msg`` is unset and ``ref`` (e.g. ``.secretRef``) names an object that
    is not in ``$known``, set ``$msg`` to the kubelet's message for it."""
    known = f'( has ( printf "{kind}:%s/%s" $ns {ref}.name ) $known )'
    condition = f"and ( not $msg ) {ref} ( not {ref}.optional ) ( not {known} )"
    return f'{{{{ if {condition} }}}}{{{{ $msg = printf "{kind} %q not found" {ref}.name }}}}{{{{ end }}}}\n'


CONFIG_ERROR_STATUS = (
    "{{ $known := list KNOWN }}\n"
    "{{ $ns := .metadata.namespace }}\n"
    '{{ $msg := "" }}\n'
    "{{ range .spec.containers }}\n"
    "{{ range .envFrom }}\n"
    + _first_missing(".secretRef", "secret")
    + _first_missing(".configMapRef", "configmap")
    + "{{ end }}\n"
    "{{ range .env }}\n"
    "{{ with .valueFrom }}\n"
    + _first_missing(".secretKeyRef", "secret")
    + _first_missing(".configMapKeyRef", "configmap")
    + "{{ end }}\n"
    "{{ end }}\n"
    "{{ end }}\n"
    + _first_container_status(
        "    waiting:\n      reason: CreateContainerConfigError\n      message: {{ $msg | Quote }}\n"
    )
)


def _outage(delay: float, over: bool) -> dict[str, Any]:
    """Selects a pod whose image's outage (``for_seconds``) is ``over`` (or not) for a pull that
    starts ``delay`` real seconds from now. A pod the harness's registry controller has not
    annotated yet matches neither, and waits in ``ContainerCreating`` until it has."""
    up_at = f'.metadata.annotations["{REGISTRY_UP_AT}"]'
    query = f"if {up_at} then (({up_at} | tonumber) <= (now + {delay:.3f})) else null end"
    return _expr(query, "In", ["true" if over else "false"])


def _pull_stages(index: int, ref: str, behaviour: ImageBehaviour, scenario: Scenario) -> list[dict[str, Any]]:
    """The Stages of one image whose pull fails: ``ErrImagePull``, ``ImagePullBackOff``, a pull
    again after the back-off; with ``for_seconds``, the first pull after the outage works."""
    image = _expr(IMAGE_KEY, "In", [ref])
    creating = [*CREATING, _expr(scenario_config_query(scenario), "DoesNotExist"), image]
    if behaviour.pull == "invalid_name":
        message = (
            f'Failed to apply default image tag "{ref}": '
            f'couldn\'t parse image name "{ref}": invalid reference format'
        )
        return [
            _stage(
                f"image-{index}-invalid-name",
                creating,
                delay_ms=_ms(START_SECONDS, scenario),
                status=_first_container_status(_waiting_state("InvalidImageName", message)),
                event=("Warning", "InspectFailed", message),
            )
        ]
    grpc, _ = pull_error(behaviour.pull, ref)
    failed_event = ("Warning", "Failed", f'Failed to pull image "{ref}": {grpc}')
    backoff = f'Back-off pulling image "{ref}"'
    backing_off = [ALIVE, PENDING, image, _waiting("ImagePullBackOff")]
    ends = behaviour.for_seconds is not None
    fail_first = [_outage(_ms(PULL_FAIL_SECONDS, scenario) / 1000, over=False)] if ends else []
    fail_again = [_outage(_ms(PULL_RETRY_SECONDS, scenario) / 1000, over=False)] if ends else []
    out = [
        _stage(
            f"image-{index}-pull-failed",
            [*creating, *fail_first],
            delay_ms=_ms(PULL_FAIL_SECONDS, scenario),
            status=_first_container_status(_waiting_state("ErrImagePull", grpc)),
            event=failed_event,
        ),
        _stage(
            f"image-{index}-back-off",
            [ALIVE, PENDING, image, _waiting("ErrImagePull")],
            delay_ms=_ms(BACKOFF_SECONDS, scenario),
            status=_first_container_status(
                _waiting_state("ImagePullBackOff", f"{backoff}: ErrImagePull: {grpc}")
            ),
            event=("Normal", "BackOff", backoff),
        ),
        _stage(
            f"image-{index}-pull-again",
            [*backing_off, *fail_again],
            delay_ms=_ms(PULL_RETRY_SECONDS, scenario),
            status=_first_container_status(_waiting_state("ErrImagePull", grpc)),
            event=failed_event,
        ),
    ]
    if ends:
        started = ("Normal", "Started", "Started container")
        out += [
            _stage(
                f"image-{index}-pulled",
                [*creating, _outage(_ms(START_SECONDS, scenario) / 1000, over=True)],
                delay_ms=_ms(START_SECONDS, scenario),
                status=RUNNING_STATUS,
                event=started,
            ),
            _stage(
                f"image-{index}-pulled-after-back-off",
                [*backing_off, _outage(_ms(PULL_RETRY_SECONDS, scenario) / 1000, over=True)],
                delay_ms=_ms(PULL_RETRY_SECONDS, scenario),
                status=RUNNING_STATUS,
                event=started,
            ),
        ]
    return out


def scenario_config_query(scenario: Scenario) -> str:
    """jq: the first Secret/ConfigMap a pod needs that the scenario does not create."""
    return _config_refs_query(_known_objects(scenario))


def _known_objects(scenario: Scenario) -> list[str]:
    return sorted(
        [f"secret:{s.namespace}/{s.name}" for s in scenario.secrets]
        + [f"configmap:{c.namespace}/{c.name}" for c in scenario.configmaps]
    )


def runs(behaviour: ImageBehaviour) -> bool:
    """Whether a pod of this image ever starts (its pull works, at once or after ``for_seconds``)."""
    return behaviour.pull == "ok" or (behaviour.pull != "invalid_name" and behaviour.for_seconds is not None)


def stages(scenario: Scenario) -> list[dict[str, Any]]:
    """The pod Stages for ``scenario`` (call :func:`check_supported` first)."""
    known = _known_objects(scenario)
    missing_config = _config_refs_query(known)
    out: list[dict[str, Any]] = [
        _stage(
            "pod-create",
            [ALIVE, _expr(".status.podIP", "DoesNotExist")],
            delay_ms=_ms(CREATE_SECONDS, scenario),
            status=CREATE_STATUS,
        ),
        _stage(
            "config-missing",
            [*CREATING, _expr(missing_config, "Exists")],
            delay_ms=_ms(START_SECONDS, scenario),
            status=CONFIG_ERROR_STATUS.replace("KNOWN", " ".join(json.dumps(k) for k in known)),
            event=("Warning", "Failed", "Error: CreateContainerConfigError"),
        ),
    ]
    images = sorted(scenario.images.items())
    not_pulling = [ref for ref, behaviour in images if behaviour.pull != "ok"]
    for index, (ref, behaviour) in enumerate(images):
        if behaviour.pull != "ok":
            out += _pull_stages(index, ref, behaviour, scenario)
    start = [*CREATING, _expr(missing_config, "DoesNotExist")]
    if not_pulling:
        start.append(_expr(IMAGE_KEY, "NotIn", not_pulling))
    out.append(
        _stage(
            "pod-start",
            start,
            delay_ms=_ms(START_SECONDS, scenario),
            status=RUNNING_STATUS,
            event=("Normal", "Started", "Started container"),
        )
    )
    running = [
        ALIVE,
        _expr(".status.phase", "In", ["Running"]),
        _expr(".spec.restartPolicy", "In", ["Never"]),
        _expr(".status.containerStatuses.[0].state.running.startedAt", "Exists"),
    ]
    listed = [ref for ref, behaviour in images if runs(behaviour)]
    for index, (ref, behaviour) in enumerate(images):
        if runs(behaviour):
            out.append(
                _stage(
                    f"image-{index}-exit",
                    [*running, _expr(IMAGE_KEY, "In", [ref])],
                    delay_ms=_ms(behaviour.run.duration_seconds, scenario),
                    status=_terminated_status(behaviour.run.exit_code, behaviour.run.oom),
                )
            )
    default_exit = list(running)
    if listed:
        default_exit.append(_expr(IMAGE_KEY, "NotIn", listed))
    out.append(
        _stage(
            "pod-exit",
            default_exit,
            delay_ms=_ms(1.0, scenario),
            status=_terminated_status(0, False),
        )
    )
    out.append(
        _stage(
            "pod-delete",
            [_expr(".metadata.deletionTimestamp", "Exists")],
            delay_ms=_ms(DELETE_SECONDS, scenario),
            delete=True,
        )
    )
    return out


NODE_INITIALIZE = """\
{{ $now := Now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
addresses:
- address: {{ NodeIP | Quote }}
  type: InternalIP
- address: {{ .metadata.name | Quote }}
  type: Hostname
allocatable:
{{ with .status.allocatable }}{{ YAML . 1 }}{{ else }}
  cpu: "64"
  memory: 256Gi
  pods: "110"
{{ end }}
capacity:
{{ with .status.capacity }}{{ YAML . 1 }}{{ else }}
  cpu: "64"
  memory: 256Gi
  pods: "110"
{{ end }}
nodeInfo:
  architecture: amd64
  operatingSystem: linux
  kubeletVersion: {{ printf "kwok-%s" Version | Quote }}
  containerRuntimeVersion: {{ printf "kwok-%s" Version | Quote }}
  kernelVersion: {{ printf "kwok-%s" Version | Quote }}
  kubeProxyVersion: ""
  machineID: ""
  bootID: ""
  osImage: ""
  systemUUID: ""
daemonEndpoints:
  kubeletEndpoint:
    Port: {{ NodePort }}
phase: Running
"""


NODE_READY = '.status.conditions.[] | select( .type == "Ready" ) | .status'


def node_stages() -> list[dict[str, Any]]:
    """Nodes become Ready once; the heartbeat is KWOK's node Lease, renewed while it manages the node."""
    return [
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Stage",
            "metadata": {"name": "node-initialize"},
            "spec": {
                "resourceRef": {"apiGroup": "v1", "kind": "Node"},
                "selector": {"matchExpressions": [_expr(NODE_READY, "NotIn", ["True"])]},
                "next": {"statusTemplate": NODE_INITIALIZE},
            },
        }
    ]


def kwok_config(scenario: Scenario) -> str:
    """The YAML documents of KWOK's ``--config`` file for ``scenario``."""
    import yaml

    check_supported(scenario)
    docs = [*node_stages(), *stages(scenario)]
    return yaml.safe_dump_all(docs, sort_keys=False, width=1_000_000)
