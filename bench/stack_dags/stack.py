"""The whole-stack benchmark's DAG file (``bench/stack.py``): the benchmark copies it once per DAG of
its plan, named after the DAG; each copy builds the DAG of the plan (``AIRFLOW_K8S_RETRY_STACK_PLAN``)
whose id is its file's name, and nothing without a plan. One DAG per file, as users write them: a
worker parses only the file of its task's DAG.

Each DAG runs its tasks with one operator: ``RetryingPodOperator``, or the cncf
``KubernetesPodOperator`` deferrable or not, every argument at its default but the image, the
namespace, ``retries`` and ``retry_delay``; or Airflow's floor (:class:`FloorOperator`). Self-contained
on purpose: Airflow puts the DAGs folder on ``sys.path``, not the repository.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, BaseOperator


class FloorOperator(BaseOperator):
    """Airflow's floor for a deferrable operator's failed try: defer once to Airflow's own timer
    (``TimeDeltaTrigger``) for ``seconds``, about as long as the other operators' pods run, then
    fail. Whatever a deferrable operator does, its failed try costs at least this."""

    def __init__(self, *, seconds: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seconds = seconds

    def execute(self, context: Any) -> None:
        from airflow.providers.standard.triggers.temporal import TimeDeltaTrigger

        self.defer(trigger=TimeDeltaTrigger(timedelta(seconds=self.seconds)), method_name="execute_complete")

    def execute_complete(self, context: Any, event: Any = None) -> None:
        raise RuntimeError(f"the timer fired after {self.seconds} s; the try fails")


def _operator(kind: str, task: dict[str, Any]) -> Any:
    common: dict[str, Any] = {
        "task_id": task["task_id"],
        "retries": task["retries"],
        "retry_delay": timedelta(seconds=task["retry_delay"]),
    }
    if "pool" in task:  # a paced plan: a pool counting deferred tasks, a retry first
        common.update(pool=task["pool"], priority_weight=task["priority_weight"], weight_rule="absolute")
    if kind == "floor":
        return FloorOperator(seconds=task["seconds"], **common)
    common.update(
        name=task.get("name", task["task_id"].replace("_", "-")),
        image=task["image"],
        namespace=task["namespace"],
    )
    if kind in ("rpo", "rpo_quiet"):
        from airflow_k8s_retry.operators import RetryingPodOperator

        # rpo_quiet: no live log copies while the pod runs (the cncf operator makes none either).
        return RetryingPodOperator(**common, **({"logging_interval": None} if kind == "rpo_quiet" else {}))
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    return KubernetesPodOperator(deferrable=kind == "kpo_deferrable", **common)


_PLAN = os.environ.get("AIRFLOW_K8S_RETRY_STACK_PLAN")
if _PLAN:
    for _dag in json.loads(Path(_PLAN).read_text())["dags"]:
        if _dag["dag_id"] != Path(__file__).stem:
            continue
        with DAG(
            dag_id=_dag["dag_id"],
            schedule=None,
            start_date=datetime(2024, 1, 1),
            max_active_tasks=len(_dag["tasks"]),
        ):
            for _t in _dag["tasks"]:
                _operator(_dag["operator"], _t)
