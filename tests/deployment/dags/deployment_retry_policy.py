"""An OOM-killed first try, retried after the delay its cause gets, not the task's hour."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_k8s_retry.operators import RetryingPodOperator
from airflow_k8s_retry.retry_policy import PodFailureRetryPolicy

with DAG(dag_id="deployment_retry_policy", schedule=None, start_date=datetime(2024, 1, 1)):
    RetryingPodOperator(
        task_id="app",
        image="example.com/policy/app:try{{ ti.try_number }}",
        retries=1,
        retry_delay=timedelta(hours=1),
        retry_policy=PodFailureRetryPolicy({"container.oom": timedelta(seconds=8)}),
    )
