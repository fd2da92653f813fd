"""Wait for pods that another system creates: by label selector, by name (created later), and a Job.

``start_report`` and ``start_etl`` stand in for that other system (a controller, a CronJob): they
create a pod and a ``batch/v1`` Job with the Kubernetes client. ``PodCompletionSensor`` is an
Airflow sensor that always defers: it waits in the triggerer, through the shared watch, for what it
is told to wait for, and judges it with the operator's classifier.

* ``wait_for_report`` finds the report pod by a label selector (the newest matching pod is
  followed) and is asked to delete it when it finishes (``delete_pod_on_finish=True``), so the
  example leaves no pod behind; the sensor deletes nothing it did not create unless asked.
* ``wait_for_export`` waits by name for a pod nobody in this DAG creates: another system creates it
  later. The sensor waits for it to appear (saying so in the task log once a minute), and with
  ``soft_fail=True`` a pod that does not come within ``timeout`` skips the task instead of failing
  it. Without ``soft_fail``, the timeout fails the task at once, whatever ``retries`` says.
* ``wait_for_etl`` follows the Job's pods: a pod the Job replaces (``backoffLimit``) is not the end,
  the Job's verdict is (``Complete``, or ``Failed`` with the classified cause of its last pod).
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from airflow.sdk import DAG, task

from airflow_k8s_retry.sensors import PodCompletionSensor

RUN = "{{ ti.xcom_pull(task_ids='start_report') }}"


@task
def start_report(run_id: str | None = None) -> str:
    """Create the pod the sensor waits for; return the label value that identifies it."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    run = hashlib.sha256(str(run_id).encode()).hexdigest()[:10]
    hook = KubernetesHook(conn_id="kubernetes_default")
    hook.core_v1_client.create_namespaced_pod(
        namespace=hook.get_namespace() or "default",
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


@task
def start_etl(run: str) -> str:
    """Create a Job whose pods the Job controller may replace (up to backoffLimit failures)."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    name = f"nightly-etl-{run}"
    hook = KubernetesHook(conn_id="kubernetes_default")
    hook.batch_v1_client.create_namespaced_job(
        namespace=hook.get_namespace() or "default",
        body={
            "metadata": {"name": name},
            "spec": {
                "backoffLimit": 2,
                "ttlSecondsAfterFinished": 3600,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "etl", "image": "busybox:1.36", "command": ["true"]}],
                    }
                },
            },
        },
    )
    return name


with DAG(
    dag_id="06_sensor",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    tags=["airflow-k8s-retry", "example"],
):
    run = start_report()
    wait_for_report = PodCompletionSensor(
        task_id="wait_for_report",
        label_selector=f"app=nightly-report,run={RUN}",
        delete_pod_on_finish=True,
        poke_interval=2,
    )
    wait_for_export = PodCompletionSensor(
        task_id="wait_for_export",
        pod_name=f"nightly-export-{RUN}",
        timeout=timedelta(seconds=30),
        soft_fail=True,
        delete_pod_on_finish=True,
    )
    etl = start_etl(run)
    wait_for_etl = PodCompletionSensor(
        task_id="wait_for_etl",
        job_name="{{ ti.xcom_pull(task_ids='start_etl') }}",
        timeout=timedelta(minutes=30),
    )
    run >> [wait_for_report, wait_for_export] >> etl >> wait_for_etl
