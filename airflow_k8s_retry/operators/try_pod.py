"""The pod a try of ``RetryingPodOperator`` creates: the cncf provider's pod, with this package's
per-try name, labels, and annotations (the task instance, the base container); the client that
creates it, and the trigger that watches it.

The provider builds the pod (``build_pod_request_obj``: templating, pod templates, ``Secret``s, the
XCom sidecar, KPO's labels, ``pod_mutation_hook``) once per try; each relaunch reuses it under its
own name. The try's identity (:class:`~airflow_k8s_retry.kube.naming.TryIdentity`) comes from the
task instance and names, labels and adopts the try's pods.
"""

from __future__ import annotations

import copy
import time
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow_k8s_retry.classification.observation import BASE_CONTAINER_ANNOTATION
from airflow_k8s_retry.kube.naming import ON_KILL_ANNOTATION, TI_ANNOTATION, TryIdentity
from airflow_k8s_retry.operators.arguments import local_config_errors

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_k8s_retry.classification.model import Verdict
    from airflow_k8s_retry.kube.pods import CreatedPod, PodClient
    from airflow_k8s_retry.operators.parts import TryOperator
    from airflow_k8s_retry.triggers.pod import PodStateTrigger

#: How much longer than the try's ``execution_timeout`` the deferral may last: the trigger itself
#: ends the try at the deadline; Airflow's deferral timeout is only the backstop.
DEFER_TIMEOUT_PADDING = timedelta(minutes=5)


def identity_of(context: Context) -> TryIdentity:
    """The try the task instance in ``context`` runs (and the deployment it runs in)."""
    from airflow.providers.common.compat.sdk import conf

    return TryIdentity.of(context["ti"], conf.get("kubernetes_retry", "deployment_id", fallback="") or "")


def deadline_of(context: Context, execution_timeout: timedelta | None) -> float | None:
    """When the try's ``execution_timeout`` runs out (epoch seconds), counted from the try's start."""
    if execution_timeout is None:
        return None
    start = getattr(context["ti"], "start_date", None)
    began = float(start.timestamp()) if start is not None else time.time()
    return began + float(execution_timeout.total_seconds())


def build_try_pod(op: TryOperator, context: Context, relaunch: int = 0) -> dict[str, Any]:
    """The pod as API JSON: the provider's ``build_pod_request_obj``, then the per-try name, this
    package's labels and the task instance annotation."""
    identity = identity_of(context)
    if getattr(op, "pod_request_obj", None) is None:
        where = f"pod_template_file {op.pod_template_file}" if op.pod_template_file else ""
        with local_config_errors(op.task_id, where):
            if op.pod_template_file and not Path(op.pod_template_file).is_file():
                raise ValueError(f"pod_template_file {op.pod_template_file!r} is not a file")
            # The provider logs the name it builds; let it be the try's first pod name.
            name: str | None = getattr(op, "name", None)
            suffix: bool = getattr(op, "random_name_suffix", True)
            op.name, op.random_name_suffix = identity.pod_name(0, prefix=name), False
            try:
                # Airflow's context always has "dag"; the provider reads it (a stand-in may not).
                full = context if "dag" in context else {**context, "dag": None}
                op.pod_request_obj = op.build_pod_request_obj(full)
            finally:
                op.name, op.random_name_suffix = name, suffix
    pod: dict[str, Any] = op.hook.api_client.sanitize_for_serialization(copy.deepcopy(op.pod_request_obj))
    meta = pod.setdefault("metadata", {})
    meta["name"] = identity.pod_name(relaunch, prefix=op.name)
    meta.setdefault("labels", {}).update(identity.labels(relaunch))
    annotations = meta.setdefault("annotations", {})
    if identity.ti_id:
        annotations[TI_ANNOTATION] = identity.ti_id
    if getattr(getattr(op, "on_kill_action", None), "value", None) == "keep_pod":
        annotations[ON_KILL_ANNOTATION] = "keep"
    # The classifier judges success, skip and failure on the base container alone (a sidecar never
    # decides): the provider puts it first, named base_container_name.
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    annotations[BASE_CONTAINER_ANNOTATION] = str(containers[0].get("name") or op.base_container_name)
    if getattr(op, "memory_growth", None) is not None:
        size_memory(op, context, pod)
    return pod


class SizedTry(NamedTuple):
    """What ``memory_growth`` gave one try: its number, what it runs with and why (``None``: as
    written), and each container's resources as sized."""

    try_number: int
    note: str | None
    resources: dict[str, Any]


def size_memory(op: TryOperator, context: Context, pod: dict[str, Any]) -> None:
    """Give the try's pod the memory ``memory_growth`` planned for this try (read once per try:
    a relaunch in the same try gets the same size)."""
    from airflow_k8s_retry import memory_growth

    assert op.memory_growth is not None
    try_number = context["ti"].try_number
    containers = (pod.get("spec") or {}).get("containers") or []
    sized: SizedTry | None = getattr(op, "_memory_sized", None)
    if sized is None or sized.try_number != try_number:
        note = memory_growth.size_for_try(op.memory_growth, context, pod, op.log.warning)
        resources = copy.deepcopy({c.get("name"): c.get("resources") for c in containers})
        op._memory_sized = SizedTry(try_number, note, resources)
        if note:
            op.log.info("Try %d: %s", try_number, note)
        return
    for container in containers:
        if sized.resources.get(container.get("name")) is not None:
            container["resources"] = copy.deepcopy(sized.resources[container.get("name")])


