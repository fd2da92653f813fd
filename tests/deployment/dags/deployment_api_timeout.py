"""A task whose pod ends while the api-server (and so the execution API) answers nothing."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_k8s_retry.operators import RetryingPodOperator

with DAG(dag_id="deployment_api_timeout", schedule=None, start_date=datetime(2024, 1, 1)):
    RetryingPodOperator(
        task_id="app", image="example.com/api-timeout/app:1", retries=1, retry_delay=timedelta(seconds=5)
    )
