"""The objects a simulated cluster starts with, and the ones tests add while it runs.

Namespaces (``default``, ``kube-system``, ``kube-public`` and the scenario's), one Node object per
scheduler node, and the scenario's Secrets and ConfigMaps. They are written straight into the
store, as a cluster's bootstrap would, not through the API (no request is counted or audited).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_k8s_retry_testing.scenario import NodeSpec, Scenario
from airflow_k8s_retry_testing.store import Store, now_iso

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public")


def seed(store: Store, scenario: Scenario, nodes: Iterable[NodeSpec]) -> None:
    for name in (*SYSTEM_NAMESPACES, *scenario.namespaces):
        if store.get("namespaces", "", name) is None:
            put_namespace(store, name)
    for node in nodes:
        store.put("nodes", node_object(node), "ADDED")
        store.objects["nodes"][("", node.name)]["metadata"].pop("namespace", None)
    for spec in scenario.secrets:
        put_data(store, "secrets", spec.name, spec.namespace, spec.data)
    for spec in scenario.configmaps:
        put_data(store, "configmaps", spec.name, spec.namespace, spec.data)


def node_object(spec: NodeSpec) -> dict[str, Any]:
    name = spec.name
    alloc = {
        "cpu": f"{int(spec.cpu * 1000)}m",
        "memory": f"{int(spec.memory / 1024)}Ki",
        "pods": str(spec.pods),
    }
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": "",
            "uid": f"node-{name}",
            "creationTimestamp": now_iso(),
            "labels": spec.all_labels(),
        },
        "spec": {},
        "status": {
            "capacity": alloc,
            "allocatable": alloc,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def put_namespace(store: Store, name: str) -> None:
    store.put(
        "namespaces",
        {
            "kind": "Namespace",
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "namespace": "",
                "uid": str(uuid.uuid4()),
                "creationTimestamp": now_iso(),
                "labels": {"kubernetes.io/metadata.name": name},
            },
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        },
        "ADDED",
    )
    store.objects["namespaces"][("", name)]["metadata"].pop("namespace", None)


def put_data(store: Store, resource: str, name: str, namespace: str, data: Mapping[str, str] | None) -> None:
    """Create or replace a Secret or ConfigMap; ``data=None``: any key looked up in it exists."""
    kind = "Secret" if resource == "secrets" else "ConfigMap"
    if store.get("namespaces", "", namespace) is None:
        put_namespace(store, namespace)
    values = dict(data or {})
    obj: dict[str, Any] = {
        "kind": kind,
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": str(uuid.uuid4()),
            "creationTimestamp": now_iso(),
        },
    }
    if resource == "secrets":
        obj["type"] = "Opaque"
        obj["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}
    else:
        obj["data"] = values
    if data is None:
        store.open_keys.add((kind, namespace, name))
    else:
        store.open_keys.discard((kind, namespace, name))
    store.put(resource, obj, "MODIFIED" if store.get(resource, namespace, name) else "ADDED")
