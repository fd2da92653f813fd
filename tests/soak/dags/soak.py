"""The soak's DAG: one RetryingPodOperator per task of the plan that ``AIRFLOW_K8S_RETRY_SOAK_PLAN``
names (JSON written by ``tests/soak/plan.py``); nothing without it.

Self-contained on purpose: Airflow puts the DAGs folder on ``sys.path``, not the repository.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG

from airflow_k8s_retry.classification.policy import FailurePolicy
from airflow_k8s_retry.operators import RetryingPodOperator


def _task(task: dict[str, Any], execution_timeout: float) -> RetryingPodOperator:
    from kubernetes.client import models as k8s

    extra: dict[str, Any] = dict(task["operator"])
    kwargs: dict[str, Any] = {}
    if "grace" in extra:
        kwargs["failure_policy"] = FailurePolicy(grace=extra.pop("grace"))
    if "secret_env" in extra:
        kwargs["env_vars"] = [
            k8s.V1EnvVar(
                name=e["name"],
                value_from=k8s.V1EnvVarSource(
                    secret_key_ref=k8s.V1SecretKeySelector(name=e["secret"], key=e["key"])
                ),
            )
            for e in extra.pop("secret_env")
        ]
    if "cpu_request" in extra:
        kwargs["container_resources"] = k8s.V1ResourceRequirements(requests={"cpu": extra.pop("cpu_request")})
    timeout = float(extra.pop("execution_timeout", execution_timeout))
    return RetryingPodOperator(
        task_id=task["task_id"],
        name=task["task_id"] + "-" + task["fate"].replace("_", "-"),
        image=task["image"],
        retries=task["retries"],
        retry_delay=timedelta(seconds=2),
        execution_timeout=timedelta(seconds=timeout),
        poll_interval=2,
        **kwargs,
        **extra,
    )


_PLAN = os.environ.get("AIRFLOW_K8S_RETRY_SOAK_PLAN")
if _PLAN:
    _data = json.loads(Path(_PLAN).read_text())
    with DAG(
        dag_id=_data["dag_id"],
        schedule=None,
        start_date=datetime(2024, 1, 1),
        max_active_tasks=len(_data["tasks"]),
    ):
        for _t in _data["tasks"]:
            _task(_t, float(_data["execution_timeout"]))
