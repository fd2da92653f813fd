"""Three pod tasks share a one-slot pool: two succeed, one fails once and is retried by Airflow."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_k8s_retry.operators import RetryingPodOperator

with DAG(dag_id="deployment_pool_slots", schedule=None, start_date=datetime(2024, 1, 1)):
    for name in ("first", "second"):
        RetryingPodOperator(task_id=name, image="example.com/pool/slow-job:1", pool="k8s_one_slot")
    RetryingPodOperator(
        task_id="flaky",
        image="example.com/pool/slow-broken:1",
        pool="k8s_one_slot",
        retries=1,
        retry_delay=timedelta(seconds=1),
    )
