"""``RetryingPodOperator``: one pod per try, classified once, cleaned up, retried by Airflow.

The operator is a drop-in for the pod-building arguments of the cncf provider's
``KubernetesPodOperator``. It always defers: ``execute`` creates (or adopts) the try's pod and
hands it to :class:`~airflow_k8s_retry.triggers.PodStateTrigger`; ``execute_complete`` turns the
trigger's one verdict into success, an Airflow retry (:class:`~airflow_k8s_retry.exceptions.PodFailure`),
a permanent failure (:class:`~airflow_k8s_retry.exceptions.PodFailurePermanent`), a skip, or a
relaunch inside the same try. Whatever the ending, the pod is stamped with the verdict and deleted
by UID before the method returns.

Kept cheap to import: the Kubernetes clients load only when a task runs, never at DAG parse time.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Container, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_k8s_retry.connection import DEFAULT_CONN_ID
from airflow_k8s_retry.exceptions import PodFailure, PodFailurePermanent
from airflow_k8s_retry.hints import with_hint
from airflow_k8s_retry.kube.naming import VERDICT_ANNOTATION, TryIdentity
from airflow_k8s_retry.metrics import count_task_verdict

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_k8s_retry.classification.model import Verdict
    from airflow_k8s_retry.classification.policy import FailurePolicy
    from airflow_k8s_retry.kube.pods import CreatedPod, PodClient
    from airflow_k8s_retry.kube.podspec import PodArguments

ON_FINISH_ACTIONS = ("delete_pod", "delete_succeeded_pod", "keep_pod", "delete_active_pod")
DEFER_TIMEOUT_PADDING = timedelta(minutes=5)
LOG_LIMIT_LINES = 2000


def _exit_codes(value: int | Container[int] | None) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, Sequence | set | frozenset):
        return [int(v) for v in value]
    raise ValueError(f"skip_on_exit_code must be an int or a list of ints, got {value!r}")


class RetryingPodOperator(BaseOperator):  # type: ignore[misc]
    """Run a task in a Kubernetes pod; a failed pod costs exactly one Airflow try.

    Accepts the pod-building arguments of ``KubernetesPodOperator`` with the same names and
    meanings; model objects from ``kubernetes.client.models`` and their API-JSON dicts both work.

    :param image: container image of the base container (may come from a pod template instead).
    :param cmds: entrypoint of the base container (``command``).
    :param arguments: arguments of the entrypoint (``args``).
    :param namespace: namespace to run the pod in; default: the connection's, else ``default``.
    :param kubernetes_conn_id: Airflow connection of type ``kubernetes`` (the cncf provider's).
    :param env_vars: environment variables, a dict or a list of ``V1EnvVar``.
    :param env_from: ``V1EnvFromSource`` list.
    :param labels: extra pod labels; the try's identifying labels always win.
    :param annotations: pod annotations.
    :param container_resources: ``V1ResourceRequirements`` or ``{"requests": ..., "limits": ...}``.
    :param ports: container ports.
    :param volumes: pod volumes.
    :param volume_mounts: base container volume mounts; each must name a volume.
    :param secrets: ``airflow.providers.cncf.kubernetes.secret.Secret`` objects.
    :param configmaps: names of ConfigMaps exposed as environment variables.
    :param node_selector: node selector.
    :param affinity: ``V1Affinity`` or its dict.
    :param tolerations: ``V1Toleration`` list.
    :param service_account_name: service account of the pod.
    :param automount_service_account_token: mount the service account token.
    :param image_pull_secrets: ``V1LocalObjectReference`` list, names, or ``"a,b"``.
    :param image_pull_policy: ``Always``, ``IfNotPresent`` or ``Never``.
    :param init_containers: init containers.
    :param security_context: pod security context.
    :param container_security_context: base container security context.
    :param hostnetwork: use the host network.
    :param dnspolicy: pod DNS policy.
    :param hostname: pod hostname.
    :param subdomain: pod subdomain.
    :param schedulername: scheduler to use.
    :param priority_class_name: priority class.
    :param runtime_class_name: runtime class.
    :param termination_grace_period: seconds the pod gets to stop.
    :param active_deadline_seconds: ``activeDeadlineSeconds`` of the pod.
    :param base_container_name: name of the container whose exit decides the task (``base``).
    :param pod_template_file: path of a pod YAML/JSON used as the base of the pod.
    :param pod_template_dict: the same as a dict.
    :param full_pod_spec: a ``V1Pod`` (or dict) merged over the template.
    :param get_logs: write the base container's log to the task log when the pod finishes.
    :param do_xcom_push: read ``/airflow/xcom/return.json`` through the cncf sidecar and return it.
    :param on_finish_action: ``delete_pod`` (default), ``delete_succeeded_pod`` (keep failed
        pods, stamped with their verdict), ``keep_pod``, or ``delete_active_pod`` (same as
        ``delete_pod`` here).
    :param skip_on_exit_code: exit code(s) of the base container that mark the task skipped.
    :param startup_timeout_seconds: seconds a pod may stay pending without another explanation
        (default: the policy's, 900).
    :param schedule_timeout_seconds: seconds a pod may stay unschedulable (default: the policy's, 600).
    :param failure_policy: a :class:`~airflow_k8s_retry.classification.policy.FailurePolicy`
        overriding graces and outcomes of the default rules.
    :param relaunch_budget: fresh pods a try may start after infrastructure took its pod away
        (default: the policy's, 3).
    :param keep_failed_pods: keep failed pods for inspection (stamped, never re-detected).
    :param poll_interval: seconds between the trigger's safety polls.
    :param name: accepted for compatibility and ignored: pod names are deterministic per try.
    :param deferrable: accepted for compatibility; this operator always defers.
    """

    template_fields: Sequence[str] = (
        "image",
        "cmds",
        "arguments",
        "env_vars",
        "labels",
        "annotations",
        "namespace",
        "pod_template_file",
        "pod_template_dict",
        "container_resources",
        "volumes",
        "volume_mounts",
        "env_from",
        "node_selector",
        "kubernetes_conn_id",
        "configmaps",
        "hostname",
        "base_container_name",
    )
    template_fields_renderers = {"env_vars": "py", "pod_template_dict": "json"}
    ui_color = "#d9e8fb"

    def __init__(
        self,
        *,
        image: str | None = None,
        cmds: list[str] | None = None,
        arguments: list[str] | None = None,
        namespace: str | None = None,
        kubernetes_conn_id: str | None = DEFAULT_CONN_ID,
        env_vars: Any = None,
        env_from: list[Any] | None = None,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        container_resources: Any = None,
        ports: list[Any] | None = None,
        volumes: list[Any] | None = None,
        volume_mounts: list[Any] | None = None,
        secrets: list[Any] | None = None,
        configmaps: list[str] | None = None,
        node_selector: dict[str, str] | None = None,
        affinity: Any = None,
        tolerations: list[Any] | None = None,
        service_account_name: str | None = None,
        automount_service_account_token: bool | None = None,
        image_pull_secrets: Any = None,
        image_pull_policy: str | None = None,
        init_containers: list[Any] | None = None,
        security_context: Any = None,
        container_security_context: Any = None,
        hostnetwork: bool = False,
        dnspolicy: str | None = None,
        hostname: str | None = None,
        subdomain: str | None = None,
        schedulername: str | None = None,
        priority_class_name: str | None = None,
        runtime_class_name: str | None = None,
        termination_grace_period: int | None = None,
        active_deadline_seconds: int | None = None,
        base_container_name: str | None = None,
        pod_template_file: str | None = None,
        pod_template_dict: dict[str, Any] | None = None,
        full_pod_spec: Any = None,
        get_logs: bool = True,
        do_xcom_push: bool = False,
        on_finish_action: str = "delete_pod",
        skip_on_exit_code: int | Container[int] | None = None,
        startup_timeout_seconds: float | None = None,
        schedule_timeout_seconds: float | None = None,
        failure_policy: FailurePolicy | None = None,
        relaunch_budget: int | None = None,
        keep_failed_pods: bool = False,
        poll_interval: float = 10.0,
        name: str | None = None,
        deferrable: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(do_xcom_push=do_xcom_push, **kwargs)
        self.image = image
        self.cmds = cmds
        self.arguments = arguments
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.env_vars = env_vars
        self.env_from = env_from
        self.labels = labels
        self.annotations = annotations
        self.container_resources = container_resources
        self.ports = ports
        self.volumes = volumes
        self.volume_mounts = volume_mounts
        self.secrets = secrets
        self.configmaps = configmaps
        self.node_selector = node_selector
        self.affinity = affinity
        self.tolerations = tolerations
        self.service_account_name = service_account_name
        self.automount_service_account_token = automount_service_account_token
        self.image_pull_secrets = image_pull_secrets
        self.image_pull_policy = image_pull_policy
        self.init_containers = init_containers
        self.security_context = security_context
        self.container_security_context = container_security_context
        self.hostnetwork = hostnetwork
        self.dnspolicy = dnspolicy
        self.hostname = hostname
        self.subdomain = subdomain
        self.schedulername = schedulername
        self.priority_class_name = priority_class_name
        self.runtime_class_name = runtime_class_name
        self.termination_grace_period = termination_grace_period
        self.active_deadline_seconds = active_deadline_seconds
        self.base_container_name = base_container_name or "base"
        self.pod_template_file = pod_template_file
        self.pod_template_dict = pod_template_dict
        self.full_pod_spec = full_pod_spec
        self.get_logs = get_logs
        self.poll_interval = poll_interval
        self.pod_name_hint = name
        if on_finish_action not in ON_FINISH_ACTIONS:
            raise ValueError(
                f"{self.task_id}: on_finish_action must be one of {', '.join(ON_FINISH_ACTIONS)}, "
                f"got {on_finish_action!r}"
            )
        if not deferrable:
            self.log.debug("deferrable=False is ignored: RetryingPodOperator always defers")
        self.on_finish_action = "delete_succeeded_pod" if keep_failed_pods else on_finish_action
        self.failure_policy = self._effective_policy(
            failure_policy,
            skip_on_exit_code=skip_on_exit_code,
            startup_timeout=startup_timeout_seconds,
            schedule_timeout=schedule_timeout_seconds,
            relaunch_budget=relaunch_budget,
        )
        self._pod: CreatedPod | None = None

    def _effective_policy(
        self,
        policy: FailurePolicy | None,
        *,
        skip_on_exit_code: int | Container[int] | None,
        startup_timeout: float | None,
        schedule_timeout: float | None,
        relaunch_budget: int | None,
    ) -> FailurePolicy:
        """The operator's policy: ``failure_policy`` with the KPO-style arguments laid over it."""
        from airflow_k8s_retry.classification.policy import FailurePolicy, PolicyError

        if policy is not None and not isinstance(policy, FailurePolicy):
            raise PolicyError(
                f"{self.task_id}: failure_policy must be an airflow_k8s_retry.classification.policy."
                f"FailurePolicy, got {type(policy).__name__}"
            )
        changes: dict[str, Any] = {}
        if skip_on_exit_code is not None:
            changes["skip_on_exit_codes"] = _exit_codes(skip_on_exit_code)
        if startup_timeout is not None:
            changes["startup_timeout"] = startup_timeout
        if schedule_timeout is not None:
            changes["schedule_timeout"] = schedule_timeout
        if relaunch_budget is not None:
            changes["relaunch_budget"] = relaunch_budget
        return dataclasses.replace(policy or FailurePolicy(), **changes)

    # -- building -------------------------------------------------------------------------------

    def pod_arguments(self) -> PodArguments:
        """The operator's pod-building arguments (after templating) for :func:`build_pod`."""
        from airflow_k8s_retry.kube.podspec import PodArguments, check_pod_template, load_pod_template

        template = None
        if self.pod_template_file:
            template = load_pod_template(self.pod_template_file)
        elif self.pod_template_dict is not None:
            template = check_pod_template(self.pod_template_dict, "pod_template_dict")
        return PodArguments(
            image=self.image,
            cmds=self.cmds,
            arguments=self.arguments,
            env_vars=self.env_vars,
            env_from=self.env_from,
            labels=self.labels,
            annotations=self.annotations,
            container_resources=self.container_resources,
            ports=self.ports,
            volumes=self.volumes,
            volume_mounts=self.volume_mounts,
            secrets=self.secrets,
            configmaps=self.configmaps,
            node_selector=self.node_selector,
            affinity=self.affinity,
            tolerations=self.tolerations,
            service_account_name=self.service_account_name,
            automount_service_account_token=self.automount_service_account_token,
            image_pull_secrets=self.image_pull_secrets,
            image_pull_policy=self.image_pull_policy,
            init_containers=self.init_containers,
            security_context=self.security_context,
            container_security_context=self.container_security_context,
            host_network=self.hostnetwork,
            dns_policy=self.dnspolicy,
            hostname=self.hostname,
            subdomain=self.subdomain,
            scheduler_name=self.schedulername,
            priority_class_name=self.priority_class_name,
            runtime_class_name=self.runtime_class_name,
            termination_grace_period=self.termination_grace_period,
            active_deadline_seconds=self.active_deadline_seconds,
            base_container_name=self.base_container_name,
            do_xcom_push=self.do_xcom_push,
            pod_template=template,
            full_pod_spec=self.full_pod_spec,
        )

    def build_pod_request(self, identity: TryIdentity, namespace: str, relaunch: int = 0) -> dict[str, Any]:
        """The pod this try creates, as API JSON (public so DAG tests can inspect it)."""
        from airflow_k8s_retry.kube.podspec import build_pod

        return build_pod(
            self.pod_arguments(),
            name=identity.pod_name(relaunch),
            namespace=namespace,
            identity_labels=identity.labels(relaunch),
        )

    # -- running --------------------------------------------------------------------------------

    @staticmethod
    def _identity(context: Context) -> TryIdentity:
        ti = context["ti"]
        return TryIdentity(
            dag_id=ti.dag_id,
            task_id=ti.task_id,
            run_id=ti.run_id,
            map_index=ti.map_index if ti.map_index is not None else -1,
            try_number=ti.try_number,
        )

    def _client(self) -> tuple[PodClient, str]:
        from airflow_k8s_retry.connection import pod_client

        return pod_client(self.kubernetes_conn_id, self.namespace)

    def _deadline(self, context: Context) -> float | None:
        if self.execution_timeout is None:
            return None
        start = getattr(context["ti"], "start_date", None)
        began = float(start.timestamp()) if start is not None else time.time()
        return began + float(self.execution_timeout.total_seconds())

    def execute(self, context: Context) -> Any:
        identity = self._identity(context)
        client, namespace = self._client()
        try:
            self._sweep_earlier_tries(client, identity, namespace)
            return self._launch(context, client, identity, namespace, relaunch=0)
        finally:
            client.close()

    def _sweep_earlier_tries(self, client: PodClient, identity: TryIdentity, namespace: str) -> None:
        """Delete pods that an earlier try of this task left running.

        An earlier try can end without reaching its cleanup: the task instance was marked failed
        or cleared while deferred before any triggerer had started its trigger, so nothing called
        ``on_kill``. Its pod would run on. A new try is proof that the earlier one is over, so its
        unfinished pods go, by UID. Pods with a verdict stamp were kept on purpose
        (``keep_failed_pods``, ``on_finish_action``) and stay.
        """
        from airflow_k8s_retry.kube.errors import KubeError
        from airflow_k8s_retry.kube.naming import MANAGED_SELECTOR

        if identity.try_number <= 1:
            return
        labels = identity.labels()
        selector = f"{MANAGED_SELECTOR},dag_id={labels['dag_id']},task_id={labels['task_id']}"
        try:
            pods = client.list_pods(namespace, selector)
        except KubeError as exc:
            self.log.warning("Could not look for pods of earlier tries: %s", exc)
            return
        for pod in pods:
            meta = pod.get("metadata") or {}
            pod_labels = meta.get("labels") or {}
            try_label = str(pod_labels.get("try_number", ""))
            if not try_label.isdigit() or int(try_label) >= identity.try_number:
                continue
            earlier = dataclasses.replace(identity, try_number=int(try_label))
            if not earlier.owns(pod_labels) or VERDICT_ANNOTATION in (meta.get("annotations") or {}):
                continue
            if meta.get("deletionTimestamp"):
                continue
            try:
                deleted = client.delete(namespace, meta["name"], meta["uid"])
            except KubeError as exc:
                self.log.warning(
                    "Pod %s of try %s left behind: delete failed: %s", meta["name"], try_label, exc
                )
                continue
            if deleted:
                self.log.warning(
                    "Deleted pod %s/%s left running by try %s of this task (it ended without cleanup)",
                    namespace, meta["name"], try_label,
                )

    def _launch(
        self,
        context: Context,
        client: PodClient,
        identity: TryIdentity,
        namespace: str,
        relaunch: int,
        *,
        deadline: float | None = None,
    ) -> Any:
        from airflow_k8s_retry.classification.model import Outcome, Reason, Verdict
        from airflow_k8s_retry.kube.errors import KubeError
        from airflow_k8s_retry.kube.pods import PodOfAnotherTry

        pod = self.build_pod_request(identity, namespace, relaunch)
        try:
            created = client.create_or_adopt(pod, identity, relaunch=relaunch)
        except PodOfAnotherTry as exc:
            raise PodFailure(str(exc)) from None
        except KubeError as exc:
            outcome = Outcome.RETRY if exc.transient else Outcome.FAIL
            verdict = Verdict(
                outcome=outcome,
                reason=Reason.API_REJECTED,
                message=f"the API refused to create pod {namespace}/{pod['metadata']['name']}: "
                f"HTTP {exc.status}: {exc}",
                rule="api.create",
            )
            self._push_verdict(context, verdict)
            count_task_verdict(verdict, context, namespace)
            self.log.error("%s: %s", verdict.reason.value, verdict.message)
            message = f"{verdict.reason.value}: {verdict.message}"
            if outcome is Outcome.FAIL:
                raise PodFailurePermanent(message, verdict) from None
            raise PodFailure(message, verdict) from None
        self._pod = created
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
        stamped = (created.body.get("metadata", {}).get("annotations") or {}).get(VERDICT_ANNOTATION)
        if created.adopted and stamped:
            # Finished business: a verdict was reached for this pod before; act on it, don't re-watch.
            import json

            verdict = Verdict.from_payload(json.loads(stamped))
            self.log.info("Pod %s already carries verdict %s", created.name, verdict.reason.value)
            return self._finish(context, client, created, verdict, relaunch, deadline=deadline)
        return self._defer(context, identity, created, relaunch, deadline=deadline)

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
                owned=True,
            ),
            method_name="execute_complete",
            kwargs={"execution_deadline": deadline},
            timeout=timeout,
        )

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
        client, _ = self._client()
        created = CreatedPod(
            name=pod_event.pod_name,
            namespace=pod_event.namespace,
            uid=pod_event.pod_uid,
            adopted=True,
            body={},
        )
        self._pod = created
        try:
            return self._finish(
                context, client, created, pod_event.verdict, pod_event.relaunches, deadline=execution_deadline
            )
        finally:
            client.close()

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
        from airflow.sdk.exceptions import AirflowSkipException

        from airflow_k8s_retry.classification.model import Outcome

        count_task_verdict(verdict, context, pod.namespace)
        outcome = verdict.outcome
        if outcome is Outcome.SUCCEED:
            result = None
            try:
                if self.get_logs:
                    self._write_pod_log(client, pod)
                if self.do_xcom_push:
                    result = client.read_xcom(pod.namespace, pod.name)
            finally:
                # Even when the result cannot be read, the pod is finished business: stamp and delete.
                self._stamp(client, pod, verdict)
                self._cleanup(client, pod, failed=False)
            self.log.info("%s: pod %s succeeded", verdict.reason.value, pod.name)
            return result
        if outcome is Outcome.RELAUNCH:
            self.log.warning(
                "%s: %s; pod %s is replaced by a fresh pod in the same try (relaunch %d)",
                verdict.reason.value,
                verdict.message,
                pod.name,
                relaunch + 1,
            )
            self._stamp(client, pod, verdict)
            self._cleanup(client, pod, failed=False, relaunch=True)
            return self._launch(
                context, client, self._identity(context), pod.namespace, relaunch + 1, deadline=deadline
            )

        report = self._report(client, pod, verdict)
        self._stamp(client, pod, verdict)
        self._push_verdict(context, verdict)
        if outcome is Outcome.SKIP:
            self.log.info("%s\n(pod %s)", report, pod.name)
            self._cleanup(client, pod, failed=False)
            raise AirflowSkipException(f"{verdict.reason.value}: {verdict.message}")
        self.log.error("Pod %s: %s", pod.name, report)
        self._cleanup(client, pod, failed=True)
        message = f"pod {pod.namespace}/{pod.name}: {verdict.reason.value}: {verdict.message}"
        if outcome is Outcome.FAIL:
            raise PodFailurePermanent(message, verdict)
        if outcome is not Outcome.RETRY:
            message += f" (unexpected outcome {outcome.value!r}, treated as retry)"
        raise PodFailure(message, verdict)

    def _report(self, client: PodClient, pod: CreatedPod, verdict: Verdict) -> str:
        from airflow_k8s_retry.kube.errors import KubeError
        from airflow_k8s_retry.kube.pods import failure_report

        body: dict[str, Any] | None = None
        events: list[dict[str, Any]] = []
        tail = ""
        try:
            body = client.read(pod.namespace, pod.name)
            if body is not None and body["metadata"].get("uid") == pod.uid:
                events = client.events(pod.namespace, pod.name, pod.uid)
                tail = client.log(pod.namespace, pod.name, self.base_container_name, tail_lines=20)
            else:
                body = None
        except KubeError as exc:
            self.log.warning("Could not read the evidence of pod %s: %s", pod.name, exc)
        report = failure_report(verdict.to_payload(), pod=body, events=events, log_tail=tail)
        return with_hint(report, verdict)

    def _write_pod_log(self, client: PodClient, pod: CreatedPod) -> None:
        from airflow_k8s_retry.kube.errors import KubeError

        try:
            text = client.log(pod.namespace, pod.name, self.base_container_name, tail_lines=LOG_LIMIT_LINES)
        except KubeError as exc:
            self.log.warning("Could not read the log of pod %s: %s", pod.name, exc)
            return
        for line in text.splitlines():
            self.log.info("[%s] %s", self.base_container_name, line)

    def _stamp(self, client: PodClient, pod: CreatedPod, verdict: Verdict) -> None:
        """Stamp the verdict on the pod; an API error is logged and does not stop the cleanup."""
        from airflow_k8s_retry.kube.errors import KubeError

        try:
            client.stamp_verdict(pod.namespace, pod.name, pod.uid, _stamp(verdict))
        except KubeError as exc:
            self.log.warning("Could not stamp the verdict on pod %s: %s", pod.name, exc)

    def _cleanup(self, client: PodClient, pod: CreatedPod, *, failed: bool, relaunch: bool = False) -> None:
        """Delete the pod by UID unless ``on_finish_action`` keeps it.

        A relaunch always deletes: the replaced pod belongs to no verdict the author asked to keep.
        An API error while deleting is logged (with the pod's name and UID) and not raised, so the
        task still ends the way its verdict says.
        """
        from airflow_k8s_retry.kube.errors import KubeError

        action = self.on_finish_action
        keep = action == "keep_pod" or (failed and action == "delete_succeeded_pod")
        if keep and not relaunch:
            self.log.info("Keeping pod %s/%s (on_finish_action=%s)", pod.namespace, pod.name, action)
            return
        try:
            if client.delete(pod.namespace, pod.name, pod.uid):
                self.log.info("Deleted pod %s/%s (uid %s)", pod.namespace, pod.name, pod.uid)
        except KubeError as exc:
            self.log.error("Could not delete pod %s/%s (uid %s): %s", pod.namespace, pod.name, pod.uid, exc)
            return
        self._pod = None

    def _push_verdict(self, context: Context, verdict: Verdict) -> None:
        context["ti"].xcom_push(key="verdict", value=verdict.summary())

    # -- endings that are not verdicts ----------------------------------------------------------

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """Also clean up when the deferral itself ends badly (timeout or trigger failure)."""
        from airflow.sdk.exceptions import TaskDeferralError, TaskDeferralTimeout

        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except (TaskDeferralTimeout, TaskDeferralError):
            self._delete_try_pods(context)
            raise

    def _delete_try_pods(self, context: Context) -> None:
        """Delete every pod labelled with this try (any relaunch): the deferral timed out or failed."""
        from airflow_k8s_retry.kube.errors import KubeError

        identity = self._identity(context)
        labels = identity.labels()
        keys = [k for k in ("dag_id", "task_id", "run_id", "map_index", "try_number") if k in labels]
        selector = ",".join(f"{k}={labels[k]}" for k in keys)
        client, namespace = self._client()
        try:
            for pod in client.list_pods(namespace, selector):
                meta = pod["metadata"]
                if identity.owns(meta.get("labels")) and client.delete(namespace, meta["name"], meta["uid"]):
                    self.log.info("Deleted pod %s/%s after the deferral ended", namespace, meta["name"])
        except KubeError as exc:
            self.log.error("Could not clean up the pods of try %d: %s", identity.try_number, exc)
        finally:
            client.close()

    def on_kill(self) -> None:
        """The task was killed in the worker (user, ``execution_timeout``): delete the pod."""
        pod = self._pod
        if pod is None:
            return
        from airflow_k8s_retry.kube.errors import KubeError

        client, _ = self._client()
        try:
            if client.delete(pod.namespace, pod.name, pod.uid):
                self.log.info("Deleted pod %s/%s on kill", pod.namespace, pod.name)
        except KubeError as exc:
            self.log.error("Could not delete pod %s/%s on kill: %s", pod.namespace, pod.name, exc)
        finally:
            client.close()
            self._pod = None


def _stamp(verdict: Verdict) -> dict[str, Any]:
    """The verdict as stamped on the pod: small (no history), enough to act on it again."""
    payload = verdict.to_payload()
    payload["history"] = None
    payload["evidence"] = payload["evidence"][:3]
    return payload
