"""``PodCompletionSensor``: wait for a pod this task did not create, with the operator's classifier.

Another system (a controller, a CronJob, a different DAG) owns the pod; the sensor only watches it.
It finds the pod by name or by a label selector that must match exactly one pod, defers to
:class:`~airflow_k8s_retry.triggers.PodStateTrigger` with ``owned=False``, and turns the verdict
into success, a skip, or the same two failure exceptions as the operator. It deletes nothing unless
``delete_pod_on_finish`` asks for it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_k8s_retry.compat import AirflowException
from airflow_k8s_retry.connection import DEFAULT_CONN_ID
from airflow_k8s_retry.exceptions import PodFailure, PodFailurePermanent

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_k8s_retry.classification.policy import FailurePolicy
    from airflow_k8s_retry.kube.pods import PodClient

DEFER_TIMEOUT_PADDING = timedelta(minutes=5)


class PodSelectionError(AirflowException):  # type: ignore[misc]
    """The sensor's pod name or label selector does not name exactly one pod."""


class PodCompletionSensor(BaseOperator):  # type: ignore[misc]
    """Wait until a pod finishes; its failures are classified like the operator's.

    :param pod_name: name of the pod to watch (give this or ``label_selector``).
    :param label_selector: a label selector that must match exactly one pod, e.g.
        ``"app=nightly-export,run=2024-06-01"``.
    :param namespace: namespace of the pod; default: the connection's, else ``default``.
    :param kubernetes_conn_id: Airflow connection of type ``kubernetes``.
    :param failure_policy: a :class:`~airflow_k8s_retry.classification.policy.FailurePolicy`
        overriding graces and outcomes of the default rules.
    :param delete_pod_on_finish: delete the pod (by UID) once it has a verdict; off by default
        because the sensor did not create it.
    :param poll_interval: seconds between the trigger's safety polls.
    :param timeout: give up after this long (seconds or a ``timedelta``); the pod is left alone.
    """

    template_fields: Sequence[str] = ("pod_name", "label_selector", "namespace", "kubernetes_conn_id")
    ui_color = "#e8f1d9"

    def __init__(
        self,
        *,
        pod_name: str | None = None,
        label_selector: str | None = None,
        namespace: str | None = None,
        kubernetes_conn_id: str | None = DEFAULT_CONN_ID,
        failure_policy: FailurePolicy | None = None,
        delete_pod_on_finish: bool = False,
        poll_interval: float = 10.0,
        timeout: float | timedelta | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if bool(pod_name) == bool(label_selector):
            raise ValueError(
                f"{self.task_id}: give exactly one of pod_name and label_selector "
                f"(got pod_name={pod_name!r}, label_selector={label_selector!r})"
            )
        from airflow_k8s_retry.classification.policy import FailurePolicy, PolicyError

        if failure_policy is not None and not isinstance(failure_policy, FailurePolicy):
            raise PolicyError(
                f"{self.task_id}: failure_policy must be a FailurePolicy, got {type(failure_policy).__name__}"
            )
        self.pod_name = pod_name
        self.label_selector = label_selector
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.failure_policy = failure_policy or FailurePolicy()
        self.delete_pod_on_finish = delete_pod_on_finish
        self.poll_interval = poll_interval
        if timeout is not None and not isinstance(timeout, timedelta):
            timeout = timedelta(seconds=timeout)
        self.timeout = timeout

    def _client(self) -> tuple[PodClient, str]:
        from airflow_k8s_retry.connection import pod_client

        return pod_client(self.kubernetes_conn_id, self.namespace)

    def _find(self, client: PodClient, namespace: str) -> dict[str, Any]:
        if self.pod_name:
            pod = client.read(namespace, self.pod_name)
            if pod is None:
                raise PodSelectionError(
                    f"pod {namespace}/{self.pod_name} does not exist; check pod_name and namespace"
                )
            return pod
        selector = str(self.label_selector)
        pods = client.list_pods(namespace, selector)
        if len(pods) != 1:
            names = sorted(p["metadata"]["name"] for p in pods)
            found = f"{len(pods)} pods ({', '.join(names[:10])}{', ...' if len(names) > 10 else ''})"
            raise PodSelectionError(
                f"label_selector {selector!r} in namespace {namespace!r} must match exactly one pod, "
                f"found {found if pods else 'none'}; make the selector more specific or use pod_name"
            )
        return pods[0]

    def _deadline(self) -> float | None:
        limits = [t.total_seconds() for t in (self.timeout, self.execution_timeout) if t is not None]
        return time.time() + min(limits) if limits else None

    def execute(self, context: Context) -> Any:
        from airflow_k8s_retry.triggers import PodStateTrigger

        client, namespace = self._client()
        try:
            pod = self._find(client, namespace)
        finally:
            client.close()
        meta = pod["metadata"]
        context["ti"].xcom_push(key="pod_name", value=meta["name"])
        context["ti"].xcom_push(key="pod_namespace", value=namespace)
        self.log.info("Watching pod %s/%s (uid %s)", namespace, meta["name"], meta["uid"])
        deadline = self._deadline()
        timeout = None
        if deadline is not None:
            timeout = timedelta(seconds=max(0.0, deadline - time.time())) + DEFER_TIMEOUT_PADDING
        self.defer(
            trigger=PodStateTrigger(
                kubernetes_conn_id=self.kubernetes_conn_id,
                namespace=namespace,
                pod_name=meta["name"],
                pod_uid=meta["uid"],
                identity=None,
                policy=self.failure_policy.to_payload(),
                history=None,
                relaunches=0,
                execution_deadline=deadline,
                poll_interval=self.poll_interval,
                owned=False,
            ),
            method_name="execute_complete",
            timeout=timeout,
        )

    def execute_complete(self, context: Context, event: Mapping[str, Any] | None = None) -> None:
        """Act on the verdict. A relaunch is not ours to do: the sensor reports it as a retry."""
        from airflow_k8s_retry.classification.model import Outcome
        from airflow_k8s_retry.compat import AirflowSkipException
        from airflow_k8s_retry.kube.errors import KubeError
        from airflow_k8s_retry.kube.pods import failure_report
        from airflow_k8s_retry.triggers import PodEvent

        if not event:
            raise PodFailure("the pod watch ended without a verdict")
        pod_event = PodEvent.from_payload(event)
        verdict = pod_event.verdict
        name, namespace, uid = pod_event.pod_name, pod_event.namespace, pod_event.pod_uid
        client, _ = self._client()
        try:
            if verdict.outcome is not Outcome.SUCCEED:
                body, events = None, []
                try:
                    body = client.read(namespace, name)
                    events = client.events(namespace, name, uid) if body else []
                except KubeError as exc:
                    self.log.warning("Could not read the evidence of pod %s: %s", name, exc)
                report = failure_report(verdict.to_payload(), pod=body, events=events, log_tail="")
                self.log.error("Pod %s: %s", name, report)
                context["ti"].xcom_push(key="verdict", value=verdict.summary())
            if self.delete_pod_on_finish:
                client.stamp_verdict(namespace, name, uid, verdict.to_payload())
                if client.delete(namespace, name, uid):
                    self.log.info("Deleted pod %s/%s (delete_pod_on_finish)", namespace, name)
        finally:
            client.close()
        message = f"pod {namespace}/{name}: {verdict.reason.value}: {verdict.message}"
        if verdict.outcome is Outcome.SUCCEED:
            self.log.info("Pod %s/%s succeeded", namespace, name)
            return
        if verdict.outcome is Outcome.SKIP:
            raise AirflowSkipException(message)
        if verdict.outcome is Outcome.FAIL:
            raise PodFailurePermanent(message, verdict)
        raise PodFailure(message, verdict)
