"""Provider metadata that Airflow's ``ProvidersManager`` reads through the provider entry point.

The Kubernetes connection type is the cncf provider's (``kubernetes``); it is reused, not redefined.
"""

from __future__ import annotations

from typing import Any

from airflow_k8s_retry import __version__


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-k8s-retry",
        "name": "Kubernetes pods with classified retries",
        "description": (
            "Deferrable Kubernetes pod operator and sensor that classify each pod failure once, "
            "clean up the pod, and hand the failure to Airflow's own retries."
        ),
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Kubernetes pods with classified retries",
                "external-doc-url": "https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/",
                "tags": ["software"],
            }
        ],
        "operators": [
            {
                "integration-name": "Kubernetes pods with classified retries",
                "python-modules": ["airflow_k8s_retry.operators"],
            }
        ],
        "sensors": [
            {
                "integration-name": "Kubernetes pods with classified retries",
                "python-modules": ["airflow_k8s_retry.sensors"],
            }
        ],
        "task-decorators": [
            {
                "class-name": "airflow_k8s_retry.decorators.retrying_kubernetes_task",
                "name": "retrying_kubernetes",
            }
        ],
        "config": {
            "kubernetes_retry": {
                "description": "Settings of airflow-k8s-retry.",
                "options": {
                    "deployment_id": {
                        "description": (
                            "A label value naming this Airflow deployment. Set it when several deployments "
                            "share a namespace: pods carry it, and a try adopts or sweeps only its own."
                        ),
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "prod-eu",
                        "default": "",
                    }
                },
            }
        },
        "triggers": [
            {
                "integration-name": "Kubernetes pods with classified retries",
                "python-modules": ["airflow_k8s_retry.triggers"],
            }
        ],
    }
