"""A user's kill of a running try whose pod the operator does not hold yet deletes the pod.

Airflow's SIGTERM handler calls ``on_kill()`` and then lets the interrupted code go on. A kill that
lands during the sweep of earlier tries, or while the create is on its way, finds no pod to delete;
the create then completes. ``on_kill`` therefore deletes the try's pods by label, and the operator
deletes a pod whose create completed after the kill and stops there (review finding R3-1, chaos
seed 50174). The kill is delivered exactly where the signal would interrupt: inside the client's
request for the sweep's LIST or the create's POST.

When the task's code does not get to go on (the supervisor's SIGKILL comes 5 s after the SIGTERM),
``on_kill`` alone must find the pod whose create had landed: the first pod of a try and a relaunch's
pod in a resumed worker alike (chaos seed 9 left a relaunch's pod: only ``execute`` named the try
for ``on_kill``, so in a resumed worker's relaunch ``on_kill`` found nothing to delete).
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client import rest

from airflow_k8s_retry.exceptions import PodFailure
from airflow_k8s_retry.operators import RetryingPodOperator
from tests.support.operator_try import RUNNING

pytestmark = pytest.mark.fake_cluster(RUNNING)


class Sigkill(BaseException):
    """The supervisor's SIGKILL: nothing of the task's code runs after it."""


def kill_at(
    monkeypatch: pytest.MonkeyPatch,
    op: RetryingPodOperator,
    method: str,
    after: bool,
    *,
    sigkill: bool = False,
) -> list[str]:
    """Call ``op.on_kill()`` inside the first ``method`` request to ``/pods``, before or after it is
    sent; with ``sigkill``, the process is killed right after ``on_kill``."""
    original = rest.RESTClientObject.request
    done: list[str] = []

    def kill() -> None:
        op.on_kill()
        if sigkill:
            raise Sigkill

    def request(self: Any, verb: str, url: str, *args: Any, **kwargs: Any) -> Any:
        hit = verb == method and url.split("?", maxsplit=1)[0].endswith("/pods") and not done
        if hit and not after:
            done.append(verb)
            kill()
        response = original(self, verb, url, *args, **kwargs)
        if hit and after:
            done.append(verb)
            kill()
        return response

    monkeypatch.setattr(rest.RESTClientObject, "request", request)
    return done


@pytest.mark.parametrize(
    ("method", "after"),
    [("POST", False), ("POST", True), ("GET", False)],
    ids=["kill-before-the-create-is-sent", "kill-after-the-create-landed", "kill-during-the-sweep"],
)
def test_a_kill_before_the_operator_holds_its_pod_leaves_no_pod(
    fake_cluster, context, ti, monkeypatch, method, after
):
    ti.try_number = 2  # a later try first sweeps the earlier tries' pods (a LIST)
    op = RetryingPodOperator(
        task_id="load", image="busybox:1.36", kubernetes_conn_id=None, namespace="default"
    )
    killed = kill_at(monkeypatch, op, method, after)
    with pytest.raises(PodFailure, match="the task was killed"):
        op.execute(context)
    assert killed == [method]
    assert fake_cluster.wait_for(lambda c: not c.pods(), timeout=10), [
        p["metadata"]["name"] for p in fake_cluster.pods()
    ]


def test_on_kill_action_keep_pod_keeps_a_pod_created_after_the_kill(fake_cluster, context, monkeypatch):
    op = RetryingPodOperator(
        task_id="load",
        image="busybox:1.36",
        kubernetes_conn_id=None,
        namespace="default",
        on_kill_action="keep_pod",
    )
    kill_at(monkeypatch, op, "POST", after=True)
    with pytest.raises(PodFailure, match="the task was killed"):
        op.execute(context)
    assert len(fake_cluster.pods()) == 1


def test_on_kill_alone_deletes_a_first_pod_whose_create_landed(fake_cluster, context, monkeypatch):
    op = RetryingPodOperator(
        task_id="load", image="busybox:1.36", kubernetes_conn_id=None, namespace="default"
    )
    kill_at(monkeypatch, op, "POST", after=True, sigkill=True)
    with pytest.raises(Sigkill):
        op.execute(context)
    assert fake_cluster.wait_for(lambda c: not c.pods(), timeout=10), [
        p["metadata"]["name"] for p in fake_cluster.pods()
    ]


def test_on_kill_alone_deletes_a_relaunch_whose_create_landed_in_a_resumed_worker(
    fake_cluster, context, monkeypatch
):
    from airflow_k8s_retry.classification.model import Evidence, Outcome, Reason, Verdict
    from airflow_k8s_retry.compat import TaskDeferred
    from airflow_k8s_retry.triggers.pod import PodEvent

    def parsed() -> RetryingPodOperator:  # each worker parses the DAG again
        return RetryingPodOperator(
            task_id="load", image="busybox:1.36", kubernetes_conn_id=None, namespace="default"
        )

    with pytest.raises(TaskDeferred) as deferred:
        parsed().execute(context)
    first = deferred.value.trigger
    disrupted = Verdict(
        outcome=Outcome.RELAUNCH,
        reason=Reason.NODE_DISRUPTION,
        message="evicted",
        rule="disruption",
        evidence=(Evidence(Reason.NODE_DISRUPTION, "status", "saw Evicted", "base"),),
    )
    event = PodEvent(first.namespace, first.pod_name, first.pod_uid, disrupted, 0).to_payload()
    resumed = parsed()
    killed = kill_at(monkeypatch, resumed, "POST", after=True, sigkill=True)
    with pytest.raises(Sigkill):
        resumed.execute_complete(context, event=event)
    assert killed == ["POST"]
    assert fake_cluster.wait_for(lambda c: not c.pods(), timeout=10), [
        p["metadata"]["name"] for p in fake_cluster.pods()
    ]
