"""``RetryingPodOperator``: the cncf ``KubernetesPodOperator`` with one pod per try, classified
once, cleaned up, and retried by Airflow.

It *is* a ``KubernetesPodOperator`` (as ``GKEStartPodOperator`` and ``EksPodOperator`` are): the
provider builds the pod (templating, pod templates, ``Secret``s, the XCom sidecar, KPO's labels,
``pod_mutation_hook``) and reads container logs. This class changes only how the pod is launched,
watched, judged and cleaned up. A try's life in the worker reads top to bottom here:

1. **build** the try's pod: the provider's pod under this package's per-try name, labels and
   annotations (:meth:`RetryingPodOperator.build_try_pod`), sized by ``memory_growth`` when set;
2. **create or adopt** it (:func:`~airflow_k8s_retry.kube.pods.create`), after a retry has
   swept what earlier tries left (:func:`~airflow_k8s_retry.kills.sweep.sweep_earlier_tries`);
3. **defer** to :class:`~airflow_k8s_retry.triggers.PodStateTrigger` (or, with
   ``deferrable=False``, follow the pod here with the same trigger);
4. **resume** in ``execute_complete`` with the trigger's one verdict
   (:class:`~airflow_k8s_retry.triggers.pod.PodEvent`);
5. **judge and report**: a relaunch starts a fresh pod in the same try; a success writes logs and
   the XCom result; a failure writes its report (:mod:`airflow_k8s_retry.report`), the logs and any
   partial result;
6. **clean up**: stamp the verdict and delete the pod by UID (or keep it, as ``on_finish_action``
   says; :func:`~airflow_k8s_retry.kube.pods.finish`);
7. **raise** the verdict's exception (:func:`~airflow_k8s_retry.exceptions.exception_for`):
   Airflow's retries take it from there.

A kill (``on_kill``), a deferral that ends badly (``resume_execution``) and a worker that dies (the
failure callback) are :mod:`airflow_k8s_retry.kills`' table.
"""

from __future__ import annotations

import asyncio
import copy
import os
import time
import warnings
from collections.abc import Callable, Container, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from airflow.providers.cncf.kubernetes.callbacks import ExecutionMode
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.providers.cncf.kubernetes.utils.pod_manager import PodManager

