"""The requests one failing try costs, worker and triggerer together, counted in the simulator's audit log.

The classic failure (``image="notavalidimage"``, the registry says it does not exist) under
``RetryingPodOperator``: ``execute`` in the worker, the trigger in a triggerer's event loop, then
``execute_complete``. Every request the simulator received between the try's start and its end is
counted, whoever made it. The target is at most 8 per try; a try costs 6 (try 1: 5). Where they go:

- the worker's ``execute``: the LIST that sweeps what earlier tries left (from try 2 on) and the create;
- the trigger: one history PATCH (the first-seen times that keep the grace timer across a triggerer
  restart, written once the timer runs: a starting pod's first seconds are written together with
  the pull error that follows them) and the last look (a GET before a failure is emitted);
- the worker's ``execute_complete``: the verdict stamp (one PATCH with the UID as precondition:
  whatever meets the pod while it terminates reads the verdict instead of judging it again) and
  the DELETE by UID. The failure report reads nothing: the pod and its Events as the trigger
  judged them travel in its event. A pod whose container never ran has no log to read; one whose
  container ran and failed costs two log reads: the last look's last lines (where the runtime's
  ``exec format error`` would be) and the task log's.

A triggerer opens one LIST+WATCH of pods and one of Events per namespace and shares them between
every trigger in it (``tests/watching/test_many_triggers_share_one_watch.py``); a try that is the
only one in its namespace pays those four requests too, which the second test counts.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from airflow_k8s_retry.classification.policy import FailurePolicy
from airflow_k8s_retry.compat import TaskDeferred
from airflow_k8s_retry.exceptions import PodFailure
from airflow_k8s_retry.kube.naming import TryIdentity
from airflow_k8s_retry.operators import RetryingPodOperator
from airflow_k8s_retry.triggers.pod import PodEvent, PodStateTrigger
from tests.support.lab import Run, create_pod, pod_body

BUDGET = 8
SCENARIO = {
    "time_scale": 0.05,
    "images": {"notavalidimage": {"pull": "not_found"}, "sleeper:1": {"run": {"duration_seconds": 3600}}},
}
pytestmark = pytest.mark.fake_cluster(SCENARIO)
#: A grace of 2 s instead of 90: the timer runs (and is stamped on the pod for a restarted trigger)
#: as with the default, and the test takes seconds.
POLICY = FailurePolicy(grace={"image.not_found": 2})
#: The try's requests: the create, one history PATCH and the verdict stamp, the last look, the DELETE.
OWN = {"create pods": 1, "patch pods": 2, "get pods": 1, "delete pods": 1}
SWEEP = {"list pods": 1}
FEEDS = {"list pods": 1, "watch pods": 1, "list events": 1, "watch events": 1}


def requests(cluster: Any, since: int) -> list[str]:
    return [
        f"{r['verb']} {r['resource']}" for r in cluster.audit_records()[since:] if r.get("kind") == "request"
    ]


async def one_failing_try(cluster: Any, context: dict[str, Any]) -> int:
    """Run one try of the classic failure to its end; return where its requests start in the audit."""
    op = RetryingPodOperator(
        task_id="load",
        kubernetes_conn_id=None,
        namespace="default",
        image="notavalidimage",
        failure_policy=POLICY,
    )
    start = len(cluster.audit_records())
    with pytest.raises(TaskDeferred) as deferred:
        await asyncio.to_thread(op.execute, context)
    trigger = deferred.value.trigger
    assert isinstance(trigger, PodStateTrigger)
    event = await Run(trigger).start().finish(within=60)
    assert event.verdict.reason.value == "image.not_found"
    with pytest.raises(PodFailure, match=r"image\.not_found"):
        await asyncio.to_thread(op.execute_complete, context, PodEvent.to_payload(event))
    return start


async def neighbour_in_the_namespace(cluster: Any) -> Run:
    """Another task's pod that runs for an hour, and its trigger: the triggerer's feeds are open."""
    identity = TryIdentity("etl", "extract", "manual__2024-06-01T00:00:00+00:00", -1, 1)
    pod = await asyncio.to_thread(create_pod, cluster, pod_body(identity, "sleeper:1"))
    trigger = PodStateTrigger(
        kubernetes_conn_id=None,  # the same cluster configuration as the operator's trigger
        namespace="default",
        pod_name=pod["metadata"]["name"],
        pod_uid=pod["metadata"]["uid"],
        identity=identity.to_payload(),
        policy=None,
    )
    run = Run(trigger).start()
    await asyncio.to_thread(
        cluster.wait_for, lambda c: any(r.get("verb") == "watch" for r in c.audit_records()), 20
    )
    await asyncio.sleep(1.0)  # its first classification (and history stamp) is behind it
    return run


@pytest.mark.parametrize("try_number", [1, 2])
def test_a_failing_try_costs_at_most_eight_requests(fake_cluster, context, ti, try_number):
    ti.try_number = try_number

    async def scenario() -> list[str]:
        neighbour = await neighbour_in_the_namespace(fake_cluster)
        try:
            since = await one_failing_try(fake_cluster, context)
            return requests(fake_cluster, since)
        finally:
            await neighbour.stop()

    made = asyncio.run(scenario())
    assert Counter(made) == Counter(OWN) + (Counter(SWEEP) if try_number > 1 else Counter()), made
    assert len(made) <= BUDGET, made
    print(f"\ntry {try_number}: {len(made)} requests, target {BUDGET}")


def test_a_try_alone_in_its_namespace_also_pays_for_the_triggerers_feeds(fake_cluster, context, ti):
    ti.try_number = 2
    since = asyncio.run(one_failing_try(fake_cluster, context))
    made = requests(fake_cluster, since)
    assert Counter(made) == Counter(FEEDS) + Counter(OWN) + Counter(SWEEP), made


@pytest.mark.fake_cluster(
    {"time_scale": 0.05, "images": {"fails:1": {"run": {"duration_seconds": 1, "exit_code": 1}}}}
)
def test_a_failed_try_whose_container_ran_reads_only_its_log(fake_cluster, context, ti, caplog):
    # The container ran and exited 1: the task log gets its whole log (get_logs=True, the default)
    # through the provider's reader, whose reads of the pod the pod carried in the event answers.
    op = RetryingPodOperator(
        task_id="load",
        kubernetes_conn_id=None,
        namespace="default",
        image="fails:1",
        cmds=["sh", "-c", "exit 1"],
    )

    async def scenario() -> list[str]:
        start = len(fake_cluster.audit_records())
        with pytest.raises(TaskDeferred) as deferred:
            await asyncio.to_thread(op.execute, context)
        event = await Run(deferred.value.trigger).start().finish(within=60)
        assert event.verdict.reason.value == "container.exit_code"
        with pytest.raises(PodFailure, match=r"container\.exit_code"):
            await asyncio.to_thread(op.execute_complete, context, PodEvent.to_payload(event))
        return [
            f"{r['verb']} {r['resource']}{'/' + r['subresource'] if r.get('subresource') else ''}"
            for r in fake_cluster.audit_records()[start:]
            if r.get("kind") == "request"
        ]

    with caplog.at_level("INFO"):
        made = asyncio.run(scenario())
    # The create; the trigger's last look at the pod and at its failed container's last log lines
    # (where the runtime's exec format error would be); the log for the task log; the verdict
    # stamp; the DELETE (and, alone in its namespace, the triggerer's feeds).
    own = {"create pods": 1, "get pods": 1, "get pods/log": 2, "patch pods": 1, "delete pods": 1}
    assert Counter(made) == Counter(own) + Counter(FEEDS), made
