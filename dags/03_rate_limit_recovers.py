"""A registry that rate-limits pulls for a while: the kubelet's back-off rides it out, no retry.

``ImagePullBackOff`` with "429 Too Many Requests" gets a long grace (15 minutes by default), so a
short throttle costs nothing: the same pod pulls the image once the registry answers again, and
the task succeeds on try 1 with one pod.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_k8s_retry.operators import RetryingPodOperator

with DAG(
    dag_id="03_rate_limit_recovers",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    tags=["airflow-k8s-retry", "example"],
):
    RetryingPodOperator(
        task_id="pull_through_throttle",
        image="registry.example.com/team/report:1.4",
        cmds=["sh", "-c", "echo report built"],
        retries=2,
        retry_delay=timedelta(seconds=2),
    )
