"""A task deferred while the metadata database goes away for 30 s, and whose pod ends meanwhile."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_k8s_retry.operators import RetryingPodOperator

with DAG(dag_id="deployment_db_outage", schedule=None, start_date=datetime(2024, 1, 1)):
    RetryingPodOperator(task_id="app", image="example.com/outage/app:1", retries=1)
