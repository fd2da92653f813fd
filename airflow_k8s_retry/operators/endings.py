"""What ``RetryingPodOperator`` does with a finished try's pod before it is cleaned up: the success's
logs and XCom result, the failure's report, and the provider's callbacks.

It reads as few things as it needs: the failure report comes from what the trigger judged the pod
on, carried in its event (:mod:`airflow_k8s_retry.kube.snapshot`), or, for an event without it,
from one read of the pod and one of its Events; container logs are read only for containers that
ever ran (a pod whose image never pulled has no log, and reading it would cost three requests for
nothing). The operator's ``get_logs`` writes the whole log right after the report, so the report
carries no separate tail. The provider's log reader reads the pod three times around the log (its
containers' names, whether the stream ended because the container did, whether it still runs); for
a failed pod that the trigger saw finished, the pod it carried answers those reads, so a failed
try's log costs one request, the log itself.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from airflow_k8s_retry.hints import with_hint

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_k8s_retry.classification.model import Verdict
    from airflow_k8s_retry.kube.errors import KubeError
    from airflow_k8s_retry.kube.pods import CreatedPod, Json, PodClient
    from airflow_k8s_retry.operators.parts import TryOperator


def create_failed(op: TryOperator, context: Context, exc: KubeError, namespace: str, name: str) -> Exception:
    """What the task raises when the API refused (or never answered) the try's create: the error is
    judged (:func:`~airflow_k8s_retry.kube.lifecycle.create_error_verdict`), logged, published and counted."""
    from airflow_k8s_retry.exceptions import exception_for
    from airflow_k8s_retry.kube.lifecycle import create_error_verdict
    from airflow_k8s_retry.metrics import count_task_verdict

    verdict = create_error_verdict(exc, namespace, name)
    op.log.error("%s: %s", verdict.reason.value, verdict.message)
    push_verdict(op, context, verdict)
    count_task_verdict(verdict, context, namespace)
    return exception_for(verdict, f"{verdict.reason.value}: {verdict.message}")


def succeeded(op: TryOperator, client: PodClient, pod: CreatedPod) -> Any:
    """The success's logs (with ``get_logs``) and XCom result (with ``do_xcom_push``)."""
    if op.get_logs:
        write_logs(op, pod)
    return client.read_xcom(pod.namespace, pod.name) if op.do_xcom_push else None


def failed(
    op: TryOperator, context: Context, client: PodClient, pod: CreatedPod, verdict: Verdict
) -> Verdict:
    """Report a failure (or a skip) in the task log, the whole log after it, and the verdict in XCom.

    Returns the verdict as it may be published (XCom, a stamp, the exception text): a termination
    message can be a log tail (``FallbackToLogsOnError``), so only the task log may show it, and only
    with ``get_logs=True``.
    """
    from airflow_k8s_retry.classification.model import Outcome
    from airflow_k8s_retry.kube import lifecycle
    from airflow_k8s_retry.kube.pods import failure_report

    body, events = judged_on(op, client, pod)
    published = lifecycle.withhold_termination_messages(verdict, body)
    shown = verdict if op.get_logs else published
    report = with_hint(failure_report(shown.to_payload(), pod=body, events=events, log_tail=""), verdict)
    push_verdict(op, context, published)
    if verdict.outcome is Outcome.SKIP:
        op.log.info("%s\n(pod %s)", report, pod.name)
    else:
        op.log.error("Pod %s: %s", pod.name, report)
    ran = lifecycle.started_containers(body)
    if op.get_logs and ran:
        write_logs(op, pod)
    skipped_success = verdict.outcome is Outcome.SKIP and verdict.reason.value == "pod.succeeded"
    if op.do_xcom_push and ran and not skipped_success:
        # As KPO: a result written before the failure (or a skip by exit code) is still pushed; a
        # success skipped by skip_on_exit_code=0 pushes nothing.
        push_partial_result(op, context, client, pod)
    return published


def judged_on(op: TryOperator, client: PodClient, pod: CreatedPod) -> tuple[Json | None, list[Json]]:
    """The pod and its Events as the trigger saw them when it judged (carried in its event), or as
    read now when the event carries none (an older trigger's, or a snapshot too large to carry)."""
    from airflow_k8s_retry.kube import lifecycle, snapshot

    carried = snapshot.unpack(op._seen, pod.uid)
    # The snapshot leaves termination messages out; with get_logs=True the report may show them,
    # so the pod is read again for it.
    wanted = op.get_logs and bool((op._seen or {}).get("withheld"))
    if carried is not None and not wanted:
        return carried
    body, events, _ = lifecycle.evidence(client, pod, None, log=op.log.warning)
    return body, events


