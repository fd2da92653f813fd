"""What a ``PodStateTrigger`` that owns its try's pod does when the task is killed while deferred.

Airflow 3.3 calls a trigger's ``on_kill`` when its task instance is marked failed, successful or
skipped, cleared, or its DAG run deleted, while the task is deferred, and also (3.3.0-3.3.2) when the
trigger merely moves to another triggerer. So :meth:`TriggerKill.on_kill` reads the task instance's
state first (:func:`~airflow_k8s_retry.kills.policy.killed_why`) and deletes the pod only in a state
only a kill leaves; in any other state (``deferred``: a hand-over; ``scheduled``, ``queued``,
``running``: another triggerer fired and a worker owns the pod now) it keeps the pod and says why.

The delete reads the pod first and leaves one that is gone, replaced, being deleted or stamped with
a verdict (:func:`~airflow_k8s_retry.kills.policy.kept_on_kill`), and retries API errors for about
22 s (:data:`~airflow_k8s_retry.kube.pods.KILL_BACKOFF`, inside Airflow's 30 s
``[triggerer] on_kill_timeout``): nothing else deletes a killed task's pod on time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any

from airflow_k8s_retry.kills.policy import TaskInstanceGone, kept_on_kill, killed_why
from airflow_k8s_retry.kube.aio import AsyncKube
from airflow_k8s_retry.kube.clock import Clock, within
from airflow_k8s_retry.kube.config import ClusterConfig
from airflow_k8s_retry.kube.errors import Forbidden, KubeError, NotFound
from airflow_k8s_retry.kube.hub import WatchHub
from airflow_k8s_retry.kube.naming import TryIdentity
from airflow_k8s_retry.kube.pods import KILL_BACKOFF, aretrying
from airflow_k8s_retry.kube.rbac import rbac_message

#: ``(identity) -> the task instance's state``, as Airflow's execution API answers it.
TaskStateLookup = Callable[[TryIdentity], Awaitable[str | None]]


@dataclass(frozen=True)
class OwnedPod:
    """A try's pod as the trigger that owns it knows it."""

    namespace: str
    name: str
    uid: str
    identity: TryIdentity


@dataclass(eq=False)
class TriggerKill:
    """The trigger's side of a kill: confirm it (the task instance's state), then delete the pod.

    :param pod: the pod the trigger owns.
    :param config: resolves the cluster (the trigger's, once it has resolved it).
    :param clock: the trigger's clock: the state lookup's bound and the pauses between attempts.
    :param lookup: reads the task instance's state (Airflow's execution API by default).
    :param lookup_timeout: seconds of ``clock`` the lookup may take before the pod is kept.
    :param log: the trigger's logger.
    """

    pod: OwnedPod
    _: KW_ONLY
    config: Callable[[], Awaitable[ClusterConfig]]
    clock: Clock
    lookup: TaskStateLookup
    lookup_timeout: float
    log: Any

    async def on_kill(self) -> None:
        """Delete the pod once the task instance is confirmed killed; keep it otherwise."""
        why = await self.killed_why()
        if why is not None:
            await self.delete(why)

    async def state(self) -> tuple[str | None, str | None]:
        """The task instance's state and, when only a kill leaves it there (or it is gone), why
        its pod may be deleted; other lookup errors are raised."""
        try:
            state = await within(self.clock, self.lookup(self.pod.identity), self.lookup_timeout)
        except TaskInstanceGone as exc:
            return None, f"Task instance is gone ({exc})"
        return state, killed_why(state)

    async def killed_why(self) -> str | None:
        """Why the pod may be deleted (the task instance's state), or None: it is kept."""
        name = self.pod.name
        try:
            state, why = await self.state()
        except Exception as exc:
            self.log.warning(
                "Pod %s kept: could not confirm the task instance was killed (%s: %s)",
                name,
                type(exc).__name__,
                exc,
            )
            return None
        if why is None and state == "deferred":
            self.log.info(
                "Pod %s kept: the task instance is still deferred (the trigger is moving to another "
                "triggerer, not being killed)",
                name,
            )
        elif why is None:
            self.log.info(
                "Pod %s kept: the task instance is %s (another triggerer fired and the worker owns "
                "the pod now), not killed",
                name,
                state,
            )
        return why

    async def delete(self, why: str) -> None:
        """Delete the pod (see :meth:`delete_with`), retrying API errors; the last one is logged."""
        config = await self.config()

        async def attempt() -> None:
            async with WatchHub.current().client(config) as kube:
                await self.delete_with(kube, why)

        def retried(exc: KubeError) -> None:
            self.log.info("Pod %s: delete after kill failed (%s); retrying", self.pod.name, exc)

        try:
            await aretrying(attempt, KILL_BACKOFF, sleep=self._pause, before_pause=retried)
        except Forbidden as exc:
            rule = rbac_message(exc, "delete", "pods", self.pod.namespace)
            self.log.error("Pod %s kept: %s", self.pod.name, rule)
        except KubeError as exc:
            tries = len(KILL_BACKOFF) + 1
            self.log.warning("Pod %s: delete after kill failed %d times: %s", self.pod.name, tries, exc)

    async def delete_with(self, kube: AsyncKube, why: str) -> None:
        """Read the pod, and delete it by UID unless it is gone, replaced, being deleted or
        stamped with a verdict."""
        pod = self.pod
        try:
            found: dict[str, Any] | None = await kube.read_pod(pod.namespace, pod.name)
        except NotFound:
            found = None
        kept = kept_on_kill(found, pod.uid)
        if kept is not None:
            self.log.info("%s: pod %s %s", why, pod.name, kept)
            return
        deleted = await kube.delete_pod(pod.namespace, pod.name, pod.uid)
        self.log.info("%s: pod %s %s", why, pod.name, "deleted" if deleted else "was already gone")

    async def _pause(self, seconds: float) -> None:
        await self.clock.sleep_until(self.clock.now() + seconds)
