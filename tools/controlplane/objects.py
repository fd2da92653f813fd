"""The objects a scenario puts in the real cluster: KWOK nodes, namespaces, Secrets, ConfigMaps,
and the definition of KWOK's ``Logs`` resource."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow_k8s_retry_testing.scenario import NodeSpec, ObjectSpec, Scenario

LOGS_DEFINITION = "logs.kwok.x-k8s.io"
ANY_OBJECT = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def _quantity(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{int(value * 1000)}m"


class ClusterObjects:
    """A small admin client over the ``kubernetes`` package, for setting a cluster up."""

    def __init__(self, kubeconfig: Path) -> None:
        from kubernetes import client, config

        self._api_client = config.new_client_from_config(str(kubeconfig))
        self.core = client.CoreV1Api(self._api_client)
        self.node_names: list[str] = []

    def close(self) -> None:
        self._api_client.close()

    def create_nodes(self, annotation: str, specs: list[NodeSpec]) -> None:
        """Create the nodes KWOK plays, with their sizes and labels."""
        from kubernetes.client.exceptions import ApiException

        for spec in specs:
            resources = {"cpu": _quantity(spec.cpu), "memory": str(int(spec.memory)), "pods": str(spec.pods)}
            body: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": spec.name,
                    "annotations": {annotation: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                    "labels": {**spec.all_labels(), "type": "kwok"},
                },
                "status": {"allocatable": resources, "capacity": resources},
            }
            try:
                self.core.create_node(body)
            except ApiException as exc:
                if exc.status != 409:
                    raise
            self.node_names.append(spec.name)

    def create_logs_definition(self) -> None:
        """The CustomResourceDefinition of KWOK's namespaced ``Logs`` (kwok.x-k8s.io/v1alpha1): one
        object per pod, named as the pod, says which file holds each container's log."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        body = {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": LOGS_DEFINITION},
            "spec": {
                "group": "kwok.x-k8s.io",
                "scope": "Namespaced",
                "names": {"kind": "Logs", "listKind": "LogsList", "plural": "logs", "singular": "logs"},
                "versions": [
                    {
                        "name": "v1alpha1",
                        "served": True,
                        "storage": True,
                        "schema": {"openAPIV3Schema": ANY_OBJECT},
                    }
                ],
            },
        }
        try:
            client.ApiextensionsV1Api(self._api_client).create_custom_resource_definition(body)
        except ApiException as exc:
            if exc.status != 409:
                raise

    def logs_definition_established(self) -> bool:
        from kubernetes import client

        crd = client.ApiextensionsV1Api(self._api_client).read_custom_resource_definition(LOGS_DEFINITION)
        return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))

    def nodes_ready(self) -> bool:
        for name in self.node_names:
            node = self.core.read_node(name)
            conditions = {c.type: c.status for c in (node.status.conditions or [])}
            if conditions.get("Ready") != "True":
                return False
        return True

    def create_scenario_objects(self, scenario: Scenario) -> None:
        from kubernetes.client.exceptions import ApiException

        namespaces = {"default", *scenario.namespaces}
        namespaces |= {o.namespace for o in (*scenario.secrets, *scenario.configmaps)}
        self.namespaces = sorted(namespaces)
        for ns in self.namespaces:
            if ns == "default":
                continue
            try:
                self.core.create_namespace({"metadata": {"name": ns}})
            except ApiException as exc:
                if exc.status != 409:
                    raise
        for spec in scenario.secrets:
            self.core.create_namespaced_secret(spec.namespace, _object(spec, "Secret", "stringData"))
        for spec in scenario.configmaps:
            self.core.create_namespaced_config_map(spec.namespace, _object(spec, "ConfigMap", "data"))

    def service_accounts_ready(self) -> bool:
        """Every namespace has its ``default`` ServiceAccount (the controller manager makes them)."""
        from kubernetes.client.exceptions import ApiException

        for ns in getattr(self, "namespaces", ["default"]):
            try:
                self.core.read_namespaced_service_account("default", ns)
            except ApiException as exc:
                if exc.status == 404:
                    return False
                raise
        return True


def _object(spec: ObjectSpec, kind: str, data_field: str) -> dict[str, Any]:
    # An object given by bare name holds one placeholder key: the simulator lets any key resolve,
    # a real cluster only has the keys it has, so scenarios on both backends give their keys.
    data = dict(spec.data) if spec.data is not None else {"value": "placeholder"}
    return {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {"name": spec.name, "namespace": spec.namespace},
        data_field: data,
    }
