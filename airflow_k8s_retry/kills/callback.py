"""The pods a failed try left behind because its worker could not clean up.

A worker that dies between the pod create and the deferral (``kill -9``, a lost node, the OOM
killer) takes its cleanup with it. With retries left, the next try's sweep deletes the orphan; on
the last try no later try comes. Airflow itself then runs the task's ``on_failure_callback``
outside the dead worker: the scheduler fails a task instance whose heartbeat stopped and sends a
``TaskCallbackRequest`` that the DAG processor runs with the try's context (Airflow 3.3,
``_purge_task_instances_without_heartbeats`` and ``dag_processing.processor._execute_task_callbacks``).
The task runner runs the same callback in the worker after any final failure.

:func:`delete_pods_left_by_failed_try` is that callback. ``RetryingPodOperator`` appends it to the
DAG author's own ``on_failure_callback`` list. It deletes, by UID, every pod of exactly this try
(any relaunch) that is not finished business kept on purpose: an unstamped pod (its worker never
reached a verdict) and a pod stamped "not kept" (its delete did not get through). It keeps pods
stamped as kept (``on_finish_action``), and everything when ``on_kill_action`` is ``keep_pod``.
It also sweeps what earlier tries of the task left (a delete that never got through): the last
try's failure is the last chance. In the worker whose try ended its pod after the verdict (deleted,
or kept stamped) and its earlier relaunches', it returns at once: that try swept the earlier tries'
pods before it created its own, so nothing is left to look for and a normal failure costs no
request here.

Where the callback runs for a worker that died (the operator did not run the try's code in this
process) and finds no pod of the try, it looks once more :data:`IN_FLIGHT_SETTLE` seconds later: a
create the worker sent just before it died can still be on its way, and an executor that reports
the death at once (CeleryExecutor reports a lost worker process as a failure within seconds,
where LocalExecutor's try waits for its heartbeat timeout) has the callback run before the API
server has stored the pod.
"""

from __future__ import annotations

from typing import Any

from airflow_k8s_retry import connection
from airflow_k8s_retry.kills.sweep import EarlierTryNotGone, sweep_earlier_tries
from airflow_k8s_retry.kube.errors import KubeError
from airflow_k8s_retry.kube.naming import TryIdentity, read_stamp
from airflow_k8s_retry.kube.pods import SHORT_BACKOFF, PodClient, delete

#: Seconds after a first empty look before the callback of a dead worker's try looks again, for a
#: create that worker sent just before it died. Well under the DAG processor's callback budget
#: (``[dag_processor] dag_file_processor_timeout``, 50 s by default).
IN_FLIGHT_SETTLE = 15.0


def with_lost_try_cleanup(callbacks: Any) -> list[Any]:
    """The task's ``on_failure_callback`` list with :func:`delete_pods_left_by_failed_try` last."""
    if callbacks is None:
        listed: list[Any] = []
    elif isinstance(callbacks, (list, tuple)):
        listed = list(callbacks)
    else:
        listed = [callbacks]
    if delete_pods_left_by_failed_try not in listed:
        listed.append(delete_pods_left_by_failed_try)
    return listed


#: The class attribute that marks an operator whose tries this callback cleans up
#: (``RetryingPodOperator`` sets it), read instead of importing that class: its module imports this.
TRY_OWNER = "runs_tries_in_pods"


def _operator_of(context: Any) -> Any:
    """The failed try's operator; a mapped task is expanded for the try's ``map_index`` first, as
    the task runner does (``render_template_fields`` puts the expanded task in the context).
    ``RetryingPodOperator`` and its subclasses say they run tries by :data:`TRY_OWNER`; a mapped
    task's class (``MappedOperator``) does not."""
    task: Any = context.get("task") if hasattr(context, "get") else None
    operator_class = getattr(task, "operator_class", None)
    if isinstance(operator_class, type) and getattr(operator_class, TRY_OWNER, False):
        task.render_template_fields(context)
        task = context.get("task")
    return task if getattr(type(task), TRY_OWNER, False) else None


def _pods_of_try(task: Any, client: PodClient, identity: TryIdentity, namespace: str) -> list[dict[str, Any]]:
    """The pods labelled with the try, looked for again after :data:`IN_FLIGHT_SETTLE` seconds
    where its worker died elsewhere and none is there yet."""
    selector = identity.selector("try")
    pods: list[dict[str, Any]] = client.list_pods(namespace, selector)
    if task.ran_try_here or any(identity.owns_pod(p) for p in pods):
        return pods
    task.log.info(
        "No pod of try %d yet; looking again in %.0f s for a create its worker sent before it died",
        identity.try_number,
        IN_FLIGHT_SETTLE,
    )
    type(task).retry_sleep(IN_FLIGHT_SETTLE)
    return list(client.list_pods(namespace, selector))


def delete_pods_left_by_failed_try(context: Any) -> None:
    """``on_failure_callback``: delete the pods of the failed try that nothing else will delete.

    Never raises: a cleanup that cannot reach the cluster (a configuration the try itself already
    failed on, an API that does not answer) says so in one line.
    """
    task = _operator_of(context)
    if task is None or context.get("ti") is None:
        return
    if task.ran_try_here and task.left_nothing:
        return  # this process ended the try's pods, after its start swept the earlier tries'
    if task.on_kill_action.value == "keep_pod":
        return
    log = task.log
    try:
        identity = TryIdentity.of(context["ti"], connection.deployment_id())
        namespace = task.build_try_pod(context)["metadata"]["namespace"]
        chosen = connection.chosen_cluster(task.in_cluster, task.config_file, task.cluster_context)
        client, _ = connection.pod_client(task.kubernetes_conn_id, namespace, chosen)
        pods = _pods_of_try(task, client, identity, namespace)
    except Exception as exc:
        # A configuration error (no template, no connection, a kubeconfig that does not exist)
        # created no pod: the try already failed saying so, and a traceback here would repeat it.
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        log.warning(
            "Could not look for pods left by try %s: %s: %s",
            getattr(context["ti"], "try_number", "?"),
            type(exc).__name__,
            first,
        )
        return
    try:
        _delete_left(task, client, identity, namespace, pods)
    finally:
        client.close()


def _delete_left(
    task: Any, client: PodClient, identity: TryIdentity, namespace: str, pods: list[dict[str, Any]]
) -> None:
    log, sleep = task.log, type(task).retry_sleep
    # The last try's failure is also the last chance for pods earlier tries left (failed deletes).
    try:
        sweep_earlier_tries(client, identity, namespace, log=log.warning, sleep=sleep, backoff=SHORT_BACKOFF)
    except EarlierTryNotGone as exc:
        log.error("Pods of earlier tries left behind: %s", exc)
    for pod in pods:
        meta = pod.get("metadata") or {}
        if not identity.owns_pod(pod) or meta.get("deletionTimestamp"):
            continue
        found = read_stamp(pod)
        if found is not None and found.kept:
            continue
        try:
            if delete(client, namespace, meta["name"], meta["uid"], sleep=sleep):
                log.warning(
                    "Deleted pod %s/%s: try %d failed without deleting it (its worker died or its delete "
                    "failed)",
                    namespace,
                    meta["name"],
                    identity.try_number,
                )
        except KubeError as exc:
            log.error(
                "Pod %s/%s of a failed try left behind: delete failed: %s", namespace, meta["name"], exc
            )