def write_logs(op: TryOperator, pod: CreatedPod) -> None:
    """The whole log of ``container_logs`` (the base container by default), through the provider's
    log reader, with its prefix and ``log_formatter``; with ``logging_interval``, what the trigger
    already streamed of the base container is not written again."""
    v1pod = as_v1pod(pod)
    options = {
        "follow_logs": False,
        "container_name_log_prefix_enabled": op.container_name_log_prefix_enabled,
        "log_formatter": op.log_formatter,
    }
    try:
        with _pod_reads_answered_by(op, _finished_pod_carried(op, pod)):
            _fetch_logs(op, v1pod, options)
    except Exception as exc:  # the provider's reader raises client errors; a log is not a verdict
        op.log.warning("Could not read the logs of pod %s: %s", pod.name, type(exc).__name__)


def _fetch_logs(op: TryOperator, v1pod: Any, options: dict[str, Any]) -> None:
    if op.init_container_logs:
        op.pod_manager.fetch_requested_init_container_logs(
            pod=v1pod, init_containers=op.init_container_logs, **options
        )
    containers = op.container_logs
    if op._log_position is not None:  # the trigger streamed the base container's head
        from airflow_k8s_retry.kube.logstream import write_after

        containers = write_after(op, v1pod, containers, op._log_position)
    if containers:
        op.pod_manager.fetch_requested_container_logs(pod=v1pod, containers=containers, **options)


def _finished_pod_carried(op: TryOperator, pod: CreatedPod) -> Any:
    """The pod the trigger carried in its event, as the provider's ``V1Pod``, when none of its
    containers was still running (what the reader's pod reads would find); otherwise ``None``."""
    from airflow_k8s_retry.kube import snapshot

    carried = snapshot.unpack(op._seen, pod.uid)
    body = carried[0] if carried is not None else None
    if body is None or not (body.get("spec") or {}).get("containers"):
        return None
    status = body.get("status") or {}
    statuses = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    if any((cs.get("state") or {}).get("running") for cs in statuses):
        return None
    from airflow_k8s_retry.kube.pods import v1pod_from

    try:
        return v1pod_from(body)
    except Exception:  # a status the client's models refuse: the reader reads the pod itself
        return None


@contextmanager
def _pod_reads_answered_by(op: TryOperator, known: Any) -> Iterator[None]:
    """While the provider's reader runs, its reads of the pod return ``known`` (when given)."""
    if known is None:
        yield
        return
    manager = op.pod_manager
    manager.read_pod = lambda _pod: known
    try:
        yield
    finally:
        del manager.read_pod


def push_partial_result(op: TryOperator, context: Context, client: PodClient, pod: CreatedPod) -> None:
    try:
        value = client.read_xcom(pod.namespace, pod.name)
    except Exception as exc:  # the failure is the verdict's; a missing result is not news
        op.log.info("No XCom result from failed pod %s (%s)", pod.name, type(exc).__name__)
        return
    if value is None:
        return
    ti = context["ti"]
    if op.multiple_outputs:  # as the task runner fans a returned dict out, KPO's failure path does too
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            op.log.warning(
                "XCom result of failed pod %s is not a dict with string keys; pushed as return_value "
                "only (multiple_outputs=True)",
                pod.name,
            )
        else:
            for key, item in value.items():
                ti.xcom_push(key=key, value=item)
    ti.xcom_push(key="return_value", value=value)


def push_verdict(op: TryOperator, context: Context, verdict: Verdict) -> None:
    try:
        context["ti"].xcom_push(key="verdict", value=verdict.summary())
    except Exception as exc:  # publishing the verdict must never skip the cleanup
        op.log.warning("Could not push the verdict to XCom: %s", type(exc).__name__)


def as_v1pod(pod: CreatedPod) -> Any:
    """The ``V1Pod`` the provider's callbacks and log reader take (name, namespace and UID)."""
    return pod.as_v1pod()


def run_callbacks(op: TryOperator, hook: str, context: Context, **kwargs: Any) -> None:
    """Call ``hook`` on each of the operator's ``callbacks`` (KPO's ``KubernetesPodOperatorCallback``)."""
    if not op.callbacks:
        return
    from airflow.providers.cncf.kubernetes.callbacks import ExecutionMode

    for callback in op.callbacks:
        getattr(callback, hook)(
            client=op.client, mode=ExecutionMode.ASYNC, context=context, operator=op, **kwargs
        )
