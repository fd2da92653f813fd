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

import time
import warnings
from collections.abc import Callable, Container, Iterator, Mapping
from contextlib import contextmanager
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

from airflow_k8s_retry.connection import DEFAULT_CONN_ID
from airflow_k8s_retry.exceptions import PodFailure, exception_for
from airflow_k8s_retry.kube.naming import TryIdentity
from airflow_k8s_retry.metrics import count_task_verdict
from airflow_k8s_retry.operators import endings, try_pod
from airflow_k8s_retry.operators.arguments import failure_policy as failure_policy_from
from airflow_k8s_retry.operators.arguments import ignored, local_config_errors, refusals
from airflow_k8s_retry.operators.lost_try import with_lost_try_cleanup
from airflow_k8s_retry.retry_policy import ignore_retry_policy_before_3_3, install_retry_policy

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_k8s_retry.classification.model import Verdict
    from airflow_k8s_retry.classification.policy import FailurePolicy
    from airflow_k8s_retry.kube.logstream import LogPosition
    from airflow_k8s_retry.kube.pods import CreatedPod, PodClient
    from airflow_k8s_retry.memory_growth import MemoryGrowth


#: Seconds between copies of the base container's new log lines into the task log, by default.
LIVE_LOG_INTERVAL = 30


class RetryingPodOperator(KubernetesPodOperator):  # type: ignore[misc]
    """Run a task in a Kubernetes pod; a failed pod costs exactly one Airflow try.

    Takes every argument of ``KubernetesPodOperator`` (cncf-kubernetes 10.25) with its meaning:
    ``in_cluster``, ``config_file`` and ``cluster_context`` select the cluster on top of the
    connection; ``deferrable=False`` follows the pod from the worker (no triggerer needed);
    ``reattach_on_restart=False``, ``durable=False``, ``random_name_suffix=False`` and
    ``trigger_kwargs`` are accepted with one warning saying what happens instead. ``name`` is the
    pod name's prefix; the name always ends in ``-<digest>-t<try>[-r<relaunch>]``.
    ``startup_timeout_seconds`` and ``schedule_timeout_seconds`` go into the failure policy
    (defaults 900 s and 600 s).

    :param failure_policy: a :class:`~airflow_k8s_retry.classification.FailurePolicy` overriding
        graces and outcomes of the default rules, and budgeting relaunches
        (``FailurePolicy(relaunch_budget=...)``: fresh pods a try may start after the cluster took
        its pod away, default 3).
    :param poll_interval: seconds between the trigger's safety polls (default 10).
    :param logging_interval: with ``get_logs=True``, the base container's new log lines reach the
        task log every ``logging_interval`` seconds while the pod runs, each line once. The default
        is 30 here, where ``KubernetesPodOperator``'s is ``None``; ``None`` writes the whole log
        only when the pod ends.
    :param on_finish_action: ``KubernetesPodOperator``'s: ``"delete_succeeded_pod"`` keeps failed
        pods (stamped with their verdict, so they are never judged again).
    :param memory_growth: a :class:`~airflow_k8s_retry.memory_growth.MemoryGrowth`: after a try's
        ``container.oom`` verdict, the next try asks for more memory for that container, capped by
        its ``maximum`` and by what the namespace and the nodes allow (the task fails at once when
        the caps leave no room); with ``remember=True`` later runs start from the size that
        succeeded. Off by default.
    :param retry_policy: (Airflow 3.3+) Airflow's ``retry_policy``: consulted first when a try
        fails, then :class:`~airflow_k8s_retry.retry_policy.PodFailureRetryPolicy`'s defaults (the
        only policy when none is given), which set the delay per cause and record each try's reason
        code as Airflow's ``retry_reason``.
    """

    ui_color = "#d9e8fb"
    name: str | None  # KPO's attribute: here the pod name's prefix
    #: How backoff between API retries sleeps; tests replace it.
    retry_sleep: ClassVar[Callable[[float], None]] = staticmethod(time.sleep)
    #: Marks this class (and subclasses) for ``lost_try``'s failure callback (``lost_try.TRY_OWNER``).
    _runs_tries_in_pods: ClassVar[bool] = True

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
        live_logs: bool = True,
        memory_growth: MemoryGrowth | None = None,
        **kwargs: Any,
    ) -> None:
        task_id = kwargs.get("task_id", "?")
        ignore_retry_policy_before_3_3(task_id, kwargs)
        problems = refusals(locals())
        if problems:
            raise ValueError(f"{task_id}: " + "; ".join(problems))
        for message in ignored(locals()):
            warnings.warn(f"{task_id}: {message}", UserWarning, stacklevel=2)
        if keep_failed_pods:
            on_finish_action = "delete_succeeded_pod"
        super().__init__(
            kubernetes_conn_id=kubernetes_conn_id,
            poll_interval=poll_interval,
            deferrable=bool(deferrable),
            startup_timeout_seconds=int(startup_timeout_seconds or 120),
            schedule_timeout_seconds=int(schedule_timeout_seconds) if schedule_timeout_seconds else None,
            skip_on_exit_code=skip_on_exit_code,
            on_finish_action=on_finish_action,
            logging_interval=logging_interval,
            # KPO's own meaning (and warnings, such as reattach_on_restart's deprecation)
            in_cluster=in_cluster,
            cluster_context=cluster_context,
            config_file=config_file,
            reattach_on_restart=reattach_on_restart,
            durable=durable,
            random_name_suffix=random_name_suffix,
            trigger_kwargs=trigger_kwargs,
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
        install_retry_policy(self, self.failure_policy)
        self.live_logs = bool(live_logs)
        self.memory_growth = memory_growth
        self._kill_requested = False  # on_kill ran (Airflow lets the interrupted code go on)
        # This process ran the try's code: False where the failure callback runs for a dead worker.
        self._ran_here = False
        self._try_held: tuple[TryIdentity, str] | None = None  # the try and namespace execute works in
        self._pod: CreatedPod | None = None
        self._log_position: LogPosition | None = None  # where the trigger's log streaming stopped
        self._seen: Mapping[str, Any] | None = None  # what the trigger judged the pod on
        # Runs where the worker cannot: in the DAG processor after a heartbeat timeout (a dead worker).
        self.on_failure_callback = with_lost_try_cleanup(getattr(self, "on_failure_callback", None))

    @property
    def streaming_interval(self) -> float | None:
        """Seconds between copies of the base container's new lines into the task log while the
        pod runs, or ``None``: ``logging_interval`` when set, else :data:`LIVE_LOG_INTERVAL` with
        ``live_logs``; never without ``get_logs``."""
        if not self.get_logs:
            return None
        if self.logging_interval is not None:
            return float(self.logging_interval)
        return float(LIVE_LOG_INTERVAL) if self.live_logs else None

    @classmethod
    def partial(cls, **kwargs: Any) -> Any:
        """``.partial(...).expand(...)``: the mapped task carries the dead-worker cleanup too (the
        DAG processor runs a mapped task's callbacks from its partial arguments, not ``__init__``)."""
        partial = super().partial(**kwargs)
        callbacks = partial.kwargs.get("on_failure_callback")
        partial.kwargs["on_failure_callback"] = with_lost_try_cleanup(callbacks)
        return partial

    # -- building: the provider's pod, this package's name, labels and annotations --------------

    def build_try_pod(self, context: Context, relaunch: int = 0) -> dict[str, Any]:
        """The pod this try creates, as API JSON (see :func:`.try_pod.build_try_pod`)."""
        return try_pod.build_try_pod(self, context, relaunch)

    @cached_property
    def hook(self) -> Any:
        """The provider's ``KubernetesHook`` (see :func:`~airflow_k8s_retry.connection.kubernetes_hook`)."""
        from airflow_k8s_retry.connection import kubernetes_hook

        return kubernetes_hook(self.kubernetes_conn_id, try_pod.cluster_of(self))

    def _client(self) -> PodClient:
        return try_pod.pod_client(self)

    # -- running --------------------------------------------------------------------------------

    def execute(self, context: Context) -> Any:
        from airflow_k8s_retry.kube.lifecycle import sweep_earlier_tries

        self._ran_here = True
        with local_config_errors(self.task_id, "name"):
            self._set_name(self.name)  # KPO's check of the rendered name: [A-Za-z0-9._-], 220 at most
        client = self._client()
        pod = self.build_try_pod(context)
        endings.run_callbacks(self, "on_pod_manifest_created", context, pod_request=self.pod_request_obj)
        namespace = pod["metadata"]["namespace"]
        identity, sleep = try_pod.identity_of(context), type(self).retry_sleep
        # From here a kill deletes the try's pods by label, even before this code holds one.
        self._try_held = (identity, namespace)
        sweep_earlier_tries(client, identity, namespace, log=self.log.warning, sleep=sleep)
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
        from airflow_k8s_retry.kube.stamps import read_stamp

        identity = try_pod.identity_of(context)
        meta = pod["metadata"]
        if self._kill_requested:
            raise PodFailure(f"the task was killed before pod {meta['name']} was created; none is created")
        # While the create is on its way no pod is held: a kill deletes the try's pods by label. (A
        # resumed worker relaunching had not named its try, so a kill there deleted nothing.)
        self._pod, self._try_held = None, (identity, meta["namespace"])
        try:
            created = lifecycle.create(client, pod, identity, relaunch=relaunch, sleep=type(self).retry_sleep)
        except PodOfAnotherTry as exc:
            raise PodFailure(str(exc)) from None
        except KubeError as exc:
            raise endings.create_failed(self, context, exc, meta["namespace"], meta["name"]) from None
        self._pod = created
        if self._kill_requested:
            # Airflow's SIGTERM handler calls on_kill and lets this code go on: a kill that came
            # while the create was on its way found no pod to delete, so this deletes it.
            if self.on_kill_action.value != "keep_pod":
                self._end(client, created, None, keep=False, grace=self.termination_grace_period)
            raise PodFailure(f"the task was killed while pod {created.name} was being created")
        with self._delete_on_error(client, created):
            context["ti"].xcom_push(key="pod_name", value=created.name)
            context["ti"].xcom_push(key="pod_namespace", value=created.namespace)
            how, again = (
                "Adopted" if created.adopted else "Created",
                f", relaunch {relaunch}" if relaunch else "",
            )
            where = f"{created.namespace}/{created.name} (uid {created.uid})"
            self.log.info("%s pod %s for try %d%s", how, where, identity.try_number, again)
            endings.run_callbacks(self, "on_pod_creation", context, pod=endings.as_v1pod(created))
            found = read_stamp(created.body) if created.adopted else None
            if found is None:
                if deadline is None:
                    deadline = try_pod.deadline_of(context, self.execution_timeout)
                event = self._defer(context, identity, created, relaunch, deadline=deadline)
        if found is None:  # deferrable=False: the worker followed the pod itself to its verdict
            return self.execute_complete(context, event, execution_deadline=deadline)
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
            self._end(client, created, None, keep=False)
            raise

    def _defer(
        self,
        context: Context,
        identity: TryIdentity,
        created: CreatedPod,
        relaunch: int,
        *,
        deadline: float | None,
    ) -> Mapping[str, Any] | None:
        """Defer to the trigger (raises ``TaskDeferred``); with ``deferrable=False``, follow the pod
        here instead and return the trigger's event. A relaunch keeps the try's ``deadline``:
        ``execution_timeout`` counts from the try's start."""
        trigger = try_pod.trigger_for(self, identity, created, relaunch, deadline)
        if not self.deferrable:  # no triggerer needed: the worker follows the pod itself
            return try_pod.follow_here(self, trigger)
        kwargs = {"execution_deadline": deadline}
        timeout = try_pod.defer_timeout(deadline)
        self.defer(trigger=trigger, method_name="execute_complete", kwargs=kwargs, timeout=timeout)
        return None  # not reached: defer raises

    def execute_complete(
        self,
        context: Context,
        event: Mapping[str, Any] | None = None,
        execution_deadline: float | None = None,
    ) -> Any:
        """Act on the trigger's verdict: success, retry, fail, skip, or relaunch in the same try."""
        from airflow_k8s_retry.kube.pods import CreatedPod
        from airflow_k8s_retry.triggers.pod import PodEvent

        self._ran_here = True
        if not event:
            raise PodFailure("the pod watch ended without a verdict; the try is failed so Airflow retries it")
        pod_event = PodEvent.from_payload(event)
        self._log_position = pod_event.log_position
        self._seen = pod_event.seen
        created = CreatedPod(
            pod_event.pod_name, pod_event.namespace, pod_event.pod_uid, adopted=True, body={}
        )
        self._pod = created
        v1pod = endings.as_v1pod(created)
        endings.run_callbacks(self, "on_operator_resuming", context, pod=v1pod, event=dict(event))
        client = self._client()
        return self._finish(
            context, client, created, pod_event.verdict, pod_event.relaunches, deadline=execution_deadline
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
        from airflow_k8s_retry.classification.model import Outcome, Reason
        from airflow_k8s_retry.kube import lifecycle

        count_task_verdict(verdict, context, pod.namespace)
        if verdict.outcome is Outcome.RELAUNCH:
            what = f"{verdict.reason.value}: {verdict.message}"
            self.log.warning(
                "%s; pod %s is replaced by a fresh pod in the same try (relaunch %d)",
                what,
                pod.name,
                relaunch + 1,
            )
            self._end(client, pod, verdict, keep=False)
            fresh = self.build_try_pod(context, relaunch + 1)
            return self._launch(context, client, fresh, relaunch + 1, deadline=deadline)
        keep = lifecycle.keeps(client, pod, self.on_finish_action.value, verdict)
        if verdict.reason is Reason.EXECUTION_TIMEOUT and self.on_kill_action.value != "keep_pod":
            keep = False  # as KPO: a timed-out task is killed and on_kill_action decides; a kept
            # pod would go on running beside the next try
        if self.memory_growth is not None and verdict.outcome is Outcome.RETRY:
            verdict = try_pod.grow_after(self, context, client, pod, verdict)
        result, published = None, verdict  # what reaches XCom, the stamp and the exception
        v1pod = endings.as_v1pod(pod)
        try:
            if verdict.outcome is Outcome.SUCCEED:
                result = endings.succeeded(self, client, pod)
                if self.memory_growth is not None:
                    try_pod.sized_success(self, context, client, pod)
            else:
                published = endings.failed(self, context, client, pod, verdict)
            endings.run_callbacks(self, "on_pod_completion", context, pod=v1pod)
            endings.run_callbacks(self, "on_pod_teardown", context, pod=v1pod)
        finally:
            # Whatever failed above (logs, XCom), the pod is finished business: delete or keep it,
            # and whatever earlier relaunches of the try left.
            self._end(client, pod, published, keep=keep)
            if relaunch:
                lifecycle.delete_earlier_relaunches(
                    client,
                    try_pod.identity_of(context),
                    pod.namespace,
                    relaunch,
                    log=self.log.warning,
                    sleep=type(self).retry_sleep,
                )
            endings.run_callbacks(self, "on_pod_cleanup", context, pod=v1pod)
        if verdict.outcome is Outcome.SUCCEED:
            self.log.info("%s: pod %s succeeded", verdict.reason.value, pod.name)
            return result
        text = f"pod {pod.namespace}/{pod.name}: {published.reason.value}: {published.message}"
        raise exception_for(published, text)

    def _end(
        self, client: PodClient, pod: CreatedPod, verdict: Verdict | None, *, keep: bool, grace: Any = None
    ) -> None:
        """Delete the pod by UID, or keep it stamped (``lifecycle.finish``); never raises."""
        from airflow_k8s_retry.kube.lifecycle import Ending, finish

        sleep, where = type(self).retry_sleep, f"{pod.namespace}/{pod.name}"
        ending = finish(
            client, pod, verdict, kept=keep, log=self.log.error, sleep=sleep, grace_period_seconds=grace
        )
        if ending is Ending.KEPT:
            self.log.info("Keeping pod %s (on_finish_action=%s)", where, self.on_finish_action.value)
        elif ending is Ending.DELETED:
            self.log.info("Deleted pod %s (uid %s)", where, pod.uid)
        if ending is not Ending.LEFT:
            self._pod = None

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
        identity, sleep = try_pod.identity_of(context), type(self).retry_sleep
        lifecycle.delete_try_pods(self._client(), identity, namespace, log=self.log.info, sleep=sleep)

    def on_kill(self) -> None:
        """The task was killed in the worker: delete the pod (``on_kill_action`` may keep it),
        with ``termination_grace_period`` as the delete's grace. Killed before the operator holds
        its pod (the sweep, the create), it deletes the try's pods by label, and ``_launch``
        deletes a pod whose create was on its way."""
        self._kill_requested = True
        pod = self._pod
        if self.on_kill_action.value == "keep_pod":
            if pod is not None:
                self.log.info("Keeping pod %s on kill (on_kill_action=keep_pod)", pod.name)
            return
        if pod is not None:
            self._end(self._client(), pod, None, keep=False, grace=self.termination_grace_period)
            return
        held = getattr(self, "_try_held", None)
        if held is not None:  # killed during the sweep or the create: the pod may exist already
            from airflow_k8s_retry.kube import lifecycle

            identity, namespace = held
            sleep = type(self).retry_sleep
            lifecycle.delete_try_pods(self._client(), identity, namespace, log=self.log.info, sleep=sleep)