def memory_note(op: TryOperator, context: Context) -> str | None:
    """What this try runs with and why, when ``memory_growth`` sized it (the pod is built, and the
    plan read, if this process has not done so for this try)."""
    sized: SizedTry | None = getattr(op, "_memory_sized", None)
    if sized is None or sized.try_number != context["ti"].try_number:
        build_try_pod(op, context)
        sized = op._memory_sized
    return sized.note if sized is not None else None


def ran_with(op: TryOperator, client: PodClient, pod: CreatedPod, context: Context) -> dict[str, Any]:
    """The pod as the trigger judged it when its containers' resources travelled with the event
    (what the pod really ran with, a LimitRange's defaults included); the try's pod as built otherwise."""
    from airflow_k8s_retry.operators import endings

    body, _ = endings.judged_on(op, client, pod)
    containers = ((body or {}).get("spec") or {}).get("containers") or []
    if body is not None and any("resources" in c for c in containers):
        body.setdefault("metadata", {})["namespace"] = pod.namespace
        return body
    return build_try_pod(op, context)


def grow_after(
    op: TryOperator, context: Context, client: PodClient, pod: CreatedPod, verdict: Verdict
) -> Verdict:
    """After an OOM kill, plan the next try's memory (or fail at once when the caps allow no more)."""
    from dataclasses import replace

    from airflow_k8s_retry import memory_growth

    assert op.memory_growth is not None
    if memory_growth.oom_container(verdict) is None:
        # Another cause: the size stays; the try's cause says what it ran with when growth set it.
        note = memory_note(op, context)
        return replace(verdict, message=f"{verdict.message}; this try ran with {note}") if note else verdict
    grown = memory_growth.after_oom(
        op.memory_growth,
        context=context,
        verdict=verdict,
        ran_on=ran_with(op, client, pod, context),
        read=client.list_sizing,
        log=op.log.warning,
    )
    if grown is not verdict:
        op.log.warning("%s", grown.message.rpartition("; ")[2])
    return grown


def sized_success(op: TryOperator, context: Context, client: PodClient, pod: CreatedPod) -> None:
    """A try succeeded: ``memory_growth`` remembers its size (with ``remember``) and ends the run's plan."""
    from airflow_k8s_retry import memory_growth

    assert op.memory_growth is not None
    ran_on = ran_with(op, client, pod, context)
    memory_growth.after_success(op.memory_growth, context, ran_on, op.log.warning)


def pod_client(op: TryOperator) -> PodClient:
    """The client of the operator's connection (or the default kubeconfig); a broken local
    configuration is a one-line permanent failure naming where it came from."""
    import os

    from airflow_k8s_retry.kube.pods import PodClient

    source = f"connection {op.kubernetes_conn_id!r}"
    if not op.kubernetes_conn_id:
        source = f"default kubeconfig, KUBECONFIG={os.environ.get('KUBECONFIG', '')!r}"
    with local_config_errors(op.task_id, source):
        return PodClient(op.hook.api_client)


def trigger_for(
    op: TryOperator,
    identity: TryIdentity,
    created: CreatedPod,
    relaunch: int,
    deadline: float | None,
) -> PodStateTrigger:
    """The trigger that watches the try's pod ``created`` until its verdict."""
    from airflow_k8s_retry.triggers.pod import PodStateTrigger

    return PodStateTrigger(
        kubernetes_conn_id=op.kubernetes_conn_id,
        namespace=created.namespace,
        pod_name=created.name,
        pod_uid=created.uid,
        identity=identity.to_payload(),
        policy=op.failure_policy.to_payload(),
        history=None,
        relaunches=relaunch,
        execution_deadline=deadline,
        poll_interval=op.poll_interval,
        owned=op.on_kill_action.value != "keep_pod",
        logging_interval=op.streaming_interval,
        base_container_name=op.base_container_name,
        cluster=cluster_of(op),
    )


def cluster_of(op: TryOperator) -> dict[str, Any] | None:
    """The task's KPO cluster arguments (rendered), or ``None`` when it set none."""
    from airflow_k8s_retry.connection import chosen_cluster

    return chosen_cluster(op.in_cluster, op.config_file, op.cluster_context)


def follow_here(op: TryOperator, trigger: PodStateTrigger) -> dict[str, Any] | None:
    """``deferrable=False``: the trigger's own ``run()`` in the worker, until its one event.

    The same watch, tracker, classifier and verdict as in a triggerer; the worker holds its slot
    meanwhile, as KPO's sync mode does. The after-firing check stays off: the worker itself acts on
    the event, and its ``on_kill`` deletes the pod on a kill.
    """
    import asyncio

    trigger.after_firing_check = False

    async def first_event() -> dict[str, Any] | None:
        async for event in trigger.run():
            return dict(event.payload)
        return None

    op.log.info("Following pod %s/%s from the worker (deferrable=False)", trigger.namespace, trigger.pod_name)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(first_event())
    # Called from inside an event loop (a test, an async runner): follow on a loop of its own.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, first_event()).result()


def defer_timeout(deadline: float | None) -> timedelta | None:
    """The deferral's timeout: the time left to the deadline, plus :data:`DEFER_TIMEOUT_PADDING`."""
    if deadline is None:
        return None
    return timedelta(seconds=max(0.0, deadline - time.time())) + DEFER_TIMEOUT_PADDING
