"""A pod evicted while it runs: relaunched inside the same try, without spending a retry.

Eviction, preemption, a node drain or a lost node take the pod away for reasons that have nothing
to do with the task. The operator deletes the evicted pod and starts a fresh one in the same try
(up to ``FailurePolicy(relaunch_budget=...)`` times), so the task succeeds on try 1 with two pods.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_k8s_retry.classification import FailurePolicy
from airflow_k8s_retry.operators import RetryingPodOperator

with DAG(
    dag_id="05_eviction_relaunch",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    tags=["airflow-k8s-retry", "example"],
):
    RetryingPodOperator(
        task_id="train",
        image="example.com/ml/train:2",
        cmds=["python", "train.py"],
        retries=0,
        retry_delay=timedelta(seconds=2),
        failure_policy=FailurePolicy(relaunch_budget=2),
    )
