"""The failure report is written from what the trigger judged the pod on, carried in its event.

The trigger holds the pod (its last look) and the pod's Events when it emits a failure, so its event
carries a compact snapshot of them (``airflow_k8s_retry.report.Snapshot``) and ``execute_complete``
reads neither. The snapshot keeps what the report and the worker's decisions read (status,
container names and termination-message policies, the last 10 Events) and nothing of the spec's
env, commands or annotations; it survives Airflow's serialization of a trigger event; one too large
is left out, and then the worker reads the pod and its Events.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from airflow_k8s_retry.compat import TaskDeferred
from airflow_k8s_retry.exceptions import PodFailure
from airflow_k8s_retry.kube.ordering import event_sort_key
from airflow_k8s_retry.operators import RetryingPodOperator
from airflow_k8s_retry.report import Snapshot
from airflow_k8s_retry.triggers.pod import PodEvent

SECRET = "pw-0d1e2f3a-do-not-carry"
SCENARIO = {"time_scale": 0.05, "images": {"etl:3": {"run": {"exit_code": 3, "duration_seconds": 0.1}}}}
pytestmark = pytest.mark.fake_cluster(SCENARIO, clock="manual")


def pod(uid: str = "u-1", message: str = "boom") -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": uid, "annotations": {"team": SECRET}},
        "spec": {
            "containers": [
                {
                    "name": "base",
                    "image": "etl:3",
                    "command": ["run", SECRET],
                    "env": [{"name": "DB_PASSWORD", "value": SECRET}],
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                }
            ]
        },
        "status": {
            "phase": "Failed",
            "conditions": [
                {"type": "Ready", "status": "False", "lastTransitionTime": "2026-03-14T09:41:00Z"}
            ],
            "containerStatuses": [
                {
                    "name": "base",
                    "state": {"terminated": {"exitCode": 3, "reason": "Error", "message": message}},
                }
            ],
        },
    }


def events(n: int) -> list[dict[str, Any]]:
    return [
        {"type": "Warning", "reason": f"R{i}", "count": 1, "message": f"m{i}", "metadata": {"name": f"e{i}"}}
        for i in range(n)
    ]


def test_the_snapshot_keeps_what_the_report_reads_and_no_secret():
    taken = Snapshot.take(pod(), events(12), "u-1")
    assert taken is not None
    unpacked = Snapshot.from_payload(taken.to_payload(), "u-1")
    assert unpacked == taken
    body, evs = taken.pod, taken.events
    assert body is not None
    status = pod()["status"]
    # The termination message stays behind (a container may write a Secret's value there); the
    # snapshot says that it did.
    del status["containerStatuses"][0]["state"]["terminated"]["message"]
    assert body["status"] == status
    assert taken.withheld is True
    assert Snapshot.take(pod(message=""), [], "u-1").withheld is False  # type: ignore[union-attr]
    assert "boom" not in json.dumps(taken.to_payload())
    container = {"name": "base", "terminationMessagePolicy": "FallbackToLogsOnError"}
    assert body["spec"] == {"containers": [container]}
    assert [e["reason"] for e in evs] == [f"R{i}" for i in range(2, 12)]  # the newest 10
    assert set(evs[0]) == {"type", "reason", "count", "message"}
    assert SECRET not in json.dumps(taken.to_payload())


def test_the_snapshot_survives_airflows_serialization_of_a_trigger_event():
    from airflow.serialization.serialized_objects import BaseSerialization

    from airflow_k8s_retry.classification import Outcome, Reason, Verdict

    verdict = Verdict(Outcome.RETRY, Reason.CONTAINER_EXIT_CODE, "exit 3", "exit_code")
    payload = PodEvent("ns", "p", "u-1", verdict, 0, seen=Snapshot.take(pod(), events(3), "u-1")).to_payload()
    loaded = BaseSerialization.deserialize(BaseSerialization.serialize(payload))
    assert loaded == payload
    seen = PodEvent.from_payload(loaded).seen
    assert seen is not None and seen.to_payload() == payload["seen"]


def test_a_snapshot_too_large_or_of_another_pod_is_not_used():
    too_large = pod()
    too_large["status"]["message"] = "x" * (Snapshot.SIZE_LIMIT + 1)
    assert Snapshot.take(too_large, [], "u-1") is None
    other = Snapshot.take(pod(uid="u-2"), events(1), "u-1")
    assert other is not None and other.pod is None  # a replaced pod is not this pod's evidence
    taken = Snapshot.take(pod(), [], "u-1")
    assert taken is not None and Snapshot.from_payload(taken.to_payload(), "u-2") is None
    assert Snapshot.from_payload(None, "u-1") is None
    assert Snapshot.from_payload({"uid": "u-1", "pod": None, "events": "nonsense"}, "u-1") is None


def _deferred(op: RetryingPodOperator, context: dict[str, Any]) -> Any:
    """The trigger ``op`` defers to, once its pod is created."""
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    return deferred.value.trigger


async def _first_event(trigger: Any) -> dict[str, Any]:
    async for event in trigger.run():
        return dict(event.payload)
    raise AssertionError("the trigger ended without an event")


def _failed_pod_event(cluster: Any, op: RetryingPodOperator, context: dict[str, Any]) -> dict[str, Any]:
    """On a manual-clock cluster: the pod is created, runs and fails, and its Events are recorded,
    before the trigger starts; then the trigger's first event."""
    trigger = _deferred(op, context)
    cluster.advance(5)
    [pod] = cluster.pods()
    assert pod["status"]["phase"] == "Failed"
    return asyncio.run(_first_event(trigger))