from airflow_k8s_retry import connection, memory_growth
from airflow_k8s_retry.classification.model import Outcome, Reason, Verdict
from airflow_k8s_retry.classification.observation import BASE_CONTAINER_ANNOTATION
from airflow_k8s_retry.compat import TaskDeferralError, TaskDeferralTimeout, TaskDeferred
from airflow_k8s_retry.exceptions import PodFailure, PodFailurePermanent, exception_for
from airflow_k8s_retry.kills.callback import with_lost_try_cleanup
from airflow_k8s_retry.kills.sweep import delete_earlier_relaunches, delete_try_pods, sweep_earlier_tries
from airflow_k8s_retry.kube import pods
from airflow_k8s_retry.kube.errors import KubeError
from airflow_k8s_retry.kube.naming import ON_KILL_ANNOTATION, TI_ANNOTATION, TryIdentity, read_stamp
from airflow_k8s_retry.kube.pods import CreatedPod, PodClient, PodOfAnotherTry, v1pod_from
from airflow_k8s_retry.metrics import count_task_verdict
from airflow_k8s_retry.operators.arguments import failure_policy as failure_policy_from
from airflow_k8s_retry.operators.arguments import ignored, refusals
from airflow_k8s_retry.report import Snapshot, failure_report, log_line
from airflow_k8s_retry.retry_policy import ignore_retry_policy_before_3_3, install_retry_policy
from airflow_k8s_retry.triggers.pod import (
    LogPosition,
    PodEvent,
    PodStateTrigger,
    defer_timeout,
    new_lines,
    since_seconds,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_k8s_retry.classification.policy import FailurePolicy
    from airflow_k8s_retry.memory_growth import MemoryGrowth

#: Seconds between copies of the base container's new log lines into the task log while the pod
#: runs (``logging_interval``'s default here; KPO's is ``None``).
LIVE_LOG_INTERVAL = 30

Json = dict[str, Any]


class SizedTry(NamedTuple):
    """What ``memory_growth`` gave one try: its number, what it runs with and why (``None``: as
    written), and each container's resources as sized."""

    try_number: int
    note: str | None
    resources: dict[str, Any]


@contextmanager
def local_config_errors(task_id: str, what: str | Callable[[], str] = "") -> Iterator[None]:
    """Errors of local configuration (templates, connections, kubeconfig) fail the task at once:
    no retry can fix them. One line, naming what is wrong (``what``, or what it returns)."""
    try:
        yield
    except (PodFailure, PodFailurePermanent, KubeError):
        raise
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        where = what() if callable(what) else what
        where = f" ({where})" if where else ""
        raise PodFailurePermanent(
            f"{task_id}: configuration error{where}: {type(exc).__name__}: {first}"
        ) from None


def deadline_of(context: Context, execution_timeout: timedelta | None) -> float | None:
    """When the try's ``execution_timeout`` runs out (epoch seconds), counted from the try's start."""
    if execution_timeout is None:
        return None
    start = getattr(context["ti"], "start_date", None)
    began = float(start.timestamp()) if start is not None else time.time()
    return began + float(execution_timeout.total_seconds())


class FinishedPodManager(PodManager):  # type: ignore[misc]
    """The provider's ``PodManager``, whose reads of the pod are answered, while :meth:`answering`,
    by the pod the trigger carried in its event once it was finished.

    The provider's log reader reads the pod around each log it writes (its containers' names,
    whether the stream ended because the container did); for a pod whose containers have all
    stopped, the pod the trigger judged says the same, so a failed try's log costs one request,
    the log itself.
    """

    finished: Any = None

    def read_pod(self, pod: Any) -> Any:
        return self.finished if self.finished is not None else super().read_pod(pod)

    @contextmanager
    def answering(self, finished: Any) -> Iterator[None]:
        """Answer the reads of the pod with ``finished`` (a ``V1Pod``) while in the block."""
        self.finished = finished
        try:
            yield
        finally:
            self.finished = None


def _finished(body: Json | None) -> Any:
    """``body`` (the pod as the trigger judged it) as a ``V1Pod`` when none of its containers runs,
    what the provider's reads of the pod would find; otherwise (or when the client's models refuse
    it) ``None``: the reader reads the pod itself."""
    if body is None or not (body.get("spec") or {}).get("containers"):
        return None
    status = body.get("status") or {}
    statuses = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    if any((cs.get("state") or {}).get("running") for cs in statuses):
        return None
    try:
        return v1pod_from(body)
    except Exception:  # a status the client's models refuse
        return None


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
    random_name_suffix: bool  # KPO's attribute: always False while the provider builds the pod
    #: How backoff between API retries sleeps; tests replace it.
    retry_sleep: ClassVar[Callable[[float], None]] = staticmethod(time.sleep)
    #: Marks this class (and subclasses) for the failure callback that deletes what a dead worker's
    #: try left (:data:`airflow_k8s_retry.kills.callback.TRY_OWNER`).
    runs_tries_in_pods: ClassVar[bool] = True

    def __init__(
        self,
        *,
        kubernetes_conn_id: str | None = connection.DEFAULT_CONN_ID,
        failure_policy: FailurePolicy | None = None,
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
        logging_interval: int | None = LIVE_LOG_INTERVAL,
        trigger_kwargs: dict[str, Any] | None = None,
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
        )
        install_retry_policy(self, self.failure_policy)
        self.memory_growth = memory_growth
        #: True once this process ran the try's code (``execute`` or ``execute_complete``); False
        #: where the failure callback runs for a worker that died.
        self.ran_try_here = False
        #: True once this process ended the try's pod after its verdict (deleted it, or kept it
        #: stamped) and every earlier relaunch's: the failure callback then has nothing to look for.
        self.left_nothing = False
        self._kill_requested = False  # on_kill ran (Airflow lets the interrupted code go on)
        self._try_held: tuple[TryIdentity, str] | None = None  # the try and namespace execute works in
        self._pod: CreatedPod | None = None  # the pod this process holds (on_kill deletes it)
        self._sized: SizedTry | None = None  # what memory_growth gave the try's pod
        # Runs where the worker cannot: in the DAG processor after a heartbeat timeout (a dead worker).
        self.on_failure_callback = with_lost_try_cleanup(getattr(self, "on_failure_callback", None))

    @property
    def streaming_interval(self) -> float | None:
        """Seconds between copies of the base container's new lines into the task log while the
        pod runs: ``logging_interval``, and never without ``get_logs``."""
        if not self.get_logs or self.logging_interval is None:
            return None
        return float(self.logging_interval)

    @classmethod
    def partial(cls, **kwargs: Any) -> Any:
        """``.partial(...).expand(...)``: the mapped task carries the dead-worker cleanup too (the
        DAG processor runs a mapped task's callbacks from its partial arguments, not ``__init__``)."""
        partial = super().partial(**kwargs)
        callbacks = partial.kwargs.get("on_failure_callback")
        partial.kwargs["on_failure_callback"] = with_lost_try_cleanup(callbacks)
        return partial

    # -- 1. build -------------------------------------------------------------------------------

    @cached_property
    def pod_manager(self) -> FinishedPodManager:
        """KPO's ``PodManager``, whose reads of a pod the trigger saw finished need no request."""
        return FinishedPodManager(kube_client=self.client, callbacks=self.callbacks)

    @cached_property
    def hook(self) -> Any:
        """The provider's ``KubernetesHook`` (see :func:`~airflow_k8s_retry.connection.kubernetes_hook`)."""
        chosen = connection.chosen_cluster(self.in_cluster, self.config_file, self.cluster_context)
        return connection.kubernetes_hook(self.kubernetes_conn_id, chosen)

    def _client(self) -> PodClient:
        """The client of the operator's connection (or the default kubeconfig); a broken local
        configuration is a one-line permanent failure naming where it came from."""
        with local_config_errors(self.task_id, self._cluster_source):
            return PodClient(self.hook.api_client)

    def _cluster_source(self) -> str:
        """Where the cluster's configuration comes from, for an error: the connection (or the
        default kubeconfig) and the kubeconfig file it names, said when that file does not exist."""
        if not self.kubernetes_conn_id:
            path = self.config_file or os.environ.get("KUBECONFIG", "")
            source = f"default kubeconfig, KUBECONFIG={os.environ.get('KUBECONFIG', '')!r}"
        else:
            path = self.config_file or connection.kubeconfig_of(self.kubernetes_conn_id)
            source = f"connection {self.kubernetes_conn_id!r}"
        if path and os.pathsep not in path:
            missing = "" if Path(path).expanduser().is_file() else ", which does not exist"
            source += f", kubeconfig file {path}{missing}"
        return source

    def try_identity(self, context: Context) -> TryIdentity:
        """The try the task instance in ``context`` runs (and the deployment it runs in)."""
        return TryIdentity.of(context["ti"], connection.deployment_id())

    def build_try_pod(self, context: Context, relaunch: int = 0) -> dict[str, Any]:
        """The pod this try creates, as API JSON: the provider's ``build_pod_request_obj`` (built
        once per try; each relaunch reuses it under its own name), then the per-try name, this
        package's labels, the task instance and base-container annotations, and the memory
        ``memory_growth`` planned for the try."""
        identity = self.try_identity(context)
        if getattr(self, "pod_request_obj", None) is None:
            self.pod_request_obj = self._provider_pod(context, identity)
        pod: dict[str, Any] = self.hook.api_client.sanitize_for_serialization(
            copy.deepcopy(self.pod_request_obj)
        )
        meta = pod.setdefault("metadata", {})
        meta["name"] = identity.pod_name(relaunch, prefix=self.name)
        meta.setdefault("labels", {}).update(identity.labels(relaunch))
        annotations = meta.setdefault("annotations", {})
        if identity.ti_id:
            annotations[TI_ANNOTATION] = identity.ti_id
        if self.on_kill_action.value == "keep_pod":
            annotations[ON_KILL_ANNOTATION] = "keep"
        # The classifier judges success, skip and failure on the base container alone (a sidecar
        # never decides): the provider puts it first, named base_container_name.
        containers = (pod.get("spec") or {}).get("containers") or [{}]
        annotations[BASE_CONTAINER_ANNOTATION] = str(containers[0].get("name") or self.base_container_name)
        if self.memory_growth is not None:
            self._size_memory(context, pod)
        return pod

    def _provider_pod(self, context: Context, identity: TryIdentity) -> Any:
        """The provider's pod for this task (``build_pod_request_obj``), built under the try's
        first pod name (the provider logs the name it builds)."""
        where = f"pod_template_file {self.pod_template_file}" if self.pod_template_file else ""
        with local_config_errors(self.task_id, where):
            if self.pod_template_file and not Path(self.pod_template_file).is_file():
                raise ValueError(f"pod_template_file {self.pod_template_file!r} is not a file")
            name, suffix = self.name, bool(self.random_name_suffix)
            self.name, self.random_name_suffix = identity.pod_name(0, prefix=name), False
            try:
                # Airflow's context always has "dag"; the provider reads it (a stand-in may not).
                full = context if "dag" in context else {**context, "dag": None}
                return self.build_pod_request_obj(full)
            finally:
                self.name, self.random_name_suffix = name, suffix

    def _size_memory(self, context: Context, pod: dict[str, Any]) -> None:
        """Give the try's pod the memory ``memory_growth`` planned for this try (read once per try:
        a relaunch in the same try gets the same size)."""
        assert self.memory_growth is not None
        try_number = context["ti"].try_number
        containers = (pod.get("spec") or {}).get("containers") or []
        sized = self._sized
        if sized is None or sized.try_number != try_number:
            note = memory_growth.size_for_try(self.memory_growth, context, pod, self.log.warning)
            resources = copy.deepcopy({c.get("name"): c.get("resources") for c in containers})
            self._sized = SizedTry(try_number, note, resources)
            if note:
                self.log.info("Try %d: %s", try_number, note)
            return
        for container in containers:
            if sized.resources.get(container.get("name")) is not None:
                container["resources"] = copy.deepcopy(sized.resources[container.get("name")])

    # -- 2. create or adopt, 3. defer -----------------------------------------------------------

    def execute(self, context: Context) -> Any:
        self.ran_try_here = True
        with local_config_errors(self.task_id, "name"):
            self._set_name(self.name)  # KPO's check of the rendered name: [A-Za-z0-9._-], 220 at most
        client = self._client()
        pod = self.build_try_pod(context)
        self._run_callbacks("on_pod_manifest_created", context, pod_request=self.pod_request_obj)
        identity, namespace = self.try_identity(context), pod["metadata"]["namespace"]
        # From here a kill deletes the try's pods by label, even before this code holds one.
        self._try_held = (identity, namespace)
        if identity.try_number > 1:  # a retry: what earlier tries left is out of the way first
            sweep_earlier_tries(
                client, identity, namespace, log=self.log.warning, sleep=type(self).retry_sleep
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
        identity, meta = self.try_identity(context), pod["metadata"]
        if self._kill_requested:
            raise PodFailure(f"the task was killed before pod {meta['name']} was created; none is created")
        # While the create is on its way no pod is held: a kill deletes the try's pods by label.
        self._pod, self._try_held = None, (identity, meta["namespace"])
        try:
            created = pods.create(client, pod, identity, relaunch=relaunch, sleep=type(self).retry_sleep)
        except PodOfAnotherTry as exc:
            raise PodFailure(str(exc)) from None
        except KubeError as exc:
            raise self._create_failed(context, exc, meta["namespace"], meta["name"]) from None
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
            how = "Adopted" if created.adopted else "Created"
            again = f", relaunch {relaunch}" if relaunch else ""
            where = f"{created.namespace}/{created.name} (uid {created.uid})"
            self.log.info("%s pod %s for try %d%s", how, where, identity.try_number, again)
            self._run_callbacks("on_pod_creation", context, pod=created.as_v1pod())
            found = read_stamp(created.body) if created.adopted else None
            if found is None:
                if deadline is None:
                    deadline = deadline_of(context, self.execution_timeout)
                event = self._defer(identity, created, relaunch, deadline=deadline)
        if found is None:  # deferrable=False: the worker followed the pod itself to its verdict
            return self.execute_complete(context, event, execution_deadline=deadline)
        # Finished business: a verdict was reached for this pod before; act on it, don't re-watch.
        self.log.info("Pod %s already carries verdict %s", created.name, found.verdict.reason.value)
        return self._finish(context, client, created, found.verdict, relaunch, deadline=deadline)

    def _create_failed(self, context: Context, exc: KubeError, namespace: str, name: str) -> Exception:
        """What the task raises when the API refused (or never answered) the try's create: the error
        is judged (:func:`~airflow_k8s_retry.kube.pods.create_error_verdict`), logged,
        published and counted."""
        verdict = pods.create_error_verdict(exc, namespace, name)
        self.log.error("%s: %s", verdict.reason.value, verdict.message)
        self._push_verdict(context, verdict)
        count_task_verdict(verdict, context, namespace)
        return exception_for(verdict, f"{verdict.reason.value}: {verdict.message}")

    @contextmanager
    def _delete_on_error(self, client: PodClient, created: CreatedPod) -> Iterator[None]:
        """Between create and defer, any error deletes the pod: no try leaves one behind."""
        try:
            yield
        except TaskDeferred:
            raise
        except BaseException:
            self._end(client, created, None, keep=False)
            raise

    def _defer(
        self, identity: TryIdentity, created: CreatedPod, relaunch: int, *, deadline: float | None
    ) -> Mapping[str, Any] | None:
        """Defer to the trigger (raises ``TaskDeferred``); with ``deferrable=False``, follow the pod
        here instead and return the trigger's event. A relaunch keeps the try's ``deadline``:
        ``execution_timeout`` counts from the try's start."""
        trigger = PodStateTrigger(
            kubernetes_conn_id=self.kubernetes_conn_id,
            namespace=created.namespace,
            pod_name=created.name,
            pod_uid=created.uid,
            identity=identity.to_payload(),
            policy=self.failure_policy.to_payload(),
            relaunches=relaunch,
            execution_deadline=deadline,
            poll_interval=self.poll_interval,
            owned=self.on_kill_action.value != "keep_pod",
            logging_interval=self.streaming_interval,
            base_container_name=self.base_container_name,
            cluster=connection.chosen_cluster(self.in_cluster, self.config_file, self.cluster_context),
        )
        if not self.deferrable:  # no triggerer needed: the worker follows the pod itself
            return self._follow_here(trigger)
        self.defer(
            trigger=trigger,
            method_name="execute_complete",
            kwargs={"execution_deadline": deadline},
            timeout=defer_timeout(deadline, time.time()),
        )
        return None  # not reached: defer raises

    def _follow_here(self, trigger: PodStateTrigger) -> dict[str, Any] | None:
        """``deferrable=False``: the trigger's own ``run()`` in the worker, until its one event.

        The same watch, tracker, classifier and verdict as in a triggerer; the worker holds its slot
        meanwhile, as KPO's sync mode does.
        """

        async def first_event() -> dict[str, Any] | None:
            async for event in trigger.run():
                return dict(event.payload)
            return None

        self.log.info(
            "Following pod %s/%s from the worker (deferrable=False)", trigger.namespace, trigger.pod_name
        )
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(first_event())
        # Called from inside an event loop (a test, an async runner): follow on a loop of its own.
        with ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(asyncio.run, first_event()).result()

    # -- 4. resume, 5. judge and report ---------------------------------------------------------

    def execute_complete(
        self,
        context: Context,
        event: Mapping[str, Any] | None = None,
        execution_deadline: float | None = None,
    ) -> Any:
        """Act on the trigger's verdict: success, retry, fail, skip, or relaunch in the same try."""
        self.ran_try_here = True
        if not event:
            raise PodFailure("the pod watch ended without a verdict; the try is failed so Airflow retries it")
        pod_event = PodEvent.from_payload(event)
        created = CreatedPod(
            pod_event.pod_name, pod_event.namespace, pod_event.pod_uid, adopted=True, body={}
        )
        self._pod = created
        self._run_callbacks("on_operator_resuming", context, pod=created.as_v1pod(), event=dict(event))
        return self._finish(
            context,
            self._client(),
            created,
            pod_event.verdict,
            pod_event.relaunches,
            deadline=execution_deadline,
            seen=pod_event.seen,
            log_position=pod_event.log_position,
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
        seen: Snapshot | None = None,
        log_position: LogPosition | None = None,
    ) -> Any:
        """Act on ``verdict`` (judged on ``seen``, when the trigger carried it), clean up, raise."""
        count_task_verdict(verdict, context, pod.namespace)
        if verdict.outcome is Outcome.RELAUNCH:
            self.log.warning(
                "%s: %s; pod %s is replaced by a fresh pod in the same try (relaunch %d)",
                verdict.reason.value,
                verdict.message,
                pod.name,
                relaunch + 1,
            )
            self._end(client, pod, verdict, keep=False)
            fresh = self.build_try_pod(context, relaunch + 1)
            return self._launch(context, client, fresh, relaunch + 1, deadline=deadline)
        keep = pods.keeps(client, pod, self.on_finish_action.value, verdict)
        if verdict.reason is Reason.EXECUTION_TIMEOUT and self.on_kill_action.value != "keep_pod":
            keep = False  # as KPO: a timed-out task is killed and on_kill_action decides; a kept
            # pod would go on running beside the next try
        if self.memory_growth is not None and verdict.outcome is Outcome.RETRY:
            verdict = self._grow_after(context, client, pod, verdict, seen)
        result, v1pod = None, pod.as_v1pod()
        try:
            if verdict.outcome is Outcome.SUCCEED:
                result = self._succeeded(context, client, pod, seen=seen, log_position=log_position)
            else:
                self._failed(context, client, pod, verdict, seen=seen, log_position=log_position)
            self._run_callbacks("on_pod_completion", context, pod=v1pod)
            self._run_callbacks("on_pod_teardown", context, pod=v1pod)
        finally:
            # Whatever failed above (logs, XCom), the pod is finished business: delete or keep it,
            # and whatever earlier relaunches of the try left.
            ended = self._end(client, pod, verdict, keep=keep)
            if relaunch:
                ended = (
                    delete_earlier_relaunches(
                        client,
                        self.try_identity(context),
                        pod.namespace,
                        relaunch,
                        log=self.log.warning,
                        sleep=type(self).retry_sleep,
                    )
                    and ended
                )
            self.left_nothing = ended
            self._run_callbacks("on_pod_cleanup", context, pod=v1pod)
        if verdict.outcome is Outcome.SUCCEED:
            self.log.info("%s: pod %s succeeded", verdict.reason.value, pod.name)
            return result
        text = f"pod {pod.namespace}/{pod.name}: {verdict.reason.value}: {verdict.message}"
        raise exception_for(verdict, text)

    def _succeeded(
        self,
        context: Context,
        client: PodClient,
        pod: CreatedPod,
        *,
        seen: Snapshot | None,
        log_position: LogPosition | None,
    ) -> Any:
        """The success's logs (with ``get_logs``) and XCom result (with ``do_xcom_push``); what
        ``memory_growth`` remembers of it."""
        if self.get_logs:
            self._write_logs(client, pod, log_position, seen.pod if seen else None)
        result = client.read_xcom(pod.namespace, pod.name) if self.do_xcom_push else None
        if self.memory_growth is not None:
            ran_on = self._ran_with(context, client, pod, seen)
            memory_growth.after_success(self.memory_growth, context, ran_on, self.log.warning)
        return result

    def _failed(
        self,
        context: Context,
        client: PodClient,
        pod: CreatedPod,
        verdict: Verdict,
        *,
        seen: Snapshot | None,
        log_position: LogPosition | None,
    ) -> None:
        """Report a failure (or a skip) in the task log, the whole log after it, the verdict in XCom,
        and a result the pod wrote before it failed."""
        body, events = self._judged_on(client, pod, seen)
        report = failure_report(verdict, pod=body, events=events)
        self._push_verdict(context, verdict)
        if verdict.outcome is Outcome.SKIP:
            self.log.info("%s\n(pod %s)", report, pod.name)
        else:
            self.log.error("Pod %s: %s", pod.name, report)
        ran = pods.started_containers(body)
        if self.get_logs and ran:
            self._write_logs(client, pod, log_position, body)
        skipped_success = verdict.outcome is Outcome.SKIP and verdict.reason is Reason.SUCCEEDED
        if self.do_xcom_push and ran and not skipped_success:
            # As KPO: a result written before the failure (or a skip by exit code) is still pushed; a
            # success skipped by skip_on_exit_code=0 pushes nothing.
            self._push_partial_result(context, client, pod)

    def _judged_on(
        self, client: PodClient, pod: CreatedPod, seen: Snapshot | None
    ) -> tuple[Json | None, list[Json]]:
        """The pod and its Events as the trigger saw them when it judged, or as read now when it
        carried none (a snapshot too large to carry, a verdict stamped earlier) or, with
        ``get_logs=True``, when termination messages were withheld from it (the report may show them)."""
        if seen is not None and not (self.get_logs and seen.withheld):
            return seen.pod, seen.events
        body, events, _ = pods.evidence(client, pod, None, log=self.log.warning)
        return body, events

    def _write_logs(
        self, client: PodClient, pod: CreatedPod, position: LogPosition | None, body: Json | None
    ) -> None:
        """The whole log of ``container_logs`` (the base container by default), through the
        provider's log reader, with its prefix and ``log_formatter``; what the trigger already
        copied of the base container (up to ``position``) is not written again."""
        v1pod = pod.as_v1pod()
        options = {
            "follow_logs": False,
            "container_name_log_prefix_enabled": self.container_name_log_prefix_enabled,
            "log_formatter": self.log_formatter,
        }
        manager = self.pod_manager
        try:
            with manager.answering(_finished(body)):
                if self.init_container_logs:
                    manager.fetch_requested_init_container_logs(
                        pod=v1pod, init_containers=self.init_container_logs, **options
                    )
                containers = self.container_logs
                if position is not None:
                    containers = self._write_base_log_after(client, pod, containers, position)
                if containers:
                    manager.fetch_requested_container_logs(pod=v1pod, containers=containers, **options)
        except Exception as exc:  # the provider's reader raises client errors; a log is not a verdict
            self.log.warning("Could not read the logs of pod %s: %s", pod.name, type(exc).__name__)

    def _write_base_log_after(
        self, client: PodClient, pod: CreatedPod, containers: Any, position: LogPosition
    ) -> list[str]:
        """Write the base container's lines after ``position`` and return the other containers of
        ``containers`` (KPO's ``container_logs``) still to write."""
        base = self.base_container_name
        if containers is True:
            names = list(self.pod_manager.get_container_names(pod.as_v1pod()))
        elif isinstance(containers, str):
            names = [containers]
        else:
            names = list(containers)
        if base not in names:
            return names
        window = since_seconds(position, time.time())
        raw = client.log(pod.namespace, pod.name, base, timestamps=True, since_seconds=window)
        lines, _ = new_lines(raw, position)
        self.log.info("Container %s: the log after the %s copied while it ran", base, position.time)
        for line in lines:
            self.log.info(
                "%s",
                log_line(
                    base,
                    line,
                    log_formatter=self.log_formatter,
                    prefix=self.container_name_log_prefix_enabled,
                ),
            )
        return [name for name in names if name != base]

    def _push_partial_result(self, context: Context, client: PodClient, pod: CreatedPod) -> None:
        try:
            value = client.read_xcom(pod.namespace, pod.name)
        except Exception as exc:  # the failure is the verdict's; a missing result is not news
            self.log.info("No XCom result from failed pod %s (%s)", pod.name, type(exc).__name__)
            return
        if value is None:
            return
        ti = context["ti"]
        if self.multiple_outputs:  # as the task runner fans a returned dict out, KPO's failure path does too
            if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
                self.log.warning(
                    "XCom result of failed pod %s is not a dict with string keys; pushed as return_value "
                    "only (multiple_outputs=True)",
                    pod.name,
                )
            else:
                for key, item in value.items():
                    ti.xcom_push(key=key, value=item)
        ti.xcom_push(key="return_value", value=value)

    def _push_verdict(self, context: Context, verdict: Verdict) -> None:
        try:
            context["ti"].xcom_push(key="verdict", value=verdict.summary())
        except Exception as exc:  # publishing the verdict must never skip the cleanup
            self.log.warning("Could not push the verdict to XCom: %s", type(exc).__name__)

    # -- memory growth --------------------------------------------------------------------------

    def _ran_with(self, context: Context, client: PodClient, pod: CreatedPod, seen: Snapshot | None) -> Json:
        """The pod as the trigger judged it when its containers' resources travelled with the event
        (what the pod really ran with, a LimitRange's defaults included); the try's pod as built
        otherwise."""
        body, _ = self._judged_on(client, pod, seen)
        containers = ((body or {}).get("spec") or {}).get("containers") or []
        if body is not None and any("resources" in c for c in containers):
            body.setdefault("metadata", {})["namespace"] = pod.namespace
            return body
        return self.build_try_pod(context)

    def _grow_after(
        self, context: Context, client: PodClient, pod: CreatedPod, verdict: Verdict, seen: Snapshot | None
    ) -> Verdict:
        """After an OOM kill, plan the next try's memory (or fail at once when the caps allow no more)."""
        assert self.memory_growth is not None
        if memory_growth.oom_container(verdict) is None:
            # Another cause: the size stays; the try's cause says what it ran with when growth set it.
            if self._sized is None or self._sized.try_number != context["ti"].try_number:
                self.build_try_pod(context)
            note = self._sized.note if self._sized is not None else None
            return (
                replace(verdict, message=f"{verdict.message}; this try ran with {note}") if note else verdict
            )
        grown = memory_growth.after_oom(
            self.memory_growth,
            context=context,
            verdict=verdict,
            ran_on=self._ran_with(context, client, pod, seen),
            read=client.list_sizing,
            log=self.log.warning,
        )
        if grown is not verdict:
            self.log.warning("%s", grown.message.rpartition("; ")[2])
        return grown

    # -- 6. clean up ----------------------------------------------------------------------------

    def _end(
        self, client: PodClient, pod: CreatedPod, verdict: Verdict | None, *, keep: bool, grace: Any = None
    ) -> bool:
        """Delete the pod by UID, or keep it stamped (``pods.finish``); never raises. False when
        the pod is left (its delete failed)."""
        where = f"{pod.namespace}/{pod.name}"
        ending = pods.finish(
            client,
            pod,
            verdict,
            kept=keep,
            log=self.log.error,
            sleep=type(self).retry_sleep,
            grace_period_seconds=grace,
        )
        if ending is pods.Ending.KEPT:
            self.log.info("Keeping pod %s (on_finish_action=%s)", where, self.on_finish_action.value)
        elif ending is pods.Ending.DELETED:
            self.log.info("Deleted pod %s (uid %s)", where, pod.uid)
        if ending is pods.Ending.LEFT:
            return False
        self._pod = None
        return True

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """Also clean up when the deferral itself ends badly (timeout or trigger failure)."""
        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except (TaskDeferralTimeout, TaskDeferralError):
            namespace = self.build_try_pod(context)["metadata"]["namespace"]
            delete_try_pods(
                self._client(),
                self.try_identity(context),
                namespace,
                log=self.log.info,
                sleep=type(self).retry_sleep,
            )
            raise

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
        if self._try_held is not None:  # killed during the sweep or the create: the pod may exist already
            identity, namespace = self._try_held
            delete_try_pods(
                self._client(), identity, namespace, log=self.log.info, sleep=type(self).retry_sleep
            )

    # -- the provider's callbacks ---------------------------------------------------------------

    def _run_callbacks(self, hook: str, context: Context, **kwargs: Any) -> None:
        """Call ``hook`` on each of the operator's ``callbacks`` (KPO's ``KubernetesPodOperatorCallback``)."""
        if not self.callbacks:
            return
        for callback in self.callbacks:
            getattr(callback, hook)(
                client=self.client, mode=ExecutionMode.ASYNC, context=context, operator=self, **kwargs
            )
