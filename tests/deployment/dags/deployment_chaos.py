"""Chaos in a real deployment: 50 deferred pod tasks, and a task whose worker dies mid-create.

The 50 tasks pull an image the registry throttles until the test lets it through, so all of them
are deferred at once while a triggerer is killed; the grace is stretched past the test's length.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_k8s_retry.classification.policy import FailurePolicy
from airflow_k8s_retry.operators import RetryingPodOperator

TASKS = 50
THROTTLED_IMAGE = "example.com/chaos/throttled:1"
CRASH_IMAGE = "example.com/chaos/quick:1"

with DAG(dag_id="deployment_chaos_deferred", schedule=None, start_date=datetime(2024, 1, 1)):
    for index in range(TASKS):
        RetryingPodOperator(
            task_id=f"job{index:02d}",
            image=THROTTLED_IMAGE,
            retries=1,
            failure_policy=FailurePolicy(grace={"image.rate_limited": 100_000}),
        )

with DAG(dag_id="deployment_chaos_worker_crash", schedule=None, start_date=datetime(2024, 1, 1)):
    RetryingPodOperator(task_id="crash", image=CRASH_IMAGE, retries=1, retry_delay=timedelta(seconds=10))

with DAG(dag_id="deployment_chaos_worker_crash_last_try", schedule=None, start_date=datetime(2024, 1, 1)):
    RetryingPodOperator(task_id="crash", image=CRASH_IMAGE, retries=0)
