"""Build the pod a task creates from the arguments DAG authors know from ``KubernetesPodOperator``.

The result is the pod as API JSON (camelCase keys, plain dicts and lists), ready for
``create_namespaced_pod``. Arguments may be ``kubernetes.client`` model objects (``V1EnvVar``,
``V1Volume``, ``V1Affinity`` ...) or their API-JSON dicts; both end up as the same JSON.

Merging, lowest precedence first: the pod template (``pod_template_file`` or a template dict),
then ``full_pod_spec``, then the operator's own arguments. Dicts merge key by key, lists of named
things (containers, volumes, env, mounts, ports) merge by ``name``, other lists are concatenated
without duplicates. The base container is the one named ``base_container_name`` (``base``), or
else the first container of the template.

Airflow-free, so it can be unit-tested and reused outside a task.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

XCOM_SIDECAR_NAME = "airflow-xcom-sidecar"
XCOM_MOUNT_PATH = "/airflow/xcom"
XCOM_RESULT_PATH = f"{XCOM_MOUNT_PATH}/return.json"
XCOM_VOLUME = "xcom"
XCOM_SIDECAR_IMAGE = "alpine:3.20"
XCOM_SIDECAR_COMMAND = ["sh", "-c", 'trap "exit 0" INT; while true; do sleep 1; done;']
DEFAULT_BASE_CONTAINER = "base"


class PodSpecError(ValueError):
    """An argument cannot be turned into a valid pod. The message names the argument and the fix."""


@dataclass
class PodArguments:
    """The pod-building arguments of ``KubernetesPodOperator``, as accepted by this package.

    Every field mirrors the argument of the same name; values may be Kubernetes model objects or
    API-JSON dicts.
    """

    image: str | None = None
    cmds: Sequence[str] | None = None
    arguments: Sequence[str] | None = None
    env_vars: Any = None  # list[V1EnvVar | dict] or dict[str, str]
    env_from: Sequence[Any] | None = None
    labels: Mapping[str, str] | None = None
    annotations: Mapping[str, str] | None = None
    container_resources: Any = None
    ports: Sequence[Any] | None = None
    volumes: Sequence[Any] | None = None
    volume_mounts: Sequence[Any] | None = None
    secrets: Sequence[Any] | None = None  # cncf ``Secret`` objects (duck-typed)
    configmaps: Sequence[str] | None = None
    node_selector: Mapping[str, str] | None = None
    affinity: Any = None
    tolerations: Sequence[Any] | None = None
    service_account_name: str | None = None
    automount_service_account_token: bool | None = None
    image_pull_secrets: Any = None  # list of V1LocalObjectReference/dict/str, or "a,b"
    image_pull_policy: str | None = None
    init_containers: Sequence[Any] | None = None
    security_context: Any = None
    container_security_context: Any = None
    host_network: bool = False
    dns_policy: str | None = None
    hostname: str | None = None
    subdomain: str | None = None
    scheduler_name: str | None = None
    priority_class_name: str | None = None
    runtime_class_name: str | None = None
    termination_grace_period: int | None = None
    active_deadline_seconds: int | None = None
    base_container_name: str = DEFAULT_BASE_CONTAINER
    do_xcom_push: bool = False
    xcom_sidecar_image: str = XCOM_SIDECAR_IMAGE
    pod_template: Mapping[str, Any] | None = None
    full_pod_spec: Any = None


def to_json(value: Any) -> Any:
    """A Kubernetes model object (or a structure holding some) as API JSON; dicts pass through."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if hasattr(value, "openapi_types") and hasattr(value, "attribute_map"):
        from kubernetes.client import ApiClient

        return ApiClient().sanitize_for_serialization(value)
    raise PodSpecError(
        f"cannot use a {type(value).__name__} in a pod: pass a kubernetes.client model object "
        "or its API-JSON dict"
    )


def load_pod_template(path: str | Path) -> dict[str, Any]:
    """Read a pod template file (YAML or JSON) and check it is a pod."""
    import yaml

    file = Path(path)
    if not file.is_file():
        raise PodSpecError(f"pod_template_file {str(file)!r} does not exist or is not a file")
    try:
        data = yaml.safe_load(file.read_text())
    except yaml.YAMLError as exc:
        raise PodSpecError(f"pod_template_file {str(file)!r} is not valid YAML or JSON: {exc}") from exc
    return check_pod_template(data, f"pod_template_file {str(file)!r}")


