"""What a container needs from the API before it can start: its volumes' and env's sources.

The kubelet mounts ``secret``/``configMap`` (and projected) volumes before the sandbox is ready,
retrying with ``FailedMount`` Events while one is missing, and builds each container's
environment from ``secretKeyRef``/``configMapKeyRef``/``envFrom`` when it creates the container,
failing with ``CreateContainerConfigError`` while a source or key is missing. These functions say
what is missing, in the kubelet's words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_k8s_retry_testing.store import Obj, Store

_ENV_REFS = (("secretKeyRef", "secrets", "Secret"), ("configMapKeyRef", "configmaps", "ConfigMap"))
_ENV_FROM_REFS = (("secretRef", "secrets"), ("configMapRef", "configmaps"))


def _volume_sources(volume: Obj) -> list[tuple[str, Obj]]:
    """The (kind, source) pairs a volume reads: its own secret/configMap and projected ones."""
    sources: list[tuple[str, Obj]] = []
    if "secret" in volume:
        sources.append(("secret", volume["secret"]))
    if "configMap" in volume:
        sources.append(("configMap", volume["configMap"]))
    for proj in (volume.get("projected") or {}).get("sources") or []:
        for kind in ("secret", "configMap"):
            if kind in proj:
                sources.append((kind, proj[kind]))
    return sources


def missing_volume(store: Store, pod: Obj) -> tuple[str, str] | None:
    """(volume name, why) for the first volume whose required Secret/ConfigMap is missing."""
    namespace = pod["metadata"]["namespace"]
    for volume in pod["spec"].get("volumes") or []:
        for kind, src in _volume_sources(volume):
            if src.get("optional"):
                continue
            name = src.get("secretName") if kind == "secret" and "secretName" in src else src.get("name")
            resource = "secrets" if kind == "secret" else "configmaps"
            if store.get(resource, namespace, name or "") is None:
                what = "secret" if kind == "secret" else "configmap"
                return volume["name"], f'{what} "{name}" not found'
    return None


def config_error(store: Store, namespace: str, spec: Obj) -> str | None:
    """Why the container's env cannot be built, in the kubelet's words, or None."""
    for env in spec.get("env") or []:
        error = _env_error(store, namespace, env.get("valueFrom") or {})
        if error is not None:
            return error
    for env_from in spec.get("envFrom") or []:
        for kind, resource in _ENV_FROM_REFS:
            ref = env_from.get(kind)
            if not ref or ref.get("optional"):
                continue
            if store.get(resource, namespace, ref.get("name", "")) is None:
                what = "secret" if resource == "secrets" else "configmap"
                return f'{what} "{ref.get("name")}" not found'
    return None


def _env_error(store: Store, namespace: str, source: Obj) -> str | None:
    for kind, resource, label in _ENV_REFS:
        ref = source.get(kind)
        if not ref or ref.get("optional"):
            continue
        obj = store.get(resource, namespace, ref.get("name", ""))
        if obj is None:
            what = "secret" if resource == "secrets" else "configmap"
            return f'{what} "{ref.get("name")}" not found'
        if not has_key(store, obj, ref.get("key", "")):
            return f"couldn't find key {ref.get('key')} in {label} {namespace}/{ref.get('name')}"
    return None


def has_key(store: Store, obj: Mapping[str, Any], key: str) -> bool:
    """Whether a Secret/ConfigMap holds ``key`` (any key, for one declared by bare name)."""
    meta = obj.get("metadata") or {}
    if (obj.get("kind", ""), meta.get("namespace", ""), meta.get("name", "")) in store.open_keys:
        return True
    return key in (obj.get("data") or {}) or key in (obj.get("stringData") or {})
