"""Wait for a pod that another system created, found by label selector.

The first task stands in for that other system (a controller, a CronJob): it creates a pod with
the Kubernetes client. ``PodCompletionSensor`` finds it by a label selector that must match exactly
one pod, watches it with the same classifier as the operator, and succeeds when it succeeds. The
sensor deletes nothing it did not create unless asked; here it is asked
(``delete_pod_on_finish=True``) so the example leaves no pod behind.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from airflow.sdk import DAG, task

from airflow_k8s_retry.sensors import PodCompletionSensor


@task
def start_report(run_id: str | None = None) -> str:
    """Create the pod the sensor waits for; return the label value that identifies it."""
    from kubernetes import client

    from airflow_k8s_retry.connection import resolve_cluster_config
    from airflow_k8s_retry.kube.config import sync_api_client

    run = hashlib.sha256(str(run_id).encode()).hexdigest()[:10]
    config = resolve_cluster_config("kubernetes_default")
    with sync_api_client(config) as api:
        client.CoreV1Api(api).create_namespaced_pod(
            namespace=config.namespace or "default",
            body={
                "metadata": {
                    "name": f"nightly-report-{run}",
                    "labels": {"app": "nightly-report", "run": run},
                },
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "report", "image": "busybox:1.36", "command": ["true"]}],
                },
            },
        )
    return run


with DAG(
    dag_id="06_sensor",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    tags=["airflow-k8s-retry", "example"],
):
    run = start_report()
    wait = PodCompletionSensor(
        task_id="wait_for_report",
        label_selector="app=nightly-report,run={{ ti.xcom_pull(task_ids='start_report') }}",
        delete_pod_on_finish=True,
        poll_interval=2,
    )
    run >> wait