def check_pod_template(data: Any, what: str) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise PodSpecError(f"{what} must hold one Pod object (a mapping), not {type(data).__name__}")
    kind = data.get("kind", "Pod")
    if kind != "Pod":
        raise PodSpecError(f"{what} must be kind: Pod, not kind: {kind}")
    spec = data.get("spec")
    if spec is not None and not isinstance(spec, Mapping):
        raise PodSpecError(f"{what}: spec must be a mapping")
    containers = (spec or {}).get("containers")
    if containers is not None and not isinstance(containers, list):
        raise PodSpecError(f"{what}: spec.containers must be a list")
    return copy.deepcopy(dict(data))


def _named_list(value: Any, argument: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise PodSpecError(f"{argument} must be a list, not {type(value).__name__}")
    items = to_json(list(value))
    for item in items:
        if not isinstance(item, dict):
            raise PodSpecError(f"every item of {argument} must be a model object or a dict, got {item!r}")
    return list(items)


def _string_map(value: Any, argument: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PodSpecError(f"{argument} must be a dict of strings, not {type(value).__name__}")
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key:
            raise PodSpecError(f"{argument} keys must be non-empty strings, got {key!r}")
        if item is not None and not isinstance(item, str | int | float | bool):
            raise PodSpecError(f"{argument}[{key!r}] must be a string, got {type(item).__name__}")
        out[key] = "" if item is None else str(item)
    return out


def env_list(env_vars: Any) -> list[dict[str, Any]]:
    """``env_vars`` as API JSON: a dict becomes name/value pairs, a list passes through."""
    if env_vars is None:
        return []
    if isinstance(env_vars, Mapping):
        return [{"name": k, "value": v} for k, v in _string_map(env_vars, "env_vars").items()]
    items = _named_list(env_vars, "env_vars")
    for item in items:
        if not item.get("name"):
            raise PodSpecError(f"every env_vars entry needs a name, got {item!r}")
    return items


def pull_secret_list(value: Any) -> list[dict[str, Any]]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [{"name": name.strip()} for name in value.split(",") if name.strip()]
    if not isinstance(value, Sequence):
        raise PodSpecError(
            "image_pull_secrets must be a list of V1LocalObjectReference, dicts or names, "
            f"or a comma-separated string, not {type(value).__name__}"
        )
    out = []
    for item in value:
        ref = {"name": item} if isinstance(item, str) else to_json(item)
        if not isinstance(ref, dict) or not ref.get("name"):
            raise PodSpecError(f"every image_pull_secrets entry needs a name, got {item!r}")
        out.append(ref)
    return out


def resources_json(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    data = to_json(value)
    if not isinstance(data, dict):
        raise PodSpecError("container_resources must be a V1ResourceRequirements or a dict")
    unknown = set(data) - {"requests", "limits", "claims"}
    if unknown:
        raise PodSpecError(
            f"container_resources has unknown key(s) {sorted(unknown)}: use 'requests' and 'limits', "
            "e.g. {'requests': {'cpu': '100m'}, 'limits': {'memory': '256Mi'}}"
        )
    for part in ("requests", "limits"):
        if part in data and data[part] is not None and not isinstance(data[part], dict):
            raise PodSpecError(f"container_resources[{part!r}] must be a dict like {{'cpu': '100m'}}")
    return {k: v for k, v in data.items() if v is not None}


_Json = dict[str, Any]


def secret_parts(secrets: Sequence[Any] | None) -> tuple[list[_Json], list[_Json], list[_Json], list[_Json]]:
    """cncf ``Secret`` objects as (env, envFrom, volumes, volumeMounts) of the base container."""
    env: list[dict[str, Any]] = []
    env_from: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for secret in secrets or ():
        deploy_type = getattr(secret, "deploy_type", None)
        name = getattr(secret, "secret", None)
        target = getattr(secret, "deploy_target", None)
        key = getattr(secret, "key", None)
        if not name or deploy_type not in ("env", "volume"):
            raise PodSpecError(
                "every item of secrets must be an airflow.providers.cncf.kubernetes.secret.Secret "
                f"(deploy_type 'env' or 'volume' and a secret name), got {secret!r}"
            )
        if deploy_type == "env":
            if target and key:
                env.append({"name": target, "valueFrom": {"secretKeyRef": {"name": name, "key": key}}})
            elif target or key:
                raise PodSpecError(
                    f"secret {name!r}: an env secret needs both deploy_target and key, or neither"
                )
            else:
                env_from.append({"secretRef": {"name": name}})
            continue
        if not target:
            raise PodSpecError(f"secret {name!r}: a volume secret needs deploy_target (the mount path)")
        volume_name = f"secretvol-{name}"[:63].rstrip("-.")
        source: dict[str, Any] = {"secretName": name}
        items = getattr(secret, "items", None)
        if items:
            source["items"] = to_json(list(items))
        volumes.append({"name": volume_name, "secret": source})
        mount: dict[str, Any] = {"name": volume_name, "mountPath": target, "readOnly": True}
        if key:
            mount["subPath"] = key
        mounts.append(mount)
    return env, env_from, volumes, mounts


def _merge(base: Any, override: Any) -> Any:
    """Merge API JSON: dicts key by key, named lists by name, other lists without duplicates."""
    if isinstance(base, dict) and isinstance(override, dict):
        merged = dict(base)
        for key, value in override.items():
            merged[key] = _merge(base[key], value) if key in base and value is not None else value
        return merged
    if isinstance(base, list) and isinstance(override, list):
        named = all(isinstance(i, dict) and "name" in i for i in [*base, *override])
        if named:
            out = [copy.deepcopy(i) for i in base]
            index = {i["name"]: n for n, i in enumerate(out)}
            for item in override:
                if item["name"] in index:
                    out[index[item["name"]]] = _merge(out[index[item["name"]]], item)
                else:
                    index[item["name"]] = len(out)
                    out.append(copy.deepcopy(item))
            return out
        return [copy.deepcopy(i) for i in base] + [copy.deepcopy(i) for i in override if i not in base]
    return copy.deepcopy(override)


def _compact(value: dict[str, Any]) -> dict[str, Any]:
    """Drop the fields the operator left unset (None, empty), one level deep: user content such as
    ``emptyDir: {}`` inside a volume is kept as given."""
    return {k: v for k, v in value.items() if v is not None and v not in ({}, [])}


def _base_container_name(template: Mapping[str, Any], preferred: str) -> str:
    containers = (template.get("spec") or {}).get("containers") or []
    names = [c.get("name") for c in containers if isinstance(c, Mapping)]
    if preferred in names or not names:
        return preferred
    return str(names[0])


def build_pod(
    args: PodArguments,
    *,
    name: str,
    namespace: str,
    identity_labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The pod to create, as API JSON. ``identity_labels`` win over every other label source."""
    template: dict[str, Any] = {}
    if args.pod_template is not None:
        template = check_pod_template(to_json(args.pod_template), "the pod template")
    if args.full_pod_spec is not None:
        template = _merge(template, check_pod_template(to_json(args.full_pod_spec), "full_pod_spec"))

    base_name = _base_container_name(template, args.base_container_name)
    template_base: dict[str, Any] = next(
        (c for c in (template.get("spec") or {}).get("containers") or [] if c.get("name") == base_name), {}
    )
    image = args.image or template_base.get("image")
    if not image:
        raise PodSpecError(
            "no image: pass image=... or give the base container an image in pod_template_file/full_pod_spec"
        )
    if not isinstance(image, str) or image != image.strip():
        raise PodSpecError(f"image must be a non-empty string without surrounding spaces, got {image!r}")
    for arg_name in ("cmds", "arguments"):
        value = getattr(args, arg_name)
        if value is not None and (isinstance(value, str) or not all(isinstance(v, str) for v in value)):
            raise PodSpecError(f"{arg_name} must be a list of strings, e.g. ['echo', 'hello'], got {value!r}")

    secret_env, secret_env_from, secret_volumes, secret_mounts = secret_parts(args.secrets)
    env_from = _named_list(args.env_from, "env_from") + secret_env_from
    env_from += [{"configMapRef": {"name": cm}} for cm in args.configmaps or ()]

    container: dict[str, Any] = {
        "name": base_name,
        "image": image,
        "command": list(args.cmds) if args.cmds is not None else None,
        "args": list(args.arguments) if args.arguments is not None else None,
        "env": env_list(args.env_vars) + secret_env,
        "envFrom": env_from,
        "ports": _named_list(args.ports, "ports"),
        "volumeMounts": _named_list(args.volume_mounts, "volume_mounts") + secret_mounts,
        "resources": resources_json(args.container_resources),
        "imagePullPolicy": args.image_pull_policy,
        "securityContext": to_json(args.container_security_context),
    }
    volumes = _named_list(args.volumes, "volumes") + secret_volumes
    mount_names = {m.get("name") for m in container["volumeMounts"]}
    known_volumes = {v.get("name") for v in volumes} | {
        v.get("name") for v in (template.get("spec") or {}).get("volumes") or []
    }
    missing = sorted(str(n) for n in mount_names - known_volumes)
    if missing:
        raise PodSpecError(
            f"volume_mounts name volume(s) {missing} that are not in volumes: add them to volumes"
        )

    tolerations = _named_list(args.tolerations, "tolerations") if args.tolerations is not None else []
    affinity = to_json(args.affinity)
    if affinity is not None and not isinstance(affinity, dict):
        raise PodSpecError("affinity must be a V1Affinity or a dict")
    spec: dict[str, Any] = {
        "containers": [],
        "initContainers": _named_list(args.init_containers, "init_containers"),
        "volumes": volumes,
        "nodeSelector": _string_map(args.node_selector, "node_selector"),
        "affinity": affinity,
        "tolerations": tolerations,
        "serviceAccountName": args.service_account_name,
        "automountServiceAccountToken": args.automount_service_account_token,
        "imagePullSecrets": pull_secret_list(args.image_pull_secrets),
        "securityContext": to_json(args.security_context),
        "hostNetwork": args.host_network or None,
        "dnsPolicy": args.dns_policy,
        "hostname": args.hostname,
        "subdomain": args.subdomain,
        "schedulerName": args.scheduler_name,
        "priorityClassName": args.priority_class_name,
        "runtimeClassName": args.runtime_class_name,
        "terminationGracePeriodSeconds": args.termination_grace_period,
        "activeDeadlineSeconds": args.active_deadline_seconds,
        "restartPolicy": "Never",
    }
    labels = {**_string_map(args.labels, "labels"), **dict(identity_labels or {})}
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": labels,
        "annotations": {**_string_map(args.annotations, "annotations"), **dict(annotations or {})},
    }
    spec["containers"] = [_compact(container)]
    ours = {"apiVersion": "v1", "kind": "Pod", "metadata": _compact(metadata), "spec": _compact(spec)}
    pod: dict[str, Any] = _merge(template, ours)
    # Identity is not negotiable: a template cannot rename the pod or move it.
    pod["metadata"]["name"] = name
    pod["metadata"]["namespace"] = namespace
    pod["metadata"].pop("generateName", None)
    pod["spec"]["restartPolicy"] = "Never"
    if args.do_xcom_push:
        add_xcom_sidecar(pod, base_name, args.xcom_sidecar_image)
    return pod


def add_xcom_sidecar(pod: dict[str, Any], base_name: str, image: str = XCOM_SIDECAR_IMAGE) -> None:
    """The cncf provider's XCom convention: the base container writes ``/airflow/xcom/return.json``
    to a shared ``emptyDir``, and a sidecar keeps the pod alive until the result is read."""
    spec = pod["spec"]
    mount = {"name": XCOM_VOLUME, "mountPath": XCOM_MOUNT_PATH}
    if not any(v.get("name") == XCOM_VOLUME for v in spec.get("volumes", [])):
        spec["volumes"] = [{"name": XCOM_VOLUME, "emptyDir": {}}, *spec.get("volumes", [])]
    for container in spec["containers"]:
        if container["name"] == base_name and not any(
            m.get("name") == XCOM_VOLUME for m in container.get("volumeMounts", [])
        ):
            container["volumeMounts"] = [mount, *container.get("volumeMounts", [])]
    if not any(c["name"] == XCOM_SIDECAR_NAME for c in spec["containers"]):
        spec["containers"].append(
            {
                "name": XCOM_SIDECAR_NAME,
                "image": image,
                "command": list(XCOM_SIDECAR_COMMAND),
                "volumeMounts": [dict(mount)],
                "resources": {"requests": {"cpu": "1m", "memory": "10Mi"}},
            }
        )


def pod_summary(pod: Mapping[str, Any]) -> str:
    """A one-line description for logs: never includes env values."""
    meta = pod.get("metadata") or {}
    images = [c.get("image") for c in (pod.get("spec") or {}).get("containers") or []]
    return json.dumps({"name": meta.get("name"), "namespace": meta.get("namespace"), "images": images})
