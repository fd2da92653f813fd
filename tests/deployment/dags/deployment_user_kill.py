"""A long-running pod whose task instance a user marks failed while it is deferred."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_k8s_retry.operators import RetryingPodOperator

with DAG(dag_id="deployment_user_kill", schedule=None, start_date=datetime(2024, 1, 1)):
    RetryingPodOperator(task_id="long", image="example.com/long:1", retries=2)
