"""deferrable=False, as a KPO DAG in its default mode: the worker follows the pod itself."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_k8s_retry.operators import RetryingPodOperator

with DAG(dag_id="deployment_no_triggerer", schedule=None, start_date=datetime(2024, 1, 1)):
    RetryingPodOperator(
        task_id="app",
        image="example.com/sync/app:try{{ ti.try_number }}",
        deferrable=False,
        retries=1,
        retry_delay=timedelta(seconds=1),
    )
