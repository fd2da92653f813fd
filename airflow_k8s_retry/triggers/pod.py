"""``PodStateTrigger``: follow one pod through the shared watch, classify every change, emit once.

The operator and the sensor defer to this trigger. It subscribes to its pod in the triggerer's
:class:`~airflow_k8s_retry.kube.hub.WatchHub` (one watch per namespace, not one poll per pod) and
performs what :class:`.tracker.PodTracker` decides: the tracker runs the pure classifier on every
change and whenever a grace deadline falls due (a timer, not a poll), and this module does the I/O
(reads, annotations, log reads, sleeping) until it emits exactly one :class:`PodEvent`. With
``logging_interval``, the base container's new log lines go to the trigger's (the task's) log.

Restart safety: trigger kwargs are frozen when the task defers, so what the trigger learns later
(the first time a signal was seen, the strongest image-pull cause) is stamped on the pod as the
``airflow-k8s-retry.io/history`` annotation (at once when a grace timer starts, else at most the
tracker's ``HISTORY_SETTLE`` late) and merged back by a trigger re-created in another process. A
pod that already carries a verdict stamp is finished business: its stamped verdict is emitted.

The event carries what the verdict was judged on (the pod's status and its last Events,
:mod:`airflow_k8s_retry.kube.snapshot`), so the worker's failure report needs no API reads.

The trigger never deletes a pod while it runs; the operator does that after acting on the
verdict. :meth:`PodStateTrigger.on_kill` is the exception, once the task instance is confirmed no
longer deferred (Airflow 3.3.0-3.3.2 also call it when a trigger merely moves to another triggerer).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_k8s_retry import metrics
from airflow_k8s_retry.classification.model import History, Outcome, Verdict
from airflow_k8s_retry.kube import snapshot
from airflow_k8s_retry.kube.clock import Clock, WallClock, within
from airflow_k8s_retry.kube.config import ClusterConfig
from airflow_k8s_retry.kube.errors import Conflict, Forbidden, KubeError, NotFound
from airflow_k8s_retry.kube.hub import PodChange, PodSubscription, WatchHub
from airflow_k8s_retry.kube.lifecycle import KILL_BACKOFF, kept_on_kill, withhold_termination_messages
from airflow_k8s_retry.kube.logstream import LogPosition
from airflow_k8s_retry.kube.naming import HISTORY_ANNOTATION, MANAGED_SELECTOR, TryIdentity
from airflow_k8s_retry.kube.pod_event import PodEvent
from airflow_k8s_retry.kube.rbac import rbac_message
from airflow_k8s_retry.kube.stamps import encode_history
from airflow_k8s_retry.task_state import (
    KILLED_STATES,
    WAITING_STATES,
    TaskInstanceGone,
    airflow_task_state,
    keep_until_done,
    killed_why,
)
from airflow_k8s_retry.triggers.tracker import (
    Emit,
    FetchLogs,
    LogTail,
    LookAgain,
    PodTracker,
    ReadDirectly,
    ReadWorkload,
    Revive,
    SleepUntil,
    Step,
)

if TYPE_CHECKING:
    from airflow_k8s_retry.kube.aio import AsyncKube

#: ``PodEvent`` lives in ``kube.pod_event`` and is imported from here, as it always was.
__all__ = [
    "CLASSPATH",
    "KILLED_STATES",
    "PodEvent",
    "PodStateTrigger",
    "TaskInstanceGone",
    "airflow_task_state",
]

CLASSPATH = "airflow_k8s_retry.triggers.PodStateTrigger"
#: Pauses between looks at the task state after the trigger fired, until its event was accepted: 30 s.
_FIRED_BACKOFF = (5.0, 5.0, 5.0, 15.0)
#: Seconds between looks while the task instance waits for a worker (a pool, ``parallelism``).
_WAITING_PAUSE = 10.0
#: How long the after-firing check follows a task instance that waits for a worker; past it, a
#: kill of the waiting task is left to the api-server's listener and the next try's sweep.
_WAITING_AT_MOST = 6 * 3600.0
#: How long the after-firing check leaves a killed task's pod to its worker (whose own ``on_kill``
#: deletes it when the kill came after the worker resumed) before it deletes what is left.
_WORKER_FIRST = 60.0

TaskStateLookup = Callable[[TryIdentity], Awaitable[str | None]]


class PodStateTrigger(BaseTrigger):  # type: ignore[misc]
    """Watch one pod and fire once with the classifier's verdict.

    :param kubernetes_conn_id: Airflow ``kubernetes`` connection; ``None`` for default kubeconfig.
    :param namespace: the pod's namespace.
    :param pod_name: the pod's name.
    :param pod_uid: the pod's UID; a pod of the same name with another UID is not this pod.
    :param identity: ``TryIdentity.to_payload()`` of the try that owns the pod, or ``None`` for a
        pod this package did not create.
    :param policy: ``FailurePolicy.to_payload()``, or ``None`` for the default rules.
    :param history: ``History.to_payload()`` known when deferring (first-seen times, evidence).
    :param relaunches: fresh pods already started in this try after disruptions.
    :param execution_deadline: epoch seconds; past it the trigger fires ``execution.timeout``.
    :param poll_interval: seconds between polls, used only when RBAC forbids watching.
    :param owned: ``False`` for a pod this package did not create: never deleted, and annotated
        only where RBAC allows.
    :param target: ``Target.to_payload()`` (:mod:`airflow_k8s_retry.triggers.target`) for a sensor that
        waits for a pod by name, the newest pod of a label selector, or a Job: the trigger follows
        the target (``pod_name`` and ``pod_uid`` are then empty) and emits a ``TargetEvent``.
        Serialized only when given, so an operator's trigger kwargs stay as they were.
    :param logging_interval: KPO's argument: every this many seconds while ``base_container_name``
        runs, its new log lines go to the trigger's log; the event says where the copy stopped.
        Serialized only when given.
    :param base_container_name: the container whose log is streamed (default ``base``).
    :param cluster: the task's KPO cluster arguments (``in_cluster``, ``config_file``,
        ``cluster_context``) laid over the connection's; serialized only when given.
    """

    #: Where "now" comes from; replace with a ``ManualClock`` in tests.
    clock: ClassVar[Clock] = WallClock()
    #: How ``on_kill`` reads the task instance's state; replace in tests.
    task_state_lookup: ClassVar[TaskStateLookup] = staticmethod(airflow_task_state)
    #: Seconds of :attr:`clock` ``on_kill`` waits for that state before it keeps the pod: a loaded
    #: triggerer's supervisor answered after over 10 s; inside Airflow's 30 s ``on_kill_timeout``.
    state_lookup_timeout: ClassVar[float] = 25.0
    #: After firing, check that the task resumed, else delete the pod (off for ``deferrable=False``).
    after_firing_check: bool = True

    def __init__(
        self,
        *,
        kubernetes_conn_id: str | None,
        namespace: str,
        pod_name: str,
        pod_uid: str,
        identity: Mapping[str, Any] | None,
        policy: Mapping[str, Any] | None,
        history: Mapping[str, Any] | None = None,
        relaunches: int = 0,
        execution_deadline: float | None = None,
        poll_interval: float = 10.0,
        owned: bool = True,
        target: Mapping[str, Any] | None = None,
        logging_interval: float | None = None,
        base_container_name: str = "base",
        cluster: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        for label, value in (("namespace", namespace), ("pod_name", pod_name), ("pod_uid", pod_uid)):
            if target is not None and label != "namespace" and value == "":
                continue  # a target is followed, not a pod known in advance
            if not isinstance(value, str) or not value:
                raise ValueError(f"PodStateTrigger needs a non-empty {label}, got {value!r}")
        if not isinstance(poll_interval, int | float) or poll_interval <= 0:
            raise ValueError(
                f"PodStateTrigger poll_interval must be a positive number of seconds, got {poll_interval!r}"
            )
        self.kubernetes_conn_id = kubernetes_conn_id
        self.namespace = namespace
        self.pod_name = pod_name
        self.pod_uid = pod_uid
        self.identity = dict(identity) if identity is not None else None
        self.policy = dict(policy) if policy is not None else None
        self.history = dict(history) if history is not None else None
        self.relaunches = int(relaunches)
        self.execution_deadline = None if execution_deadline is None else float(execution_deadline)
        self.poll_interval = float(poll_interval)
        self.owned = bool(owned)
        self.target = dict(target) if target is not None else None
        if logging_interval is not None and (
            isinstance(logging_interval, bool)
            or not isinstance(logging_interval, int | float)
            or logging_interval <= 0
        ):
            raise ValueError(
                "PodStateTrigger logging_interval must be a positive number of seconds or None, "
                f"got {logging_interval!r}"
            )
        self.logging_interval = None if logging_interval is None else float(logging_interval)
        self.base_container_name = str(base_container_name)
        from airflow_k8s_retry.connection import chosen_cluster

        self.cluster = chosen_cluster(**dict(cluster)) if cluster else None
        if self.target is not None:
            from airflow_k8s_retry.triggers.target import Target

            Target.from_payload(self.target)
            if self.owned:
                raise ValueError("PodStateTrigger follows a target only with owned=False")
        # Parse early, so a bad payload fails at defer time with a clear message, not in the triggerer.
        self._identity = TryIdentity.from_payload(self.identity) if self.identity is not None else None
        from airflow_k8s_retry.classification.policy import FailurePolicy as Policy

        self._policy = Policy.from_payload(self.policy) if self.policy is not None else None
        self._config: ClusterConfig | None = None
        self._subscription: PodSubscription | None = None
        self._log_position: LogPosition | None = None
        self._seen: dict[str, Any] | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        kwargs: dict[str, Any] = {
            "kubernetes_conn_id": self.kubernetes_conn_id,
            "namespace": self.namespace,
            "pod_name": self.pod_name,
            "pod_uid": self.pod_uid,
            "identity": self.identity,
            "policy": self.policy,
            "history": self.history,
            "relaunches": self.relaunches,
            "execution_deadline": self.execution_deadline,
            "poll_interval": self.poll_interval,
            "owned": self.owned,
        }
        if self.target is not None:
            kwargs["target"] = self.target
        if self.logging_interval is not None:
            kwargs["logging_interval"] = self.logging_interval
            kwargs["base_container_name"] = self.base_container_name
        if self.cluster is not None:
            kwargs["cluster"] = self.cluster
        return CLASSPATH, kwargs

    # -- run ------------------------------------------------------------------------------------

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_k8s_retry.connection import aresolve_cluster_config

        self._config = await aresolve_cluster_config(self.kubernetes_conn_id, self.cluster)
        if self.target is not None:
            from airflow_k8s_retry.triggers.target import follow

            followed = await follow(self, self._config, self._judge)
            yield TriggerEvent(followed.to_payload())
            return
        sub = await WatchHub.current().subscribe(
            self._config,
            self.namespace,
            self.pod_name,
            self.pod_uid,
            label_selector=MANAGED_SELECTOR if self.owned else None,
            poll_interval=self.poll_interval,
        )
        self._subscription = sub
        metrics.follow_feeds(WatchHub.current())
        handed_over = False  # to the after-firing check, which follows the pod on the shared feed
        try:
            verdict = await self._follow(sub)
            metrics.time_trigger_verdict(
                verdict, self.clock.now(), self._policy, self.identity, self.namespace
            )
            what = f"{verdict.outcome.value} ({verdict.reason.value}) {verdict.message}"
            self.log.info("Pod %s/%s: %s", self.namespace, self.pod_name, what)
            await self._stop_at_the_deadline(verdict)
            event = PodEvent(
                namespace=self.namespace,
                pod_name=self.pod_name,
                pod_uid=self.pod_uid,
                verdict=verdict,
                relaunches=self.relaunches,
                log_position=self._log_position,
                seen=self._seen,
                connection=self._connection_for_a_kill(),
            )
            if self.owned and self._identity is not None and self.after_firing_check:
                keep_until_done(self._after_firing(self._identity, sub))
                handed_over = True
        finally:
            self._subscription = None
            if not handed_over:
                await sub.close()
            metrics.send_feed_gauges(WatchHub.current())
        yield TriggerEvent(event.to_payload())

    async def _stop_at_the_deadline(self, verdict: Verdict) -> None:
        """``execution_timeout`` reached: delete an owned pod now (by UID, its own grace), not when a
        worker is free to resume the task (minutes later in a busy deployment; else the worker does)."""
        from airflow_k8s_retry.classification.model import Reason

        if self.owned and self._config is not None and verdict.reason is Reason.EXECUTION_TIMEOUT:
            try:
                async with WatchHub.current().client(self._config) as kube:
                    await self._delete_after_kill(kube, "execution_timeout reached")
            except KubeError as exc:
                self.log.warning("Pod %s: not deleted at the deadline (%s)", self.pod_name, exc)

    def _connection_for_a_kill(self) -> dict[str, Any] | None:
        """What deleting the pod after a user's kill needs besides its name, namespace and UID, for
        a pod this trigger owns: the event carries it to the api-server's listener, which has no
        trigger row to read once Airflow accepted the event."""
        if not self.owned or self._identity is None:
            return None
        connection: dict[str, Any] = {"kubernetes_conn_id": self.kubernetes_conn_id}
        if self.cluster is not None:
            connection["cluster"] = dict(self.cluster)
        return connection

    def _judge(self, pod_name: str, pod_uid: str) -> PodStateTrigger:
        """The trigger that judges one pod of this trigger's target."""
        return PodStateTrigger(
            kubernetes_conn_id=self.kubernetes_conn_id,
            namespace=self.namespace,
            pod_name=pod_name,
            pod_uid=pod_uid,
            identity=None,
            policy=self.policy,
            execution_deadline=self.execution_deadline,
            poll_interval=self.poll_interval,
            owned=False,
            cluster=self.cluster,
        )

    def _tracker(self) -> PodTracker:
        return PodTracker(
            pod_uid=self.pod_uid,
            history=History.from_payload(self.history),
            policy=self._policy,
            relaunches=self.relaunches,
            execution_deadline=self.execution_deadline,
            poll_interval=self.poll_interval,
            logging_interval=self.logging_interval,
            log_container=self.base_container_name,
            started=self.clock.now(),
        )

    async def _follow(self, sub: PodSubscription) -> Verdict:
        """Perform the tracker's steps until it emits a verdict."""
        tracker = self._tracker()
        step = tracker.apply(sub.drain(), sub.events, self.clock.now())
        while True:
            await self._perform(sub, tracker, step)
            if isinstance(step, Emit):
                if step.verdict.outcome is not Outcome.SUCCEED:
                    # What a failure was judged on travels with it: the worker's report reads no API.
                    events = await sub.listed_events(self.clock)  # None: not listed in time
                    self._seen = None if events is None else snapshot.take(tracker.pod, events, self.pod_uid)
                # A container's termination message may hold anything (a Secret's value): it stays
                # out of this log line and of the event, which Airflow stores as it is.
                return withhold_termination_messages(step.verdict, tracker.pod)
            if isinstance(step, LookAgain):
                fresh, tail = await self._look(sub, step.log_tail)
                step = tracker.looked(fresh, sub.events, self.clock.now(), tail)
            else:
                step = tracker.apply(sub.drain(), sub.events, self.clock.now())

    async def _perform(self, sub: PodSubscription, tracker: PodTracker, step: Step) -> None:
        for note in step.notes:
            self.log.info("Pod %s: %s", self.pod_name, note)
        if step.remember is not None:
            await self._remember(sub, tracker, step.remember)
        if isinstance(step, Revive):
            # Follow the pod again even if the feed called it gone (it may not list it any more).
            sub.revive(step.pod)
        elif isinstance(step, ReadDirectly):
            await self._read_directly(sub)
        elif isinstance(step, FetchLogs):
            await self._stream_logs(sub, step.container)
        elif isinstance(step, ReadWorkload):
            tracker.workload_read(*await sub.kube.workload_of(self.namespace, self.pod_uid))
        elif isinstance(step, SleepUntil):
            await self._wait(sub, step.until, step.wake)

    async def _wait(self, sub: PodSubscription, until: float, wake: tuple[float, ...] = ()) -> None:
        """Until the subscription has news or the clock reaches ``until`` (or a ``wake`` time)."""
        if sub.pending:
            return
        waiters: set[asyncio.Future[Any]] = {asyncio.ensure_future(sub.wait())}
        for at in (until, *wake):
            waiters.add(asyncio.ensure_future(self.clock.sleep_until(at)))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)

    async def _read_directly(self, sub: PodSubscription) -> None:
        """No news at all for a long time: read the pod once, in case the shared feed is stuck."""
        try:
            pod = await sub.kube.read_pod(self.namespace, self.pod_name)
        except NotFound:
            sub.offer(PodChange(pod=None, deleted=True))
        except KubeError as exc:
            self.log.warning(
                "Pod %s: no news from the watch, and a direct read failed: %s", self.pod_name, exc
            )
        else:
            sub.offer(PodChange(pod=pod))

    async def _look(
        self, sub: PodSubscription, tail: LogTail | None
    ) -> tuple[dict[str, Any] | None, str | None]:
        """The last look before a failure leaves: the pod now (None when gone or unreadable), then the
        last lines of the log the tracker asked for (None: none asked, or unreadable)."""
        pod: dict[str, Any] | None = None
        try:
            pod = await sub.kube.read_pod(self.namespace, self.pod_name)
        except NotFound:
            pass
        except KubeError as exc:
            self.log.warning("Pod %s: last look failed (%s); the verdict stands", self.pod_name, exc)
        if pod is None or tail is None:
            return pod, None
        with contextlib.suppress(KubeError):
            return pod, await sub.kube.read_log(self.namespace, self.pod_name, **tail.read)
        return pod, None

    async def _stream_logs(self, sub: PodSubscription, container: str) -> None:
        """Copy the container's log lines written since the last read into this trigger's log."""
        import time

        from airflow_k8s_retry.kube.logstream import read_new

        try:
            lines, self._log_position = await read_new(
                sub.kube, self.namespace, self.pod_name, container, self._log_position, now=time.time()
            )
        except KubeError as exc:
            self.log.warning("Pod %s: could not read the log of %s (%s)", self.pod_name, container, exc)
            return
        for line in lines:
            self.log.info("[%s] %s", container, line)

    async def _remember(self, sub: PodSubscription, tracker: PodTracker, history: History) -> None:
        """Stamp the history on the pod, so a restarted trigger keeps its timers."""
        try:
            await sub.kube.patch_pod_annotations(
                self.namespace,
                self.pod_name,
                {HISTORY_ANNOTATION: encode_history(history)},
                uid=self.pod_uid,
            )
        except Forbidden as exc:
            tracker.may_annotate = False
            if self.owned:
                self.log.error(
                    "%s; grace timers are kept in memory only",
                    rbac_message(exc, "patch", "pods", self.namespace),
                )
            else:
                self.log.info(
                    "Pod %s: cannot annotate (%s); grace timers are kept in memory only", self.pod_name, exc
                )
            return
        except (NotFound, Conflict):
            return  # gone or replaced: the watch reports it
        except KubeError as exc:
            self.log.warning(
                "Pod %s: could not save the classifier history (%s); will retry", self.pod_name, exc
            )
            return
        tracker.stamped_on_pod(history)

    # -- endings --------------------------------------------------------------------------------

    async def cleanup(self) -> None:
        """Release the subscription (local resources only; the pod is never touched here)."""
        sub, self._subscription = self._subscription, None
        if sub is not None:
            await sub.close()

    async def on_kill(self) -> None:
        """Delete the pod by UID, but only once the task instance is confirmed no longer deferred.

        Airflow 3.3 re-sends the cancellation to a cancelled trigger on every state sync (about once
        a second) until the trigger has ended, and each one lands inside ``on_kill``. The state
        lookup and the delete therefore run in their own task, shielded: a repeated cancellation
        ends the wait here, not the work, which finishes on the triggerer's event loop.
        """
        await asyncio.shield(keep_until_done(self._kill()))

    async def _kill(self) -> None:
        if not self.owned or self._identity is None:
            self.log.info("Pod %s is not owned by this task; it is left alone", self.pod_name)
            return
        why = await self._killed_why(self._identity)
        if why is not None:
            await self._delete_with_retries(why)

    async def _after_firing(self, identity: TryIdentity, sub: PodSubscription) -> None:
        """The task was killed before a worker resumed it: delete the pod.

        Airflow drops an event that arrives once the task is no longer deferred (killed, cleared or
        its run deleted as the trigger fired) and an ended trigger gets no ``on_kill``; a kill while
        the event waits for a worker (``scheduled``, ``queued``) starts none either. So the state is
        read until it leaves ``deferred``, then while it waits (up to :data:`_WAITING_AT_MOST`); in a
        state only a kill leaves, what is left of the pod a minute later (unless stamped) is deleted
        as ``on_kill`` would. Another state (``running``, a new deferral, ``up_for_retry``) means a
        worker acts on the verdict; one that cannot be read before the event was accepted leaves the
        pod alone. ``sub`` follows the pod on the shared feed: once it is deleted (by the resumed
        worker, as a rule) nothing is left to read or clean up."""
        pauses = iter(_FIRED_BACKOFF)
        waiting_since: float | None = None  # when the event was seen accepted, waiting for a worker
        try:
            while (pause := self._next_look(pauses, waiting_since)) is not None:
                await self.clock.sleep_until(self.clock.now() + pause)
                if sub.gone_by_now():
                    return
                try:
                    state, why = await self._state_of(identity)
                except Exception:
                    if waiting_since is None:
                        return  # cannot tell: the worker, or the next try's sweep, decides
                    continue
                if why is not None:
                    # The kill may also have come after the worker resumed: its on_kill goes first.
                    await self.clock.sleep_until(self.clock.now() + _WORKER_FIRST)
                    await self._delete_with_retries(f"{why} after the trigger fired")
                    return
                if state == "deferred" and waiting_since is None:
                    continue
                if state not in WAITING_STATES:
                    return
                if waiting_since is None:
                    waiting_since = self.clock.now()
        finally:
            await sub.close()
            metrics.send_feed_gauges(WatchHub.current())

    def _next_look(self, pauses: Iterator[float], waiting_since: float | None) -> float | None:
        """The pause before the after-firing check's next look, or None when it stops looking:
        still ``deferred`` after :data:`_FIRED_BACKOFF` (the trigger moved, or the triggerer lost
        the event), or waiting for a worker for longer than :data:`_WAITING_AT_MOST`."""
        if waiting_since is None:
            return next(pauses, None)
        if self.clock.now() - waiting_since >= _WAITING_AT_MOST:
            return None
        return _WAITING_PAUSE

    async def _delete_with_retries(self, why: str) -> None:
        config = self._config
        if config is None:
            from airflow_k8s_retry.connection import aresolve_cluster_config

            config = await aresolve_cluster_config(self.kubernetes_conn_id, self.cluster)
        # Nothing else may delete a killed task's pod: API errors (a flapping authorizer's 403 too)
        # are retried with backoff; the work is shielded, so it outlives Airflow's on_kill bound.
        for attempt, pause in enumerate((*KILL_BACKOFF, None)):
            try:
                async with WatchHub.current().client(config) as kube:
                    await self._delete_after_kill(kube, why)
                return
            except KubeError as exc:
                if pause is not None:
                    self.log.info("Pod %s: delete after kill failed (%s); retrying", self.pod_name, exc)
                    await self.clock.sleep_until(self.clock.now() + pause)
                elif isinstance(exc, Forbidden):
                    self.log.error(
                        "Pod %s kept: %s", self.pod_name, rbac_message(exc, "delete", "pods", self.namespace)
                    )
                else:
                    self.log.warning(
                        "Pod %s: delete after kill failed %d times: %s", self.pod_name, attempt + 1, exc
                    )

    async def _state_of(self, identity: TryIdentity) -> tuple[str | None, str | None]:
        """The task instance's state and, when only a kill leaves it there (or it is gone), why its
        pod may be deleted; other lookup errors are raised."""
        lookup = type(self).task_state_lookup
        try:
            state: str | None = await within(self.clock, lookup(identity), type(self).state_lookup_timeout)
        except TaskInstanceGone as exc:
            return None, f"Task instance is gone ({exc})"
        return state, killed_why(state)

    async def _killed_why(self, identity: TryIdentity) -> str | None:
        """Why the pod may be deleted (the task instance's state), or None: it is kept."""
        try:
            state, why = await self._state_of(identity)
        except Exception as exc:
            self.log.warning(
                "Pod %s kept: could not confirm the task instance was killed (%s: %s)",
                self.pod_name,
                type(exc).__name__,
                exc,
            )
            return None
        if why is None and state == "deferred":
            self.log.info(
                "Pod %s kept: the task instance is still deferred (the trigger is moving to another "
                "triggerer, not being killed)",
                self.pod_name,
            )
        elif why is None:
            self.log.info(
                "Pod %s kept: the task instance is %s (another triggerer fired and the worker owns "
                "the pod now), not killed",
                self.pod_name,
                state,
            )
        return why

    async def _delete_after_kill(self, kube: AsyncKube, why: str) -> None:
        try:
            pod: dict[str, Any] | None = await kube.read_pod(self.namespace, self.pod_name)
        except NotFound:
            pod = None
        kept = kept_on_kill(pod, self.pod_uid)
        if kept is not None:
            self.log.info("%s: pod %s %s", why, self.pod_name, kept)
            return
        deleted = await kube.delete_pod(self.namespace, self.pod_name, self.pod_uid)
        self.log.info("%s: pod %s %s", why, self.pod_name, "deleted" if deleted else "was already gone")
