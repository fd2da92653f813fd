"""``RetryingPodOperator``: the cncf ``KubernetesPodOperator`` with one pod per try, classified
once, cleaned up, and retried by Airflow.

It *is* a ``KubernetesPodOperator`` (as ``GKEStartPodOperator`` and ``EksPodOperator`` are): the
provider builds the pod (templating, pod templates, ``Secret``s, the XCom sidecar, KPO's labels,
``pod_mutation_hook``) and reads container logs. This class changes only how the pod is launched,
watched, judged and cleaned up: ``execute`` creates (or adopts) the try's deterministically named
pod and defers to :class:`~airflow_k8s_retry.triggers.PodStateTrigger`; ``execute_complete`` turns
its one verdict into success, an Airflow retry, a permanent failure, a skip, or a relaunch in the
same try. The pod's lifecycle rules live in :mod:`airflow_k8s_retry.kube.lifecycle`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Container, Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

from airflow_k8s_retry.connection import DEFAULT_CONN_ID
from airflow_k8s_retry.exceptions import PodFailure, exception_for
from airflow_k8s_retry.hints import with_hint
from airflow_k8s_retry.kpo_arguments import failure_policy as failure_policy_from
from airflow_k8s_retry.kpo_arguments import local_config_errors, refusals
from airflow_k8s_retry.kube.naming import TI_ANNOTATION, TryIdentity
from airflow_k8s_retry.metrics import count_task_verdict

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_k8s_retry.classification.model import Verdict
    from airflow_k8s_retry.classification.policy import FailurePolicy
    from airflow_k8s_retry.kube.logstream import LogPosition
    from airflow_k8s_retry.kube.pods import CreatedPod, PodClient

DEFER_TIMEOUT_PADDING = timedelta(minutes=5)


class RetryingPodOperator(KubernetesPodOperator):  # type: ignore[misc]
    """Run a task in a Kubernetes pod; a failed pod costs exactly one Airflow try.

    Takes every argument of ``KubernetesPodOperator`` (cncf-kubernetes 10.25) with its meaning;
    a value that contradicts the design (``deferrable=False``, ``in_cluster=...``) is refused with
    a one-line error naming the alternative. ``name`` is the pod name's prefix; the name always
    ends in ``-<digest>-t<try>[-r<relaunch>]``. ``startup_timeout_seconds`` and
    ``schedule_timeout_seconds`` go into the failure policy (defaults 900 s and 600 s).

    :param failure_policy: a :class:`~airflow_k8s_retry.classification.policy.FailurePolicy`
        overriding graces and outcomes of the default rules.
    :param relaunch_budget: fresh pods a try may start after infrastructure took its pod away
        (default: the policy's, 3).
    :param keep_failed_pods: the same as ``on_finish_action="delete_succeeded_pod"``.
    :param poll_interval: seconds between the trigger's safety polls (default 10).
    """

    ui_color = "#d9e8fb"
    name: str | None  # KPO's attribute: here the pod name's prefix
    #: How backoff between API retries sleeps; tests replace it.
    retry_sleep: ClassVar[Callable[[float], None]] = staticmethod(time.sleep)

    def __init__(
        self,
        *,
        kubernetes_conn_id: str | None = DEFAULT_CONN_ID,
        failure_policy: FailurePolicy | None = None,
        relaunch_budget: int | None = None,
        keep_failed_pods: bool = False,
        poll_interval: float = 10.0,
        deferrable: bool = True,
        startup_timeout_seconds: float | None = None,
        schedule_timeout_seconds: float | None = None,
        skip_on_exit_code: int | Container[int] | None = None,
        on_finish_action: str = "delete_pod",
        in_cluster: bool | None = None,
        cluster_context: str | None = None,
        config_file: str | None = None,
        reattach_on_restart: bool | None = None,
        durable: bool | None = None,
        random_name_suffix: bool = True,
        logging_interval: int | None = None,
        trigger_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        task_id = kwargs.get("task_id", "?")
        problems = refusals(locals())
        if problems:
            raise ValueError(f"{task_id}: " + "; ".join(problems))
        if keep_failed_pods:
            on_finish_action = "delete_succeeded_pod"
        super().__init__(
            kubernetes_conn_id=kubernetes_conn_id,
            poll_interval=poll_interval,
            deferrable=True,
            startup_timeout_seconds=int(startup_timeout_seconds or 120),
            schedule_timeout_seconds=int(schedule_timeout_seconds) if schedule_timeout_seconds else None,
            skip_on_exit_code=skip_on_exit_code,
            on_finish_action=on_finish_action,
            logging_interval=logging_interval,
            **kwargs,
        )
        self.failure_policy = failure_policy_from(
            task_id,
            failure_policy,
            skip_on_exit_code=skip_on_exit_code,
            startup=startup_timeout_seconds,
            schedule=schedule_timeout_seconds,
            relaunch_budget=relaunch_budget,
        )
        self._pod: CreatedPod | None = None
        self._log_position: LogPosition | None = None  # where the trigger's log streaming stopped

    # -- building: the provider's pod, this package's name, labels and annotations --------------

    def build_try_pod(self, context: Context, relaunch: int = 0) -> dict[str, Any]:
        """The pod this try creates, as API JSON: ``build_pod_request_obj`` (the provider's), then
        the per-try name, this package's labels and the task instance annotation."""
        identity = self._identity(context)
        if getattr(self, "pod_request_obj", None) is None:
            with local_config_errors(self.task_id):
                if self.pod_template_file and not Path(self.pod_template_file).is_file():
                    raise ValueError(f"pod_template_file {self.pod_template_file!r} is not a file")
                # The provider logs the name it builds; let it be the try's first pod name.
                name: str | None = getattr(self, "name", None)
                suffix: bool = getattr(self, "random_name_suffix", True)
                self.name, self.random_name_suffix = identity.pod_name(0, prefix=name), False
                try:
                    # Airflow's context always has "dag"; the provider reads it (a stand-in may not).
                    full = context if "dag" in context else {**context, "dag": None}
                    self.pod_request_obj = self.build_pod_request_obj(full)
                finally:
                    self.name, self.random_name_suffix = name, suffix
        pod: dict[str, Any] = self.hook.api_client.sanitize_for_serialization(
            copy.deepcopy(self.pod_request_obj)
        )
        meta = pod.setdefault("metadata", {})
        meta["name"] = identity.pod_name(relaunch, prefix=self.name)
        meta.setdefault("labels", {}).update(identity.labels(relaunch))
        if identity.ti_id:
            meta.setdefault("annotations", {})[TI_ANNOTATION] = identity.ti_id
        return pod

    def _identity(self, context: Context) -> TryIdentity:
        from airflow.providers.common.compat.sdk import conf

        ti = context["ti"]
        return TryIdentity(
            dag_id=ti.dag_id,
            task_id=ti.task_id,
            run_id=ti.run_id,
            map_index=ti.map_index if ti.map_index is not None else -1,
            try_number=ti.try_number,
            ti_id=str(getattr(ti, "id", None) or ""),
            deployment=conf.get("kubernetes_retry", "deployment_id", fallback="") or "",
        )

    @cached_property
    def hook(self) -> Any:
        """The provider's ``KubernetesHook`` (see :func:`~airflow_k8s_retry.connection.kubernetes_hook`)."""
        from airflow_k8s_retry.connection import kubernetes_hook

        return kubernetes_hook(self.kubernetes_conn_id)

    def _client(self) -> PodClient:
        import os

        from airflow_k8s_retry.kube.pods import PodClient

        source = f"connection {self.kubernetes_conn_id!r}"
        if not self.kubernetes_conn_id:
            source = f"default kubeconfig, KUBECONFIG={os.environ.get('KUBECONFIG', '')!r}"
        with local_config_errors(self.task_id, source):
            return PodClient(self.hook.api_client)

    # -- running --------------------------------------------------------------------------------

    def execute(self, context: Context) -> Any:
        from airflow_k8s_retry.kube.lifecycle import sweep_earlier_tries

        client = self._client()
        pod = self.build_try_pod(context)
        self._callbacks("on_pod_manifest_created", context, pod_request=self.pod_request_obj)
        namespace = pod["metadata"]["namespace"]
        sweep_earlier_tries(
            client, self._identity(context), namespace, log=self.log.warning, sleep=type(self).retry_sleep
        )
        return self._launch(context, client, pod, relaunch=0)

    def _launch(
        self,
        context: Context,
        client: PodClient,
        pod: dict[str, Any],
        relaunch: int,
        *,
        deadline: float | None = None,
    ) -> Any:
        from airflow_k8s_retry.kube import lifecycle
        from airflow_k8s_retry.kube.errors import KubeError
        from airflow_k8s_retry.kube.pods import PodOfAnotherTry

        identity = self._identity(context)
        meta = pod["metadata"]
        try:
            created = lifecycle.create(client, pod, identity, relaunch=relaunch, sleep=type(self).retry_sleep)
        except PodOfAnotherTry as exc:
            raise PodFailure(str(exc)) from None
        except KubeError as exc:
            verdict = lifecycle.create_error_verdict(exc, meta["namespace"], meta["name"])
            self.log.error("%s: %s", verdict.reason.value, verdict.message)
            self._push_verdict(context, verdict)
            count_task_verdict(verdict, context, meta["namespace"])
            raise exception_for(verdict, f"{verdict.reason.value}: {verdict.message}") from None
        self._pod = created
        with self._delete_on_error(client, created):
            ti = context["ti"]
            ti.xcom_push(key="pod_name", value=created.name)
            ti.xcom_push(key="pod_namespace", value=created.namespace)
            self.log.info(
                "%s pod %s/%s (uid %s) for try %d%s",
                "Adopted" if created.adopted else "Created",
                created.namespace,
                created.name,
                created.uid,
                identity.try_number,
                f", relaunch {relaunch}" if relaunch else "",
            )
            self._callbacks("on_pod_creation", context, pod=self._v1pod(created))
            found = lifecycle.read_stamp(created.body) if created.adopted else None
            if found is None:
                return self._defer(context, identity, created, relaunch, deadline=deadline)
        # Finished business: a verdict was reached for this pod before; act on it, don't re-watch.
        self.log.info("Pod %s already carries verdict %s", created.name, found.verdict.reason.value)
        return self._finish(context, client, created, found.verdict, relaunch, deadline=deadline)

    @contextmanager
    def _delete_on_error(self, client: PodClient, created: CreatedPod) -> Iterator[None]:
        """Between create and defer, any error deletes the pod: no try leaves one behind."""
        from airflow_k8s_retry.compat import TaskDeferred

        try:
            yield
        except TaskDeferred:
            raise
        except BaseException:
            self._cleanup(client, created, keep=False)
            raise

    def _defer(
        self,
        context: Context,
        identity: TryIdentity,
        created: CreatedPod,
        relaunch: int,
        *,
        deadline: float | None = None,
    ) -> Any:
        from airflow_k8s_retry.triggers import PodStateTrigger

        # A relaunch keeps the try's deadline: execution_timeout counts from the try's start.
        deadline = deadline if deadline is not None else self._deadline(context)
        timeout = None
        if deadline is not None:
            timeout = timedelta(seconds=max(0.0, deadline - time.time())) + DEFER_TIMEOUT_PADDING
        self.defer(
            trigger=PodStateTrigger(
                kubernetes_conn_id=self.kubernetes_conn_id,
                namespace=created.namespace,
                pod_name=created.name,
                pod_uid=created.uid,
                identity=identity.to_payload(),
                policy=self.failure_policy.to_payload(),
                history=None,
                relaunches=relaunch,
                execution_deadline=deadline,
                poll_interval=self.poll_interval,
                owned=self.on_kill_action.value != "keep_pod",
                logging_interval=self.logging_interval if self.get_logs else None,
                base_container_name=self.base_container_name,
            ),
            method_name="execute_complete",
            kwargs={"execution_deadline": deadline},
            timeout=timeout,
        )

    def _deadline(self, context: Context) -> float | None:
        if self.execution_timeout is None:
            return None
        start = getattr(context["ti"], "start_date", None)
        began = float(start.timestamp()) if start is not None else time.time()
        return began + float(self.execution_timeout.total_seconds())

    def execute_complete(
        self,
        context: Context,
        event: Mapping[str, Any] | None = None,
        execution_deadline: float | None = None,
    ) -> Any:
        """Act on the trigger's verdict: success, retry, fail, skip, or relaunch in the same try."""
        from airflow_k8s_retry.kube.pods import CreatedPod
        from airflow_k8s_retry.triggers import PodEvent

        if not event:
            raise PodFailure("the pod watch ended without a verdict; the try is failed so Airflow retries it")
        pod_event = PodEvent.from_payload(event)
        self._log_position = pod_event.log_position
        created = CreatedPod(
            pod_event.pod_name, pod_event.namespace, pod_event.pod_uid, adopted=True, body={}
        )
        self._pod = created
        self._callbacks("on_operator_resuming", context, pod=self._v1pod(created), event=dict(event))
        return self._finish(
            context,
            self._client(),
            created,
            pod_event.verdict,
            pod_event.relaunches,
            deadline=execution_deadline,
        )

    def _finish(
        self,
        context: Context,
        client: PodClient,
        pod: CreatedPod,
        verdict: Verdict,
        relaunch: int,
        *,
        deadline: float | None = None,
    ) -> Any:
        from airflow_k8s_retry.classification.model import Outcome
        from airflow_k8s_retry.kube import lifecycle
        from airflow_k8s_retry.kube.pods import failure_report

        count_task_verdict(verdict, context, pod.namespace)
        outcome = verdict.outcome
        if outcome is Outcome.RELAUNCH:
            self.log.warning(
                "%s: %s; pod %s is replaced by a fresh pod in the same try (relaunch %d)",
                verdict.reason.value,
                verdict.message,
                pod.name,
                relaunch + 1,
            )
            lifecycle.stamp(client, pod, verdict, kept=False, log=self.log.warning)
            self._cleanup(client, pod, keep=False)
            return self._launch(
                context, client, self.build_try_pod(context, relaunch + 1), relaunch + 1, deadline=deadline
            )
        keep = lifecycle.keeps(client, pod, self.on_finish_action.value, verdict)
        result = None
        published = verdict  # what reaches XCom, the stamp and the exception
        try:
            if outcome is Outcome.SUCCEED:
                if self.get_logs:
                    self._write_logs_of(pod)
                if self.do_xcom_push:
                    result = client.read_xcom(pod.namespace, pod.name)
            else:
                body, events, tail = lifecycle.evidence(
                    client, pod, self.base_container_name if self.get_logs else None, log=self.log.warning
                )
                # A termination message can be a log tail (FallbackToLogsOnError): only the task
                # log may show it, and only with get_logs=True.
                published = lifecycle.withhold_termination_messages(verdict, body)
                report = failure_report(
                    (verdict if self.get_logs else published).to_payload(),
                    pod=body,
                    events=events,
                    log_tail=tail,
                )
                report = with_hint(report, verdict)
                self._push_verdict(context, published)
                if outcome is Outcome.SKIP:
                    self.log.info("%s\n(pod %s)", report, pod.name)
                else:
                    self.log.error("Pod %s: %s", pod.name, report)
                if self.get_logs:
                    self._write_logs_of(pod)
                if self.do_xcom_push:  # as KPO: a result written before the failure is still pushed
                    self._push_partial_result(context, client, pod)
            self._callbacks("on_pod_completion", context, pod=self._v1pod(pod))
            self._callbacks("on_pod_teardown", context, pod=self._v1pod(pod))
        finally:
            # Whatever failed above (logs, XCom), the pod is finished business: stamp, then delete.
            lifecycle.stamp(client, pod, published, kept=keep, log=self.log.warning)
            self._cleanup(client, pod, keep=keep)
            self._callbacks("on_pod_cleanup", context, pod=self._v1pod(pod))
        if outcome is Outcome.SUCCEED:
            self.log.info("%s: pod %s succeeded", verdict.reason.value, pod.name)
            return result
        raise exception_for(
            published, f"pod {pod.namespace}/{pod.name}: {published.reason.value}: {published.message}"
        )

    def _write_logs_of(self, pod: CreatedPod) -> None:
        """The whole log of ``container_logs`` (the base container by default), through the
        provider's log reader, with its prefix and ``log_formatter``."""
        v1pod = self._v1pod(pod)
        try:
            if self.init_container_logs:
                self.pod_manager.fetch_requested_init_container_logs(
                    pod=v1pod,
                    init_containers=self.init_container_logs,
                    follow_logs=False,
                    container_name_log_prefix_enabled=self.container_name_log_prefix_enabled,
                    log_formatter=self.log_formatter,
                )
            containers = self.container_logs
            if self._log_position is not None:  # the trigger streamed the base container's head
                from airflow_k8s_retry.kube.logstream import write_after

                containers = write_after(self, v1pod, containers, self._log_position)
            if containers:
                self.pod_manager.fetch_requested_container_logs(
                    pod=v1pod,
                    containers=containers,
                    follow_logs=False,
                    container_name_log_prefix_enabled=self.container_name_log_prefix_enabled,
                    log_formatter=self.log_formatter,
                )
        except Exception as exc:  # the provider's reader raises client errors; a log is not a verdict
            self.log.warning("Could not read the logs of pod %s: %s", pod.name, type(exc).__name__)

    def _cleanup(self, client: PodClient, pod: CreatedPod, *, keep: bool, grace: int | None = None) -> None:
        """Delete the pod by UID unless kept; transient errors are retried with backoff. If the
        delete still fails, the stamp says "not kept" and the next try's sweep deletes it."""
        from airflow_k8s_retry.kube import lifecycle
        from airflow_k8s_retry.kube.errors import KubeError

        if keep:
            self.log.info(
                "Keeping pod %s/%s (on_finish_action=%s)",
                pod.namespace,
                pod.name,
                self.on_finish_action.value,
            )
            return
        try:
            if lifecycle.delete(
                client,
                pod.namespace,
                pod.name,
                pod.uid,
                grace_period_seconds=grace,
                sleep=type(self).retry_sleep,
            ):
                self.log.info("Deleted pod %s/%s (uid %s)", pod.namespace, pod.name, pod.uid)
        except KubeError as exc:
            self.log.error(
                "Could not delete pod %s/%s (uid %s): %s; the next try deletes it",
                pod.namespace,
                pod.name,
                pod.uid,
                exc,
            )
            return
        self._pod = None

    def _push_partial_result(self, context: Context, client: PodClient, pod: CreatedPod) -> None:
        try:
            value = client.read_xcom(pod.namespace, pod.name)
            if value is not None:
                context["ti"].xcom_push(key="return_value", value=value)
        except Exception as exc:  # the failure is the verdict's; a missing result is not news
            self.log.info("No XCom result from failed pod %s (%s)", pod.name, type(exc).__name__)

    def _push_verdict(self, context: Context, verdict: Verdict) -> None:
        try:
            context["ti"].xcom_push(key="verdict", value=verdict.summary())
        except Exception as exc:  # publishing the verdict must never skip the cleanup
            self.log.warning("Could not push the verdict to XCom: %s", type(exc).__name__)

    def _v1pod(self, pod: CreatedPod) -> Any:
        return pod.as_v1pod()

    def _callbacks(self, hook: str, context: Context, **kwargs: Any) -> None:
        if not self.callbacks:
            return
        from airflow.providers.cncf.kubernetes.callbacks import ExecutionMode

        for callback in self.callbacks:
            getattr(callback, hook)(
                client=self.client, mode=ExecutionMode.ASYNC, context=context, operator=self, **kwargs
            )

    # -- endings that are not verdicts ----------------------------------------------------------

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """Also clean up when the deferral itself ends badly (timeout or trigger failure)."""
        from airflow_k8s_retry.compat import TaskDeferralError, TaskDeferralTimeout

        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except (TaskDeferralTimeout, TaskDeferralError):
            self._delete_try_pods(context)
            raise

    def _delete_try_pods(self, context: Context) -> None:
        """Delete every pod of this try (any relaunch): the deferral timed out or failed."""
        from airflow_k8s_retry.kube import lifecycle

        namespace = self.build_try_pod(context)["metadata"]["namespace"]
        lifecycle.delete_try_pods(
            self._client(),
            self._identity(context),
            namespace,
            log=self.log.info,
            sleep=type(self).retry_sleep,
        )

    def on_kill(self) -> None:
        """The task was killed in the worker: delete the pod (``on_kill_action`` may keep it),
        with ``termination_grace_period`` as the delete's grace."""
        pod = self._pod
        if pod is None:
            return
        if self.on_kill_action.value == "keep_pod":
            self.log.info("Keeping pod %s on kill (on_kill_action=keep_pod)", pod.name)
            return
        self._cleanup(self._client(), pod, keep=False, grace=self.termination_grace_period)
