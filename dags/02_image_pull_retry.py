"""An image that does not exist, with ``retries=3``: exactly one pod per try, four in all.

Each try's pod is seen in ``ErrImagePull``/``ImagePullBackOff`` with a "not found" message,
confirmed for the grace period, classified ``image.not_found`` once, stamped, deleted, and the try
fails with ``PodFailure``; Airflow's retry starts the next try with a fresh pod. After try 4 the
task fails. Nothing watches an old pod again, so no extra pods are launched.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_k8s_retry.classification.policy import FailurePolicy
from airflow_k8s_retry.operators import RetryingPodOperator

with DAG(
    dag_id="02_image_pull_retry",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    tags=["airflow-k8s-retry", "example"],
):
    RetryingPodOperator(
        task_id="pull_missing_image",
        image="notavalidimage",
        cmds=["true"],
        retries=3,
        retry_delay=timedelta(seconds=2),
        # The default grace confirms "not found" for 90 s before giving up on a try; it is
        # shortened here so the example finishes in seconds.
        failure_policy=FailurePolicy(grace={"image.not_found": 3}),
    )
