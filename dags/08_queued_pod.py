"""A pod held in an admission queue waits its turn, then runs: queued is not unschedulable.

With Kueue, a pod labelled ``kueue.x-k8s.io/queue-name`` gets the scheduling gate
``kueue.x-k8s.io/admission`` from Kueue's webhook and keeps it until its LocalQueue's quota admits
it, minutes or hours later. Nothing tries to schedule the pod meanwhile, so the operator waits as
queued (``schedule.gated``) under a deadline of its own: ``FailurePolicy(queue_timeout=...)``, else
the task's ``execution_timeout`` (here), else 24 hours. ``schedule_timeout`` starts only once the
last gate is lifted. Every few minutes the task log says which gates hold the pod and, where the
task may read Kueue's Workloads, why Kueue has not admitted it yet.

The pod carries the gate itself here (``pod_template_dict``), as Kueue's webhook would add it, so
the example runs on any cluster. In ``make demo`` the simulator's scenario admits the pod 45
seconds after it was created, past the task's schedule_timeout of 20 seconds: the task succeeds on
its first try, with one pod. On a cluster where nothing lifts the gate, the try ends at its
execution_timeout.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_k8s_retry.classification.policy import FailurePolicy
from airflow_k8s_retry.operators import RetryingPodOperator

with DAG(
    dag_id="08_queued_pod",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    tags=["airflow-k8s-retry", "example"],
):
    RetryingPodOperator(
        task_id="train_when_admitted",
        image="busybox:1.36",
        cmds=["sh", "-c", "echo admitted and running"],
        labels={"kueue.x-k8s.io/queue-name": "team-a"},
        pod_template_dict={
            "spec": {
                "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}],
                "containers": [{"name": "base"}],
            }
        },
        failure_policy=FailurePolicy(schedule_timeout=20),
        execution_timeout=timedelta(minutes=10),
        retries=0,
    )
