"""What happens between tries, by cause (Airflow 3.3's retry policies).

Every failed try raises an exception of its cause's family (``ImagePullFailure``, ``PodOOMKilled``,
...), and ``PodFailureRetryPolicy`` decides what follows it: how long until the next try, or no next
try at all. Each try's reason code lands in Airflow's own try history (``retry_reason``), where the
UI, ``airflow-k8s-retry explain --dag-id 07_retry_policy --task-id export`` and the failures page
read it.

- ``export``: the registry rate-limits the pull; after the (shortened) grace the try fails with
  ``image.rate_limited`` and the next try waits the policy's delay for that cause (5 s here; the
  default is 10 minutes, doubling per try, at most an hour), by which time the registry lets it
  through.
- ``join``: the container is OOM-killed. The same memory would be killed again, so the policy fails
  the task at once instead of spending its three retries.

Without ``retry_policy`` the operator uses ``PodFailureRetryPolicy()``'s defaults. On Airflow 3.1
and 3.2, which have no retry policies, ``retry_policy`` is ignored with a warning: ``export`` waits
its own 30 s and ``join`` spends all four tries.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_k8s_retry.classification.policy import FailurePolicy
from airflow_k8s_retry.operators import RetryingPodOperator
from airflow_k8s_retry.retry_policy import PodFailureRetryPolicy

POLICY = PodFailureRetryPolicy(
    {
        "container.oom": "fail",
        "image.rate_limited": timedelta(seconds=5),  # shortened so the example finishes in seconds
    }
)

with DAG(
    dag_id="07_retry_policy",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    tags=["airflow-k8s-retry", "example"],
):
    RetryingPodOperator(
        task_id="export",
        image="registry.example.com/team/export:2",
        retries=2,
        retry_delay=timedelta(seconds=30),  # the task's own delay: the policy's wins for a rate limit
        retry_policy=POLICY,
        failure_policy=FailurePolicy(grace={"image.rate_limited": 3}),
    )
    RetryingPodOperator(
        task_id="join",
        image="example.com/etl/join:1",
        retries=3,
        retry_delay=timedelta(seconds=2),
        retry_policy=POLICY,
    )
