"""A pod that succeeds: the smallest use of RetryingPodOperator.

The operator creates one pod for the try, defers while it runs, writes the container's log to
the task log, deletes the pod and finishes.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_k8s_retry.operators import RetryingPodOperator

with DAG(
    dag_id="01_basic",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    tags=["airflow-k8s-retry", "example"],
):
    RetryingPodOperator(
        task_id="hello",
        image="busybox:1.36",
        cmds=["sh", "-c"],
        arguments=["echo hello from $HOSTNAME"],
        labels={"team": "examples"},
        container_resources={"requests": {"cpu": "50m", "memory": "32Mi"}},
    )
