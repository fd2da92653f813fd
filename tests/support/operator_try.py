"""A try of ``RetryingPodOperator`` driven in-process against a FakeCluster, for the operator's tests.

The operator is built as a DAG author writes it and run through ``execute`` up to its deferral; the
trigger it defers on is either run as a triggerer runs it (:func:`first_event`) or skipped, the
verdict it would emit handed to ``execute_complete`` directly (:func:`event_for`). The effects are
read back from the simulator: which pods exist, which requests were made.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from airflow.triggers.base import TriggerEvent
from kubernetes.config import new_client_from_config

from airflow_k8s_retry.classification.model import Evidence, Outcome, Reason, Verdict
from airflow_k8s_retry.compat import TaskDeferred
from airflow_k8s_retry.kube.pods import PodClient
from airflow_k8s_retry.operators import RetryingPodOperator
from airflow_k8s_retry.triggers.pod import PodEvent, PodStateTrigger

#: A scenario whose pods (the operator's default image) run until they are deleted.
RUNNING = {"time_scale": 0.05, "images": {"busybox:1.36": {"run": {"duration_seconds": 100_000}}}}


def operator(**kwargs: Any) -> RetryingPodOperator:
    kwargs.setdefault("image", "busybox:1.36")
    return RetryingPodOperator(task_id="load", kubernetes_conn_id=None, namespace="default", **kwargs)


def client_for(cluster: Any) -> PodClient:
    return PodClient(new_client_from_config(config_file=str(cluster.kubeconfig), persist_config=False))


def requests(cluster: Any, verb: str, status: int | None = None) -> list[dict[str, Any]]:
    return [
        r
        for r in cluster.audit_records()
        if r.get("verb") == verb
        and r.get("resource") == "pods"
        and (status is None or r.get("status") == status)
    ]


def pods_named(cluster: Any, name: str) -> list[dict[str, Any]]:
    return [p for p in cluster.pods() if p["metadata"]["name"] == name]


def defer(op: RetryingPodOperator, context: dict[str, Any]) -> PodStateTrigger:
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    assert deferred.value.method_name == "execute_complete"
    trigger = deferred.value.trigger
    assert isinstance(trigger, PodStateTrigger)
    return trigger


def first_event(trigger: PodStateTrigger) -> TriggerEvent:
    """The trigger's one event, as a triggerer runs it."""

    async def run() -> TriggerEvent:
        try:
            async for event in trigger.run():
                return event
            raise AssertionError("the trigger ended without an event")
        finally:
            await trigger.cleanup()

    return asyncio.run(run())


def verdict(outcome: Outcome, reason: Reason, message: str = "it happened") -> Verdict:
    return Verdict(
        outcome=outcome,
        reason=reason,
        message=message,
        rule=reason.value,
        evidence=(Evidence(reason, "status", f"saw {reason.value}", "base"),),
    )


def event_for(trigger: PodStateTrigger, v: Verdict) -> dict[str, Any]:
    return PodEvent(trigger.namespace, trigger.pod_name, trigger.pod_uid, v, trigger.relaunches).to_payload()
