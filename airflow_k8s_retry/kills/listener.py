"""A user's kill of a deferred task deletes its pod from the api-server, even with no triggerer.

When a user marks a task instance failed, successful or skipped through the REST API (or the UI),
Airflow calls the ``on_task_instance_failed`` / ``_success`` / ``_skipped`` listeners in the
api-server with ``previous_state=None``, inside the request that sets the state; Airflow 3.3 does
the same for the running and deferred task instances of a DAG run marked failed or successful.
(Airflow 3.1 has no ``_skipped`` hook, and 3.1 and 3.2 call no task instance listener when a DAG
run is marked.) For a deferred task, Airflow 3.3's triggerer then cancels the trigger and
``PodStateTrigger.on_kill`` deletes the pod; but only a triggerer running the trigger can: if the
triggerer holding it was just killed and no other has taken it yet (a hand-over), or every
triggerer is down, the trigger row is removed and no ``on_kill`` runs anywhere. Airflow 3.1 and
3.2 call no trigger ``on_kill`` at all.

A kill can also land after the trigger fired, while the task instance waits for a worker to resume
it (``scheduled`` or ``queued``, as long as a pool or ``parallelism`` makes it wait): Airflow
cleared its ``trigger_id`` when it accepted the event, no trigger is left to get an ``on_kill``,
and the worker that would act on the verdict is never started. A verdict reached while the pod
still runs (``execution.timeout``, a start or schedule timeout, a grace that ran out) would leave
it running.

And a kill of a running try does not always reach the worker's ``on_kill``: the worker's
supervisor learns of it at its next heartbeat (up to 5 s later, ``[workers] min_heartbeat_interval``);
a task that defers meanwhile has its deferral refused (the task instance is no longer running) and
its process ends with no SIGTERM, no ``on_kill`` and no trigger, while the pod it created runs on.

This listener covers those cases. For a task instance deferred on a ``PodStateTrigger`` that owns
its pod, it reads the pod's name, namespace, UID and connection from the trigger row. Then, in a
background thread (the request does not wait for Kubernetes) it waits :data:`ON_KILL_FIRST`
seconds where Airflow gives the trigger an ``on_kill`` (:data:`COMMIT_FIRST` on 3.1 and 3.2),
reads the task instance again (the state was set and not rolled back, and no worker has resumed
the try since) and the pod, and deletes what is left by UID on the same terms as ``on_kill``: a
pod gone, replaced, being deleted or stamped with a verdict is left alone, and
``on_kill_action="keep_pod"`` (a trigger that does not own its pod) keeps it. After a kill that
``on_kill`` handled this costs one database read and one GET.

For a task instance of this package's operator with no trigger (running, or waiting to resume in
``execute_complete`` with a ``PodStateTrigger`` event), it takes the namespace and connection from
that event (in ``next_kwargs``; the event names the connection only for a pod its task owns), else
from the try's rendered template fields (``namespace``, ``kubernetes_conn_id``, ``config_file``,
``cluster_context``; without a namespace, the connection's or ``default``, as the operator
resolves it; a namespace set only inside ``pod_template_file`` is not known here). After
:data:`ON_KILL_FIRST` seconds (the worker's SIGTERM, ``on_kill`` and SIGKILL come within about
10 s) and the same second look at the task instance, it lists the try's pods by label and deletes
each on the same terms, and keeps those of a task with ``on_kill_action="keep_pod"`` (their
annotation says so). After a kill that ``on_kill`` handled this costs one LIST.

The task runner and the scheduler call the same hooks with the state the task left (``running``)
for a task's own ending; those calls return at once, so a normal try costs nothing here. The
thread lives in the api-server process: if that process ends within the wait (a redeploy, a
worker refresh), this deletion is lost and the next try's sweep, or ``airflow kubernetes
cleanup-pods``, is what remains. The api-server needs the task's Kubernetes connection and
``get``/``delete`` on pods in the pod's namespace (``deploy/README.md``); without them it logs one
warning per kill.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from airflow.listeners import hookimpl

from airflow_k8s_retry import connection
from airflow_k8s_retry.compat import triggers_get_on_kill
from airflow_k8s_retry.kills.policy import KILLED_STATES, kept_on_kill
from airflow_k8s_retry.kube.errors import Forbidden, KubeError
from airflow_k8s_retry.kube.naming import ON_KILL_ANNOTATION, TryIdentity
from airflow_k8s_retry.kube.pods import KILL_BACKOFF, PodClient, retrying
from airflow_k8s_retry.kube.rbac import rbac_message

log = logging.getLogger(__name__)
T = TypeVar("T")

#: ``PodStateTrigger``'s classpath, as its ``serialize`` writes it in the trigger row.
TRIGGER_CLASSPATH = "airflow_k8s_retry.triggers.PodStateTrigger"
#: The trigger kwargs a kill needs (what ``PodStateTrigger.serialize`` writes).
POD_KEYS = ("kubernetes_conn_id", "namespace", "pod_name", "pod_uid")
#: The method a task instance resumes in after a ``PodStateTrigger`` event (operator and sensor).
RESUME_METHOD = "execute_complete"
#: The User-Agent of the api-server's requests, so a cluster's audit log tells them apart.
USER_AGENT = "airflow-k8s-retry/kill-listener"
#: Seconds the trigger's ``on_kill`` has to delete the pod before the listener looks: Airflow's
#: limit on ``on_kill`` (``[triggerer] on_kill_timeout``, 30 s) and a few seconds for the triggerer
#: to learn of the kill. A pod deleted under a trigger still watching it would be judged "deleted
#: externally" first.
ON_KILL_FIRST = 35.0
#: Where Airflow calls no trigger ``on_kill`` (3.1, 3.2): only the time for the request that set
#: the state to commit it, before the state is read again.
COMMIT_FIRST = 5.0

#: ``(ti) -> the trigger row`` (``Trigger``: ``classpath`` and ``kwargs``) of a deferred task instance.
TriggerRowOf = Callable[[Any], Any]
#: ``(key) -> (state, try_number)`` now of the task instance a ``TaskInstanceKey`` names, or None
#: once it is gone.
StateOf = Callable[[Any], "tuple[str | None, int] | None"]
#: ``(ti) -> the rendered template fields`` of the task instance's current try (a mapping).
RenderedFieldsOf = Callable[[Any], "Mapping[str, Any]"]
#: The task types (``TaskInstance.operator``) whose running tries the listener cleans up.
OPERATORS = frozenset({"RetryingPodOperator", "_RetryingKubernetesDecoratedOperator"})
#: The rendered fields that choose the cluster, as the trigger's ``cluster`` names them.
CLUSTER_FIELDS = ("config_file", "cluster_context")


@hookimpl
def on_task_instance_failed(previous_state: Any, task_instance: Any, error: Any) -> None:
    if previous_state is None:
        kill_deferred_pod(task_instance, "failed")


@hookimpl
def on_task_instance_success(previous_state: Any, task_instance: Any) -> None:
    if previous_state is None:
        kill_deferred_pod(task_instance, "success")


@hookimpl
def on_task_instance_skipped(previous_state: Any, task_instance: Any) -> None:
    if previous_state is None:
        kill_deferred_pod(task_instance, "skipped")


def kill_deferred_pod(
    ti: Any,
    state: str,
    *,
    trigger_row_of: TriggerRowOf | None = None,
    state_of: StateOf | None = None,
    rendered_fields_of: RenderedFieldsOf | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> threading.Thread | None:
    """Start the deletion of the pod of ``ti``, a task instance a user just set to ``state``, if it
    was deferred on a trigger that owns its pod, or of the pods of its try if it is this package's
    operator with no trigger (running, or waiting to resume with a trigger's event); the thread
    doing it, or None. Never raises.

    ``trigger_row_of``, ``state_of`` and ``rendered_fields_of`` read Airflow's metadata database
    by default (the api-server's own session, then a fresh one).
    """
    try:
        # Read now: the thread outlives the request's session the ORM object belongs to.
        key = ti.key
        why = (
            f"Task instance {key.dag_id}.{key.task_id} (run {key.run_id}, map index "
            f"{key.map_index}, try {key.try_number}) marked {state}"
        )

        def still_killed() -> bool:
            return _still_killed(key, state_of or task_instance_state)

        if getattr(ti, "trigger_id", None) is not None:
            pod = pod_in_trigger((trigger_row_of or trigger_row)(ti))
            if pod is None:
                return None
            wait = ON_KILL_FIRST if triggers_get_on_kill() else COMMIT_FIRST
            target: Callable[..., Any] = delete_pod_of_killed_task
            args: tuple[Any, ...] = (pod, why)
            what = f"pod {pod['pod_name']} is deleted in {wait:.0f} s unless on_kill has done it"
        else:
            # Running, or waiting to resume with the trigger's event (its trigger_id cleared when
            # Airflow accepted it): the try's pods, once its worker had the time to end.
            where = pod_in_event(ti) or try_in_rendered_fields(ti, rendered_fields_of or rendered_fields)
            if where is None:
                return None
            identity = TryIdentity.of(ti, connection.deployment_id())  # as the operator names the try
            wait, target, args = ON_KILL_FIRST, delete_try_pods_of_killed_task, (where, identity, why)
            namespace = where["namespace"] or "(the connection's)"
            what = f"the try's pods in namespace {namespace} are deleted in {wait:.0f} s unless on_kill has"
        thread = threading.Thread(
            target=target,
            args=args,
            kwargs={"still_killed": still_killed, "sleep": sleep, "wait": wait},
            name=f"k8s-retry-kill-{key.task_id}-{key.try_number}",
            daemon=True,
        )
        thread.start()
    except Exception as exc:  # a listener must never fail the user's request
        log.warning("Could not schedule the deletion of the pod of %s: %s: %s", ti, type(exc).__name__, exc)
        return None
    log.info("%s: %s", why, what)
    return thread


def trigger_row(ti: Any) -> Any:
    """The task instance's trigger row, read in the session the api-server set its state in."""
    from airflow.models.trigger import Trigger
    from sqlalchemy.orm import object_session

    session = object_session(ti)
    if session is not None:
        return session.get(Trigger, ti.trigger_id)
    from airflow.utils.session import create_session

    with create_session() as fresh:
        return fresh.get(Trigger, ti.trigger_id)


def task_instance_state(key: Any) -> tuple[str | None, int] | None:
    """The state and try number, as committed now (a fresh session), of the task instance ``key``
    (a ``TaskInstanceKey``) names."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.execute(
            select(TaskInstance.state, TaskInstance.try_number).where(
                TaskInstance.dag_id == key.dag_id,
                TaskInstance.task_id == key.task_id,
                TaskInstance.run_id == key.run_id,
                TaskInstance.map_index == key.map_index,
            )
        ).first()
    return None if row is None else (row[0], int(row[1]))


def _still_killed(key: Any, state_of: StateOf) -> bool:
    """Whether the task instance ``key`` names is still in a state only a kill leaves, on its try."""
    now = state_of(key)
    if now is None:
        return True  # the DAG run (or the DAG) was deleted since: the pod is nobody's
    state, current_try = now
    return current_try == key.try_number and state in KILLED_STATES


def pod_in_trigger(trigger: Any) -> dict[str, Any] | None:
    """The pod (:data:`POD_KEYS`) a ``PodStateTrigger`` row watches on behalf of its task, or None
    when the row is another trigger's, follows a pod it does not own, or is gone."""
    if trigger is None or trigger.classpath != TRIGGER_CLASSPATH:
        return None
    kwargs = trigger.kwargs
    if not kwargs.get("owned", True) or not kwargs.get("identity") or not kwargs.get("pod_uid"):
        return None
    pod = {key: kwargs.get(key) for key in POD_KEYS}
    if kwargs.get("cluster"):  # the task's in_cluster / config_file / cluster_context
        pod["cluster"] = dict(kwargs["cluster"])
    return pod


def pod_in_event(ti: Any) -> dict[str, Any] | None:
    """The pod (:data:`POD_KEYS`) of a task instance that resumes in :data:`RESUME_METHOD` with a
    ``PodStateTrigger`` event whose task owns its pod (the event names its connection), or None."""
    if getattr(ti, "next_method", None) != RESUME_METHOD or not getattr(ti, "next_kwargs", None):
        return None
    event = _decoded_next_kwargs(ti.next_kwargs).get("event")
    if not isinstance(event, Mapping):
        return None
    connection = event.get("connection")
    if not isinstance(connection, Mapping):
        return None  # a pod kept on a kill, a sensor's, or another trigger's event
    pod = {
        "kubernetes_conn_id": connection.get("kubernetes_conn_id"),
        "namespace": event.get("namespace"),
        "pod_name": event.get("pod_name"),
        "pod_uid": event.get("pod_uid"),
    }
    if not all(isinstance(pod[key], str) and pod[key] for key in ("namespace", "pod_name", "pod_uid")):
        return None
    if connection.get("cluster"):
        pod["cluster"] = dict(connection["cluster"])
    return pod


def try_in_rendered_fields(ti: Any, rendered_fields_of: RenderedFieldsOf) -> dict[str, Any] | None:
    """Where the pods of the running try of ``ti`` are (``kubernetes_conn_id``, ``namespace``, and
    ``cluster`` when the task chose one), from its rendered template fields; None for another
    operator's task instance."""
    if getattr(ti, "operator", None) not in OPERATORS:
        return None
    fields = rendered_fields_of(ti) or {}
    namespace = fields.get("namespace")
    template = fields.get("pod_template_dict")
    if not namespace and isinstance(template, Mapping):
        namespace = (template.get("metadata") or {}).get("namespace")
    conn_id = fields.get("kubernetes_conn_id")
    where: dict[str, Any] = {
        "kubernetes_conn_id": conn_id if isinstance(conn_id, str) and conn_id else None,
        "namespace": namespace if isinstance(namespace, str) and namespace else None,
    }
    cluster = {
        name: fields[name] for name in CLUSTER_FIELDS if isinstance(fields.get(name), str) and fields[name]
    }
    if cluster:
        where["cluster"] = cluster
    return where


def rendered_fields(ti: Any) -> Mapping[str, Any]:
    """The rendered template fields the try of ``ti`` stored when it started (a fresh session)."""
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as Rendered
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.execute(
            select(Rendered.rendered_fields).where(
                Rendered.dag_id == ti.dag_id,
                Rendered.task_id == ti.task_id,
                Rendered.run_id == ti.run_id,
                Rendered.map_index == ti.map_index,
            )
        ).first()
    return row[0] if row is not None and isinstance(row[0], Mapping) else {}


def _decoded_next_kwargs(raw: Any) -> Mapping[str, Any]:
    """A task instance's stored ``next_kwargs`` as a plain mapping, decoded as Airflow decodes them
    on resume: ``airflow.sdk.serde`` where it exists (plain JSON stays as it is), ``BaseSerialization``
    for a mapping it encoded (what earlier releases stored); Airflow 3.1's column gives a plain one."""
    decoded: Any = raw
    with contextlib.suppress(ImportError, KeyError, AttributeError, TypeError, ValueError):
        from airflow.sdk.serde import deserialize

        decoded = deserialize(raw)
    if isinstance(decoded, Mapping) and "__type" in decoded:
        from airflow.serialization.serialized_objects import BaseSerialization

        with contextlib.suppress(KeyError, AttributeError, TypeError, ValueError):
            decoded = BaseSerialization.deserialize(decoded)
    return decoded if isinstance(decoded, Mapping) else {}


def delete_pod_of_killed_task(
    pod: Mapping[str, Any],
    why: str,
    *,
    still_killed: Callable[[], bool] = lambda: True,
    sleep: Callable[[float], None] = time.sleep,
    wait: float = ON_KILL_FIRST,
) -> bool:
    """After ``wait`` seconds, and if the task is ``still_killed()``, delete the pod by UID unless
    it is gone, replaced, being deleted or stamped; retry API errors for about 22 s. True when this
    call deleted it; never raises (it runs in a thread)."""
    sleep(wait)
    try:
        if not still_killed():
            log.info("%s: pod %s kept: the task instance is no longer in that state", why, pod["pod_name"])
            return False
    except Exception as exc:
        log.warning("%s: pod %s kept: could not read the task instance again (%s)", why, pod["pod_name"], exc)
        return False
    return _delete(pod, why, sleep)


def delete_try_pods_of_killed_task(
    where: Mapping[str, Any],
    identity: Any,
    why: str,
    *,
    still_killed: Callable[[], bool] = lambda: True,
    sleep: Callable[[float], None] = time.sleep,
    wait: float = ON_KILL_FIRST,
) -> int:
    """After ``wait`` seconds, and if the task is ``still_killed()``, delete by UID each pod of the
    try ``identity`` names in ``where`` (its namespace and connection) that is not gone, being
    deleted, stamped with a verdict or kept on a kill by its task; retry API errors for about
    22 s. How many this call deleted; never raises (it runs in a thread)."""
    sleep(wait)
    try:
        if not still_killed():
            log.info("%s: its pods kept: the task instance is no longer in that state", why)
            return 0
        client, namespace = connection.pod_client(
            where.get("kubernetes_conn_id"), where.get("namespace"), where.get("cluster")
        )
    except Exception as exc:
        log.warning("%s: its pods kept: %s: %s", why, type(exc).__name__, exc)
        return 0
    client.api_client.user_agent = USER_AGENT
    try:
        return _with_backoff(
            lambda: _delete_try_pods(client, namespace, identity, why),
            0,
            sleep=sleep,
            kept=f"{why}: its pods kept",
            verb="list",
            namespace=namespace,
            failing="listing or deleting",
        )
    finally:
        client.close()


def _with_backoff(
    action: Callable[[], T],
    otherwise: T,
    *,
    sleep: Callable[[float], None],
    kept: str,
    verb: str,
    namespace: str,
    failing: str,
) -> T:
    """``action``, again after each pause of ``KILL_BACKOFF`` while the API answers with an error;
    after the last, logs why the pods are ``kept`` (the RBAC rule missing, or the error) and returns
    ``otherwise``."""
    try:
        return retrying(action, KILL_BACKOFF, sleep=sleep)
    except Forbidden as exc:
        log.warning("%s: %s", kept, rbac_message(exc, verb, "pods", namespace))
    except KubeError as exc:
        log.warning("%s: %s failed %d times: %s", kept, failing, len(KILL_BACKOFF) + 1, exc)
    return otherwise


def _delete_try_pods(client: PodClient, namespace: str, identity: TryIdentity, why: str) -> int:
    """Delete the try's pods that a kill may delete (see :func:`delete_try_pods_of_killed_task`)."""
    deleted = 0
    for pod in client.list_pods(namespace, identity.selector("try")):
        meta = pod["metadata"]
        if not identity.owns_pod(pod):
            continue
        if (meta.get("annotations") or {}).get(ON_KILL_ANNOTATION) == "keep":
            log.info("%s: pod %s kept (on_kill_action=keep_pod)", why, meta["name"])
            continue
        kept = kept_on_kill(pod, meta["uid"])
        if kept is not None:
            log.info("%s: pod %s %s", why, meta["name"], kept)
        elif client.delete(namespace, meta["name"], meta["uid"]):
            deleted += 1
            log.info("%s: pod %s deleted", why, meta["name"])
    return deleted


def _delete(pod: Mapping[str, Any], why: str, sleep: Callable[[float], None]) -> bool:
    namespace, name, uid = pod["namespace"], pod["pod_name"], pod["pod_uid"]
    try:
        client, _ = connection.pod_client(pod.get("kubernetes_conn_id"), namespace, pod.get("cluster"))
    except Exception as exc:
        log.warning("%s: pod %s kept: no Kubernetes client here (%s: %s)", why, name, type(exc).__name__, exc)
        return False
    client.api_client.user_agent = USER_AGENT

    def delete() -> bool:
        kept = kept_on_kill(client.read(namespace, name), uid)
        if kept is not None:
            log.info("%s: pod %s %s", why, name, kept)
            return False
        deleted = bool(client.delete(namespace, name, uid))
        log.info("%s: pod %s %s", why, name, "deleted" if deleted else "was already gone")
        return deleted

    try:
        return _with_backoff(
            delete,
            False,
            sleep=sleep,
            kept=f"{why}: pod {name} kept",
            verb="delete",
            namespace=namespace,
            failing="delete",
        )
    finally:
        client.close()
