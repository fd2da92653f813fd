"""A task whose pod ends while every scheduler is down."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_k8s_retry.operators import RetryingPodOperator

with DAG(dag_id="deployment_scheduler_restart", schedule=None, start_date=datetime(2024, 1, 1)):
    RetryingPodOperator(task_id="app", image="example.com/restart/app:1", retries=1)
