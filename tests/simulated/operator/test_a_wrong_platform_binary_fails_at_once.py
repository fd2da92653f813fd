"""An image whose binary is built for another architecture pulls on any node and fails at exec: the
runtime's ``exec /app: exec format error`` is written to the container's log only, and the container
exits 1. The trigger's last look reads the failed container's last log lines, so the try fails at
once as ``image.wrong_platform`` (permanent: no retry on this architecture helps), where it used to
cost every retry as an exit code. A task's own failure that merely mentions exec stays an exit code."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from airflow_k8s_retry.compat import TaskDeferred
from airflow_k8s_retry.exceptions import PodFailure, PodFailurePermanent
from airflow_k8s_retry.operators import RetryingPodOperator

SCENARIO = {
    "images": {
        "etl:amd64-only": {
            "run": {"exit_code": 1, "duration_seconds": 0.1, "log": "exec /app: exec format error"}
        },
        "etl:broken": {
            "run": {"exit_code": 1, "duration_seconds": 0.1, "log": "OSError: [Errno 8] Exec format error"}
        },
    }
}
pytestmark = pytest.mark.fake_cluster(SCENARIO, clock="manual")


async def _first_event(trigger: Any) -> dict[str, Any]:
    async for event in trigger.run():
        return dict(event.payload)
    raise AssertionError("the trigger ended without an event")


def _run(cluster: Any, image: str, context: dict[str, Any]) -> tuple[RetryingPodOperator, dict[str, Any]]:
    op = RetryingPodOperator(
        task_id="load", image=image, kubernetes_conn_id=None, namespace="default", get_logs=False, retries=3
    )
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    cluster.advance(5)
    [pod] = cluster.pods()
    assert pod["status"]["phase"] == "Failed"
    return op, asyncio.run(_first_event(deferred.value.trigger))


def _log_reads(cluster: Any) -> list[str]:
    return [
        r["request_uri"]
        for r in cluster.audit_records()
        if r.get("kind") == "request" and r.get("resource") == "pods/log"
    ]


def test_the_runtimes_exec_format_error_in_the_log_fails_the_task_at_once(fake_cluster, context):
    op, event = _run(fake_cluster, "etl:amd64-only", context)
    verdict = event["verdict"]
    assert (verdict["outcome"], verdict["reason"]) == ("fail", "image.wrong_platform")
    assert "exec /app: exec format error" in verdict["message"]
    # The last look's one read of the log: the failed container's last lines.
    assert _log_reads(fake_cluster) == [
        f"/api/v1/namespaces/default/pods/{event['pod_name']}/log?container=base&tailLines=20"
    ]
    with pytest.raises(PodFailurePermanent, match=r"image\.wrong_platform"):
        op.execute_complete(context, event=event)


def test_a_tasks_own_exec_failure_is_its_exit_code(fake_cluster, context):
    op, event = _run(fake_cluster, "etl:broken", context)
    assert (event["verdict"]["outcome"], event["verdict"]["reason"]) == ("retry", "container.exit_code")
    with pytest.raises(PodFailure, match=r"container\.exit_code"):
        op.execute_complete(context, event=event)
