"""A pod whose image is missing: the task stays deferred through its grace while its trigger moves."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_k8s_retry.classification.policy import FailurePolicy
from airflow_k8s_retry.operators import RetryingPodOperator

#: Long enough to move the trigger to the other triggerer inside it, and for the first triggerer's
#: on_kill to read the task's state before the verdict: that first read builds the triggerer's
#: in-process execution API (about 4 s of CPU, 15-25 s on a loaded machine). Short enough for a
#: quick test.
GRACE_SECONDS = 45

with DAG(dag_id="deployment_handover", schedule=None, start_date=datetime(2024, 1, 1)):
    RetryingPodOperator(
        task_id="pull",
        image="registry.example.com/team/missing:1",
        retries=0,
        failure_policy=FailurePolicy(grace={"image.not_found": GRACE_SECONDS}),
    )
