"""A pod deleted while the API server was down is an external deletion, not a lost node.

After an outage longer than the node-monitor grace period the node controller marks the nodes
NotReady and records a ``NodeNotReady`` Event for every pod in its stale cache, a pod deleted
meanwhile among them. The re-list after the outage finds the pod missing (``unseen``): an Event
dated well after anything its last seen state records is about the outage, not the pod.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from airflow_k8s_retry.classification import Outcome, Verdict
from airflow_k8s_retry.triggers.tracker import (
    Emit,
    LookAgain,
    PodTracker,
    SleepUntil,
    without_later_node_loss,
)

T0 = 1_800_000_000.0
LAST_STATE = "2027-01-15T08:00:05Z"  # the newest time the pod's last seen state records
SETUP = {"startedAt": "2027-01-15T08:00:00Z", "finishedAt": "2027-01-15T08:00:01Z"}


@dataclass(frozen=True)
class Change:
    pod: dict[str, Any] | None
    deleted: bool = False
    unseen: bool = False


def running() -> dict[str, Any]:
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u-1",
            "resourceVersion": "7",
            "creationTimestamp": "2027-01-15T07:59:58Z",
            "managedFields": [
                {"manager": "kube-scheduler", "time": "2027-01-15T07:59:58Z"},
                {"manager": "kubelet", "time": LAST_STATE},
            ],
        },
        "spec": {"containers": [{"name": "base", "image": "etl:1"}], "restartPolicy": "Never"},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2027-01-15T08:00:03Z"}],
            "initContainerStatuses": [{"name": "setup", "state": {"terminated": {"exitCode": 0, **SETUP}}}],
            "containerStatuses": [
                {"name": "base", "state": {"running": {"startedAt": "2027-01-15T08:00:02Z"}}}
            ],
        },
    }


def node_not_ready(**when: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "p.17a", "namespace": "ns", "resourceVersion": "9"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "ns", "uid": "u-1"},
        "reason": "NodeNotReady",
        "message": "Node is not ready",
        "type": "Warning",
        "source": {"component": "node-controller"},
        **when,
    }


def verdict_when_gone(last: dict[str, Any], event: dict[str, Any], *, unseen: bool) -> tuple[Outcome, str]:
    """Follow the pod running, then take its deletion and the Event: the verdict that leaves."""
    tracker = PodTracker(pod_uid="u-1", started=T0)
    assert isinstance(tracker.apply([Change(last)], [], T0), SleepUntil)
    step = tracker.apply([Change(last, deleted=True, unseen=unseen)], [event], T0 + 90)
    assert isinstance(step, LookAgain)
    emitted = tracker.looked(None, [event], T0 + 91)  # the last look: still gone
    assert isinstance(emitted, Emit) and emitted.verdict == step.verdict
    verdict: Verdict = emitted.verdict
    return verdict.outcome, verdict.reason.value


def test_an_unseen_deletion_is_not_blamed_on_a_node_lost_after_it() -> None:
    event = node_not_ready(lastTimestamp="2027-01-15T08:01:05Z")  # 60 s after the last state
    assert verdict_when_gone(running(), event, unseen=True) == (Outcome.RETRY, "pod.deleted_externally")


def test_a_deletion_the_feed_saw_still_trusts_the_event() -> None:
    event = node_not_ready(lastTimestamp="2027-01-15T08:01:05Z")
    assert verdict_when_gone(running(), event, unseen=False) == (Outcome.RELAUNCH, "node.lost")


@pytest.mark.parametrize(
    "when",
    [
        {"lastTimestamp": "2027-01-15T07:59:00Z"},
        {"lastTimestamp": LAST_STATE},
        {"eventTime": "2027-01-15T08:00:15.000000Z"},  # NODE_LOSS_MARGIN after, not more
        {"firstTimestamp": "2027-01-15T08:00:09Z"},
        {},
    ],
    ids=["before", "at", "within-the-margin", "first-timestamp", "no-time"],
)
def test_an_unseen_deletion_after_its_node_was_lost_is_still_node_lost(when: dict[str, str]) -> None:
    event = node_not_ready(**when)
    assert verdict_when_gone(running(), event, unseen=True) == (Outcome.RELAUNCH, "node.lost")


def test_a_last_state_without_any_time_keeps_the_event() -> None:
    bare = running()
    del bare["metadata"]["creationTimestamp"], bare["metadata"]["managedFields"]
    bare["status"] = {"phase": "Running", "containerStatuses": [{"name": "base", "state": {"running": {}}}]}
    event = node_not_ready(lastTimestamp="2027-01-15T08:01:05Z")
    assert verdict_when_gone(bare, event, unseen=True) == (Outcome.RELAUNCH, "node.lost")


def _only(where: str, at: str) -> dict[str, Any]:
    """A pod whose state records one time, ``at``, in ``where``."""
    status: dict[str, Any] = {"phase": "Running"}
    containers = {
        "running": {"running": {"startedAt": at}},
        "terminated-start": {"terminated": {"exitCode": 0, "startedAt": at}},
        "terminated-end": {"terminated": {"exitCode": 0, "finishedAt": at}},
    }
    meta: dict[str, Any] = {"name": "p", "uid": "u-1"}
    if where == "managed-fields":
        meta["managedFields"] = [{"manager": "kubelet", "time": at}]
    elif where == "created":
        meta["creationTimestamp"] = at
    elif where == "condition":
        status["conditions"] = [{"type": "Ready", "status": "False", "lastTransitionTime": at}]
    else:
        group, state = where.split(":")
        status[group] = [{"name": "c", "state": containers[state]}]
    return {"metadata": meta, "status": status}


@pytest.mark.parametrize(
    "where",
    [
        "managed-fields",
        "created",
        "condition",
        "containerStatuses:running",
        "containerStatuses:terminated-start",
        "containerStatuses:terminated-end",
        "initContainerStatuses:running",
        "initContainerStatuses:terminated-end",
    ],
)
def test_every_time_the_last_state_records_dates_it(where: str) -> None:
    last = _only(where, "2027-01-15T08:10:00Z")
    soon, late = (
        node_not_ready(lastTimestamp="2027-01-15T08:10:10Z"),
        node_not_ready(lastTimestamp="2027-01-15T08:10:11Z"),
    )
    ordinary = {**late, "reason": "Killing"}
    assert without_later_node_loss([soon, late, ordinary], last) == [soon, ordinary]