def _reasons(cluster: Any) -> list[str]:
    """The reasons of the Events the cluster holds about its one pod, oldest first."""
    return [e["reason"] for e in sorted(cluster.events(), key=event_sort_key)]


def requests(cluster: Any, since: int) -> list[str]:
    return [
        f"{r['verb']} {r['resource']}" for r in cluster.audit_records()[since:] if r.get("kind") == "request"
    ]


@pytest.mark.parametrize("carried", [True, False], ids=["carried", "too large to carry"])
def test_the_report_reads_the_api_only_for_an_event_without_a_snapshot(
    fake_cluster, context, caplog, capsys, carried
):
    op = RetryingPodOperator(
        task_id="load", image="etl:3", kubernetes_conn_id=None, namespace="default", get_logs=False
    )
    event = _failed_pod_event(fake_cluster, op, context)
    assert Snapshot.from_payload(event.get("seen"), event["pod_uid"]) is not None
    if not carried:
        del event["seen"]  # as for a snapshot larger than Snapshot.SIZE_LIMIT
    caplog.set_level(logging.INFO)
    since = len(fake_cluster.audit_records())
    with pytest.raises(PodFailure, match=r"container\.exit_code"):
        op.execute_complete(context, event=event)
    reads = [r for r in requests(fake_cluster, since) if r in ("get pods", "list events")]
    assert reads == ([] if carried else ["get pods", "list events"])
    # Either way the report shows the container's end and the pod's Events.
    out = capsys.readouterr()
    written = caplog.text + out.out + out.err
    assert "base: terminated, Error, exit code 3" in written
    assert "events:" in written


def test_a_failure_seen_before_the_events_are_listed_still_carries_them(fake_cluster, context):
    """The trigger sees the failed pod in the pods' LIST while the Events' LIST is still out (it
    answers a second later): the failure waits for it, and its snapshot holds every Event."""
    fake_cluster.add_fault(verb="list", resource="events", status="slow", delay_seconds=1.0)
    op = RetryingPodOperator(
        task_id="load", image="etl:3", kubernetes_conn_id=None, namespace="default", get_logs=False
    )
    event = _failed_pod_event(fake_cluster, op, context)
    unpacked = Snapshot.from_payload(event.get("seen"), event["pod_uid"])
    assert unpacked is not None
    body, evs = unpacked.pod, unpacked.events
    assert body is not None and body["status"]["phase"] == "Failed"
    assert [e["reason"] for e in evs] == _reasons(fake_cluster)[-Snapshot.EVENTS_KEPT :]
    assert evs, "the pod's Events"
    assert [r.get("fault") for r in fake_cluster.audit_records() if r.get("resource") == "events"][:1] == [
        "slow"
    ]
