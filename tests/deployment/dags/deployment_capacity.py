"""Six deferred tasks for two triggerers whose ``[triggerer] capacity`` is 2."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_k8s_retry.operators import RetryingPodOperator

TASKS = 6

with DAG(dag_id="deployment_capacity", schedule=None, start_date=datetime(2024, 1, 1)):
    for n in range(TASKS):
        RetryingPodOperator(task_id=f"job_{n}", image="example.com/capacity/job:1", retries=1)
