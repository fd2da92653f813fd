"""A pod that needs a Secret that does not exist: ``CreateContainerConfigError``, then a retry.

A missing Secret is often only late (it is being synced), so the classifier waits a grace period
(60 s by default, shortened here) before it gives up on the try. Each try gets one pod; with
``retries=1`` the task fails after try 2 and both pods are deleted.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.providers.cncf.kubernetes.secret import Secret
from airflow.sdk import DAG

from airflow_k8s_retry.classification.policy import FailurePolicy
from airflow_k8s_retry.operators import RetryingPodOperator

with DAG(
    dag_id="04_missing_secret",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    tags=["airflow-k8s-retry", "example"],
):
    RetryingPodOperator(
        task_id="needs_db_password",
        image="busybox:1.36",
        cmds=["sh", "-c", 'test -n "$DB_PASSWORD"'],
        secrets=[Secret("env", "DB_PASSWORD", "db-credentials", "password")],
        retries=1,
        retry_delay=timedelta(seconds=2),
        failure_policy=FailurePolicy(grace={"config.missing_secret": 3}),
    )
