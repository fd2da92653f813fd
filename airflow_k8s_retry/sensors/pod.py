"""``PodCompletionSensor``: wait for a pod this task did not create, with the operator's classifier.

Another system (a controller, a CronJob, a Job, a different DAG) owns the pod; the sensor only
watches it. It is an Airflow sensor (``BaseSensorOperator``) that always defers: the wait happens in
the triggerer, through the shared watch, as a
:class:`~airflow_k8s_retry.triggers.PodTargetTrigger` following a
:class:`~airflow_k8s_retry.triggers.target.Target` (a pod by name, the newest pod of a label selector, or
a Job), so the pod may appear long after the sensor started. Airflow's sensor conventions hold:
``timeout`` ends in ``AirflowSensorTimeout`` without spending retries, ``soft_fail`` and
``never_fail`` turn a timeout or a failure into a skip. It deletes nothing unless
``delete_pod_on_finish`` asks for it. docs/sensor.md lists every argument.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseSensorOperator

from airflow_k8s_retry import connection
from airflow_k8s_retry.classification.model import Outcome
from airflow_k8s_retry.classification.policy import FailurePolicy, PolicyError
from airflow_k8s_retry.compat import AirflowSensorTimeout, AirflowSkipException
from airflow_k8s_retry.exceptions import PodFailure, PodSelectionError, exception_for
from airflow_k8s_retry.kube import pods
from airflow_k8s_retry.kube.errors import KubeError
from airflow_k8s_retry.kube.pods import CreatedPod, PodClient
from airflow_k8s_retry.kube.targets import TargetError, check_target
from airflow_k8s_retry.metrics import count_task_verdict
from airflow_k8s_retry.report import failure_report
from airflow_k8s_retry.retry_policy import ignore_retry_policy_before_3_3, install_retry_policy
from airflow_k8s_retry.triggers.pod import PodEvent, defer_timeout
from airflow_k8s_retry.triggers.target import PodTargetTrigger, Target, TargetEvent

if TYPE_CHECKING:
    from airflow.sdk import Context

#: Sensor arguments that mean nothing for a sensor that never pokes, with the reason it refuses them.
_REFUSED: dict[str, tuple[Any, str]] = {
    "exponential_backoff": (
        False,
        "the sensor does not poke: it follows the pod through a watch, so there is no interval to back off",
    ),
    "max_wait": (None, "the sensor does not poke, so there is no interval between pokes to cap"),
    "silent_fail": (
        False,
        "API errors are ridden out by the watch and a pod's failure is a verdict, not a poke error; "
        "use soft_fail to skip on failure",
    ),
    "deferrable": (True, "the sensor always defers to the triggerer"),
}
#: The sensor's ways to name its target: exactly one is given.
_TARGETS = ("pod_name", "label_selector", "job_name")


class PodCompletionSensor(BaseSensorOperator):  # type: ignore[misc]
    """Wait until a pod (or a Job's pods) finishes; failures are classified like the operator's.

    :param pod_name: name of the pod to wait for; it need not exist yet.
    :param label_selector: a label selector, e.g. ``"app=nightly-export,run=2024-06-01"``; the
        newest matching pod is followed (a newer one replaces it as soon as it appears).
    :param job_name: name of a ``batch/v1`` Job: its pods are followed and the Job's terminal
        condition is the verdict (short for a selector on the Job's pods).
    :param namespace: namespace of the pod; default: the connection's, else ``default``.
    :param kubernetes_conn_id: Airflow connection of type ``kubernetes``.
    :param failure_policy: a :class:`~airflow_k8s_retry.classification.policy.FailurePolicy`
        overriding graces and outcomes of the default rules.
    :param delete_pod_on_finish: delete the pod (by UID) once it has a verdict; off by default
        because the sensor did not create it.
    :param timeout: how long to wait in all (seconds or a ``timedelta``; default: Airflow's
        ``[sensors] default_timeout``, 7 days); then ``AirflowSensorTimeout``, and no retry.
    :param poke_interval: seconds between reads when RBAC forbids watching (the fallback polling);
        the watch itself delivers changes as they happen.
    :param soft_fail: skip the task instead of failing it, on a timeout or any failure.
    :param never_fail: the same for every error (Airflow: mutually exclusive with ``soft_fail``).
    :param mode: accepted for compatibility; the sensor always defers, which frees the worker slot
        as ``reschedule`` does.
    """

    template_fields: Sequence[str] = (
        "pod_name",
        "label_selector",
        "job_name",
        "namespace",
        "kubernetes_conn_id",
    )
    #: How backoff between API retries (of ``delete_pod_on_finish``) sleeps; tests replace it.
    retry_sleep: ClassVar[Callable[[float], None]] = staticmethod(time.sleep)

    def __init__(
        self,
        *,
        pod_name: str | None = None,
        label_selector: str | None = None,
        job_name: str | None = None,
        namespace: str | None = None,
        kubernetes_conn_id: str | None = connection.DEFAULT_CONN_ID,
        failure_policy: FailurePolicy | None = None,
        delete_pod_on_finish: bool = False,
        poke_interval: timedelta | float = 10.0,
        **kwargs: Any,
    ) -> None:
        task_id = kwargs.get("task_id", "?")
        for name, (allowed, reason) in _REFUSED.items():
            if name in kwargs and kwargs[name] != allowed:
                raise ValueError(
                    f"{task_id}: PodCompletionSensor does not take {name}={kwargs[name]!r}: {reason}"
                )
        kwargs.pop("deferrable", None)
        ignore_retry_policy_before_3_3(task_id, kwargs)
        super().__init__(poke_interval=poke_interval, **kwargs)
        chosen = {n: v for n, v in zip(_TARGETS, (pod_name, label_selector, job_name), strict=True) if v}
        if len(chosen) != 1:
            got = ", ".join(f"{n}={v!r}" for n, v in chosen.items()) or "none"
            raise ValueError(
                f"{self.task_id}: give exactly one of pod_name, label_selector and job_name (got {got})"
            )
        if self.poke_interval <= 0:
            raise ValueError(f"{self.task_id}: poke_interval must be a positive number of seconds")
        if failure_policy is not None and not isinstance(failure_policy, FailurePolicy):
            raise PolicyError(
                f"{self.task_id}: failure_policy must be a FailurePolicy, got {type(failure_policy).__name__}"
            )
        self.pod_name = pod_name
        self.label_selector = label_selector
        self.job_name = job_name
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.failure_policy = failure_policy or FailurePolicy()
        install_retry_policy(self, self.failure_policy)
        self.delete_pod_on_finish = delete_pod_on_finish

    # -- execute: check the target, then defer --------------------------------------------------

    def _client(self) -> tuple[PodClient, str]:
        return connection.pod_client(self.kubernetes_conn_id, self.namespace)

    def _target(self, namespace: str, now: float) -> Target:
        values = {name: getattr(self, name) for name in _TARGETS}
        rendered = {k: str(v).strip() if v else None for k, v in values.items()}
        given = [k for k, v in values.items() if v]
        if not rendered[given[0]]:
            raise PodSelectionError(f"{given[0]} rendered to an empty string; check its template")
        return Target(namespace=namespace, deadline=now + float(self.timeout), since=now, **rendered)

    def _check(self, client: PodClient, target: Target) -> None:
        """Bad input fails now, without retries; a transient API error only costs a warning."""
        try:
            check_target(
                client.api_client,
                target.namespace,
                pod_name=target.pod_name,
                label_selector=target.label_selector,
                job_name=target.job_name,
            )
        except TargetError as exc:
            raise PodSelectionError(f"{self.task_id}: {exc}") from None
        except KubeError as exc:
            self.log.warning("Could not check %s before waiting (%s); waiting anyway", target.describe(), exc)

    def execute(self, context: Context) -> Any:
        now = time.time()
        client, namespace = self._client()
        try:
            target = self._target(namespace, now)
            self._check(client, target)
        except PodSelectionError as exc:
            if self.soft_fail or self.never_fail:
                self.log.error("%s", exc)
                raise AirflowSkipException(f"Skipping: {exc}") from exc
            raise
        finally:
            client.close()
        execution_deadline = None
        if self.execution_timeout is not None:
            execution_deadline = now + self.execution_timeout.total_seconds()
        deadlines = [t for t in (target.deadline, execution_deadline) if t is not None]
        self.log.info("Waiting for %s", target.describe())
        self.defer(
            trigger=PodTargetTrigger(
                kubernetes_conn_id=self.kubernetes_conn_id,
                target=target.to_payload(),
                policy=self.failure_policy.to_payload(),
                execution_deadline=execution_deadline,
                poll_interval=self.poke_interval,
            ),
            method_name="execute_complete",
            timeout=defer_timeout(min(deadlines), now),
        )

    # -- execute_complete: act on the verdict ---------------------------------------------------

    def execute_complete(self, context: Context, event: Mapping[str, Any] | None = None) -> None:
        """Act on the verdict. A relaunch is not ours to do: the sensor reports it as a retry.

        Airflow's ``resume_execution`` turns what this raises into a skip under ``soft_fail`` or
        ``never_fail``.
        """
        if not event:
            raise PodFailure("the pod watch ended without a verdict")
        followed = TargetEvent.from_payload(event)
        if followed.timed_out:
            raise AirflowSensorTimeout(f"Sensor has timed out: {followed.message}")
        if followed.event is None:
            raise PodFailure(followed.message)
        self._finish(context, followed.event)

    def _finish(self, context: Context, pod_event: PodEvent) -> None:
        verdict = pod_event.verdict
        name, namespace = pod_event.pod_name, pod_event.namespace
        count_task_verdict(verdict, context, namespace)
        if name:
            context["ti"].xcom_push(key="pod_name", value=name)
            context["ti"].xcom_push(key="pod_namespace", value=namespace)
        if verdict.outcome is not Outcome.SUCCEED:
            context["ti"].xcom_push(key="verdict", value=verdict.summary())
        if name and (verdict.outcome is not Outcome.SUCCEED or self.delete_pod_on_finish):
            pod = CreatedPod(name, namespace, pod_event.pod_uid, adopted=True, body={})
            client, _ = self._client()
            try:
                if verdict.outcome is not Outcome.SUCCEED:
                    # The failure with its evidence: the pod's state, its Events and its last log lines.
                    body, events, tail = pods.evidence(
                        client, pod, pods.FIRST_CONTAINER, log=self.log.warning
                    )
                    report = failure_report(verdict, pod=body, events=events, log_tail=tail)
                    self.log.error("Pod %s: %s", name, report)
                if self.delete_pod_on_finish:
                    # Stamp the verdict and delete by UID through the operator's lifecycle (transient
                    # errors retried); an API error is logged, never raised: the verdict, not the
                    # cleanup, decides how the task ends.
                    sleep = type(self).retry_sleep
                    ending = pods.finish(client, pod, verdict, kept=False, log=self.log.warning, sleep=sleep)
                    if ending is pods.Ending.DELETED:
                        self.log.info("Deleted pod %s/%s (delete_pod_on_finish)", namespace, name)
            finally:
                client.close()
        label = f"pod {namespace}/{name}" if name else f"namespace {namespace}"
        message = f"{label}: {verdict.reason.value}: {verdict.message}"
        if verdict.outcome is Outcome.SUCCEED:
            self.log.info("%s", message)
            return
        if verdict.outcome is Outcome.SKIP:
            raise AirflowSkipException(message)
        raise exception_for(verdict, message)
