"""Four pod tasks share a two-slot pool that counts deferred tasks: at most two pods at a time."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_k8s_retry.operators import RetryingPodOperator

with DAG(dag_id="deployment_pool_deferred", schedule=None, start_date=datetime(2024, 1, 1)):
    # Queued first (highest priority), so its failure frees a slot that a waiting task takes.
    RetryingPodOperator(
        task_id="broken",
        image="example.com/pool/broken:1",
        pool="k8s_two_deferred",
        retries=0,
        priority_weight=10,
    )
    for name in ("a", "b", "c"):
        RetryingPodOperator(task_id=name, image="example.com/pool/job:1", pool="k8s_two_deferred")
