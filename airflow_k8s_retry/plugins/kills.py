"""A user's kill of a deferred task deletes its pod from the api-server, whatever the triggerers do.

When a user marks a task instance (or its DAG run) failed, successful or skipped, Airflow 3 calls
the ``on_task_instance_failed`` / ``_success`` / ``_skipped`` listeners in the api-server, once
the new state is committed, with ``previous_state=None``. For a deferred task the triggerer learns
of the change at its next sync and cancels the trigger, and ``PodStateTrigger.on_kill`` deletes
the pod. That needs a triggerer running the trigger: if the triggerer holding it was just killed
and no other has taken it yet (a hand-over), or every triggerer is down, Airflow removes the
trigger row and no ``on_kill`` runs anywhere, so the pod would run on.

This listener covers that case. For a task instance deferred on a ``PodStateTrigger`` that owns
its pod, it reads the trigger's pod name, namespace, UID and connection from the trigger row and,
in a background thread (the API request does not wait for Kubernetes), gives the trigger's own
``on_kill`` :data:`ON_KILL_FIRST` seconds to act (a running triggerer cancels the trigger within
seconds, and Airflow gives ``on_kill`` 30), then reads the pod and deletes what is left by UID,
on the same terms as ``on_kill``: a pod already gone, replaced or stamped with a verdict is left alone, and
``on_kill_action="keep_pod"`` (a trigger that does not own its pod) keeps it. After a normal kill
this costs one GET that finds the pod gone.

The task runner and the scheduler call the same hooks with a previous state (``running``) for a
task's own ending; those calls return at once, so a normal try costs no request here. The
api-server needs the task's Kubernetes connection and ``pods`` ``get``/``delete`` rights in the
pod's namespace (``deploy/``); without them it logs one warning and the trigger's ``on_kill`` (or
the next try's sweep) remains the cleanup.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from airflow.listeners import hookimpl

log = logging.getLogger(__name__)

#: The trigger kwargs a kill needs (what ``PodStateTrigger.serialize`` writes).
POD_KEYS = ("kubernetes_conn_id", "namespace", "pod_name", "pod_uid")
#: The User-Agent of the api-server's requests, so a cluster's audit log tells them apart.
USER_AGENT = "airflow-k8s-retry/kill-listener"
#: Seconds the trigger's ``on_kill`` has to delete the pod before the listener looks: Airflow's
#: limit on ``on_kill`` (``[triggerer] on_kill_timeout``, 30 s) and a few seconds for the triggerer
#: to learn of the kill. A pod deleted under a trigger still watching it would be judged "deleted
#: externally" first.
ON_KILL_FIRST = 35.0


@hookimpl
def on_task_instance_failed(previous_state: Any, task_instance: Any, error: Any) -> None:
    _on_state_set_by_user(previous_state, task_instance, "failed")


@hookimpl
def on_task_instance_success(previous_state: Any, task_instance: Any) -> None:
    _on_state_set_by_user(previous_state, task_instance, "success")


@hookimpl
def on_task_instance_skipped(previous_state: Any, task_instance: Any) -> None:
    _on_state_set_by_user(previous_state, task_instance, "skipped")


def _on_state_set_by_user(previous_state: Any, ti: Any, state: str) -> None:
    if previous_state is not None or getattr(ti, "trigger_id", None) is None:
        return  # a task's own ending (task runner, scheduler), or a task that was not deferred
    try:
        pod = deferred_pod_of(ti)
    except Exception as exc:  # a listener must never fail the user's request
        log.warning("Could not read the trigger of %s to delete its pod: %s: %s", ti, type(exc).__name__, exc)
        return
    if pod is None:
        return
    why = f"Task instance {ti.dag_id}.{ti.task_id} (run {ti.run_id}, try {ti.try_number}) marked {state}"
    threading.Thread(
        target=delete_pod_of_killed_task,
        args=(pod, why),
        name=f"k8s-retry-kill-{pod['pod_name']}",
        daemon=True,
    ).start()


def deferred_pod_of(ti: Any) -> dict[str, Any] | None:
    """The pod a deferred task instance's ``PodStateTrigger`` watches (its :data:`POD_KEYS`), or
    None when the trigger is another one's, follows a pod it does not own, or is gone."""
    from airflow.models.trigger import Trigger
    from sqlalchemy.orm import object_session

    session = object_session(ti)
    if session is not None:
        return pod_in_trigger(session.get(Trigger, ti.trigger_id))
    from airflow.utils.session import create_session

    with create_session() as fresh:
        return pod_in_trigger(fresh.get(Trigger, ti.trigger_id))


def pod_in_trigger(trigger: Any) -> dict[str, Any] | None:
    from airflow_k8s_retry.triggers import CLASSPATH

    if trigger is None or trigger.classpath != CLASSPATH:
        return None
    kwargs = trigger.kwargs
    if not kwargs.get("owned", True) or not kwargs.get("pod_uid"):
        return None
    return {key: kwargs.get(key) for key in POD_KEYS}


def delete_pod_of_killed_task(
    pod: Mapping[str, Any], why: str, *, sleep: Callable[[float], None] = time.sleep
) -> bool:
    """After :data:`ON_KILL_FIRST` seconds, delete the killed task's pod by UID unless it is gone,
    replaced or stamped; retry API errors for about 22 s. True when this call deleted it; never
    raises (it runs in a thread)."""
    from airflow_k8s_retry import connection
    from airflow_k8s_retry.kube.errors import Forbidden, KubeError
    from airflow_k8s_retry.kube.lifecycle import KILL_BACKOFF, kept_on_kill
    from airflow_k8s_retry.kube.rbac import rbac_message

    namespace, name, uid = pod["namespace"], pod["pod_name"], pod["pod_uid"]
    sleep(ON_KILL_FIRST)
    try:
        client, _ = connection.pod_client(pod.get("kubernetes_conn_id"), namespace)
    except Exception as exc:
        log.warning("%s: pod %s kept: no Kubernetes client here (%s: %s)", why, name, type(exc).__name__, exc)
        return False
    client.api_client.user_agent = USER_AGENT
    try:
        for attempt, pause in enumerate((*KILL_BACKOFF, None)):
            try:
                kept = kept_on_kill(client.read(namespace, name), uid)
                if kept is not None:
                    log.info("%s: pod %s %s", why, name, kept)
                    return False
                deleted = client.delete(namespace, name, uid)
                log.info("%s: pod %s %s", why, name, "deleted" if deleted else "was already gone")
                return deleted
            except KubeError as exc:
                if pause is not None:
                    sleep(pause)
                elif isinstance(exc, Forbidden):
                    log.warning(
                        "%s: pod %s kept: %s", why, name, rbac_message(exc, "delete", "pods", namespace)
                    )
                else:
                    log.warning("%s: pod %s kept: delete failed %d times: %s", why, name, attempt + 1, exc)
        return False
    finally:
        client.close()
