"""``PodStateTrigger``: follow one pod through the shared watch, classify every change, emit once.

The operator and the sensor defer to this trigger. It subscribes to its pod in the triggerer's
:class:`~airflow_k8s_retry.kube.hub.WatchHub` (one watch per namespace, not one poll per pod), runs
the pure classifier on every change and whenever a grace deadline falls due (a timer, not a poll),
and emits exactly one :class:`PodEvent` carrying the verdict.

Restart safety: trigger kwargs are frozen when the task defers, so what the trigger learns later
(the first time a signal was seen, the strongest image-pull cause) is stamped on the pod as the
``airflow-k8s-retry.io/history`` annotation whenever it changes, and merged back when a trigger is
re-created in another process (the earliest first-seen time wins). A pod that already carries a
verdict stamp is finished business: its stamped verdict is emitted as it is.

The trigger never deletes a pod while it runs; the operator does that after acting on the
verdict. :meth:`PodStateTrigger.on_kill` is the one exception, and only once the task instance is
confirmed to be no longer deferred (Airflow 3.3.0-3.3.2 also call ``on_kill`` when a trigger is
merely handed to another triggerer).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_k8s_retry import metrics
from airflow_k8s_retry.classification.model import Evidence, History, Outcome, Reason, Verdict
from airflow_k8s_retry.kube.clock import Clock, WallClock
from airflow_k8s_retry.kube.config import ClusterConfig
from airflow_k8s_retry.kube.errors import Conflict, Forbidden, KubeError, NotFound
from airflow_k8s_retry.kube.hub import PodChange, PodSubscription, WatchHub
from airflow_k8s_retry.kube.naming import (
    HISTORY_ANNOTATION,
    MANAGED_SELECTOR,
    VERDICT_ANNOTATION,
    TryIdentity,
)
from airflow_k8s_retry.kube.rbac import rbac_message

CLASSPATH = "airflow_k8s_retry.triggers.PodStateTrigger"
#: Outcomes that get a last look at the pod before they are emitted.
_LOOK_AGAIN = frozenset({Outcome.RETRY, Outcome.FAIL, Outcome.RELAUNCH})
#: Without any news about the pod for this long, read it directly once (the feed may be stuck).
_QUIET_LIMIT = 300.0
#: How long ``on_kill`` may spend reading the task state before it gives up and keeps the pod.
_STATE_LOOKUP_TIMEOUT = 10.0
#: Task instance states only a user action (or a cleared / deleted run) produces while the task is
#: deferred: ``on_kill`` deletes the pod in these. In every other state (``deferred``: the trigger
#: is moving to another triggerer; ``scheduled``, ``queued``, ``running``: another triggerer fired
#: and the worker is acting on the verdict; ``up_for_retry``, ``restarting``) the pod belongs to
#: someone else now, and the next try's sweep removes anything left over.
_KILLED_STATES = frozenset({"failed", "success", "skipped", "upstream_failed", "removed", None})
#: How long past its termination grace a disrupted pod may still run before RELAUNCH fires anyway
#: (a lost node never reports its containers stopped).
_RELAUNCH_HOLD_PADDING = 30.0

#: ``on_kill`` work that outlived the cancelled ``on_kill`` call; referenced here until it is done.
#: Pauses between on_kill's attempts to read and delete the pod of a killed task (seconds).
_KILL_BACKOFF = (0.5, 1.0, 2.0, 4.0)
_KILL_WORK: set[asyncio.Future[None]] = set()

TaskStateLookup = Callable[[TryIdentity], Awaitable[str | None]]


class TaskInstanceGone(LookupError):
    """The task instance no longer exists: its DAG run (or DAG) was deleted."""


@dataclass(frozen=True)
class PodEvent:
    """The payload of the one ``TriggerEvent`` a :class:`PodStateTrigger` emits."""

    namespace: str
    pod_name: str
    pod_uid: str
    verdict: Verdict
    relaunches: int

    def to_payload(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "pod_name": self.pod_name,
            "pod_uid": self.pod_uid,
            "verdict": self.verdict.to_payload(),
            "relaunches": self.relaunches,
        }

    @classmethod
    def from_payload(cls, data: Mapping[str, Any]) -> PodEvent:
        missing = [k for k in ("namespace", "pod_name", "pod_uid", "verdict") if k not in data]
        if missing:
            raise ValueError(f"not a PodStateTrigger event payload: missing {', '.join(missing)}")
        return cls(
            namespace=str(data["namespace"]),
            pod_name=str(data["pod_name"]),
            pod_uid=str(data["pod_uid"]),
            verdict=Verdict.from_payload(data["verdict"]),
            relaunches=int(data.get("relaunches", 0)),
        )


async def airflow_task_state(identity: TryIdentity) -> str | None:
    """The task instance's current state, read through the Task SDK (works inside the triggerer).

    Raises :class:`TaskInstanceGone` when Airflow answers without this task instance (its DAG run
    was deleted: the execution API then returns an empty map), and any other exception when the
    state cannot be read; the caller decides what that means.
    """
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance
    from asgiref.sync import sync_to_async

    map_index = identity.map_index if identity.map_index >= 0 else None
    states = await sync_to_async(RuntimeTaskInstance.get_task_states)(
        dag_id=identity.dag_id,
        map_index=map_index,
        task_ids=[identity.task_id],
        run_ids=[identity.run_id],
    )
    per_run = dict(states.get(identity.run_id) or {})
    key = identity.task_id if map_index is None else f"{identity.task_id}_{map_index}"
    if key not in per_run:
        raise TaskInstanceGone(f"no task instance {identity.dag_id}.{key} in run {identity.run_id}")
    state = per_run[key]
    return None if state is None else str(getattr(state, "value", state))


def stamped_verdict(pod: Mapping[str, Any] | None) -> Verdict | None:
    """The verdict this package stamped on ``pod``, if any (unreadable stamps count as none)."""
    if not pod:
        return None
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(VERDICT_ANNOTATION)
    if not raw:
        return None
    try:
        return Verdict.from_payload(json.loads(raw))
    except (ValueError, KeyError, TypeError):
        return None


def stamped_history(pod: Mapping[str, Any] | None) -> History | None:
    """The classifier history stamped on ``pod`` by an earlier trigger, if any."""
    if not pod:
        return None
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(HISTORY_ANNOTATION)
    if not raw:
        return None
    try:
        return History.from_payload(json.loads(raw))
    except (ValueError, KeyError, TypeError):
        return None


def merge_histories(first: History, second: History | None) -> History:
    """Combine two memories of the same pod: per signal the earliest first-seen time wins."""
    if second is None:
        return first
    seen = dict(first.first_seen)
    for key, at in second.first_seen.items():
        seen[key] = min(at, seen.get(key, at))
    strongest = first.strongest or second.strongest
    if first.strongest and second.strongest and second.strongest.seen_at < first.strongest.seen_at:
        strongest = second.strongest
    return History(first_seen=seen, strongest=strongest)


def _uid_of(pod: Mapping[str, Any] | None) -> str | None:
    uid = ((pod or {}).get("metadata") or {}).get("uid")
    return str(uid) if uid else None


def _rv_of(pod: Mapping[str, Any] | None) -> str | None:
    rv = ((pod or {}).get("metadata") or {}).get("resourceVersion")
    return str(rv) if rv else None


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
    :param target: ``Target.to_payload()`` (:mod:`airflow_k8s_retry.following`) for a sensor that
        waits for a pod by name, the newest pod of a label selector, or a Job: the trigger follows
        the target (``pod_name`` and ``pod_uid`` are then empty) and emits a ``TargetEvent``.
        Serialized only when given, so an operator's trigger kwargs stay as they were.
    """

    #: Where "now" comes from; replace with a ``ManualClock`` in tests.
    clock: ClassVar[Clock] = WallClock()
    #: How ``on_kill`` reads the task instance's state; replace in tests.
    task_state_lookup: ClassVar[TaskStateLookup] = staticmethod(airflow_task_state)

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
        if self.target is not None:
            from airflow_k8s_retry.following import Target

            Target.from_payload(self.target)
            if self.owned:
                raise ValueError("PodStateTrigger follows a target only with owned=False")
        # Parse early, so a bad payload fails at defer time with a clear message, not in the triggerer.
        self._identity = TryIdentity.from_payload(self.identity) if self.identity is not None else None
        self._policy = _load_policy(self.policy)
        self._config: ClusterConfig | None = None
        self._subscription: PodSubscription | None = None
        self._stamped: dict[str, Any] | None = None
        self._may_annotate = True
        self._relaunch_seen: float | None = None

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
        return CLASSPATH, kwargs

    # -- run ------------------------------------------------------------------------------------

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_k8s_retry.connection import aresolve_cluster_config

        self._config = await aresolve_cluster_config(self.kubernetes_conn_id)
        if self.target is not None:
            from airflow_k8s_retry.following import follow

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
        try:
            verdict = await self._decide(sub)
        finally:
            self._subscription = None
            await sub.close()
            metrics.send_feed_gauges(WatchHub.current())
        metrics.time_trigger_verdict(verdict, self.clock.now(), self._policy, self.identity, self.namespace)
        self.log.info(
            "Pod %s/%s: %s (%s) %s",
            self.namespace,
            self.pod_name,
            verdict.outcome.value,
            verdict.reason.value,
            verdict.message,
        )
        event = PodEvent(
            namespace=self.namespace,
            pod_name=self.pod_name,
            pod_uid=self.pod_uid,
            verdict=verdict,
            relaunches=self.relaunches,
        )
        yield TriggerEvent(event.to_payload())

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
        )

    async def _decide(self, sub: PodSubscription) -> Verdict:
        """Classify every change and every due deadline until a verdict survives the last look."""
        from airflow_k8s_retry.classification import classify

        clock = self.clock
        history = History.from_payload(self.history)
        pod: dict[str, Any] | None = None
        gone = False
        observed = False
        merged = False
        wake_at: float | None = None
        quiet_since = clock.now()
        while True:
            changes = sub.drain()
            for index, change in enumerate(changes):
                if change.deleted:
                    gone = True
                    if change.pod is not None and _uid_of(change.pod) in (None, self.pod_uid):
                        pod = change.pod
                elif change.pod is not None:
                    if pod is not None and _is_older(change.pod, pod):
                        continue  # the watch catching up with a state the last look already saw
                    pod = change.pod
                observed = True
                stamp = stamped_verdict(pod)
                if stamp is not None:
                    self.log.info("Pod %s already carries a verdict; emitting it", self.pod_name)
                    return stamp
                if not merged and pod is not None and not gone:
                    history = merge_histories(history, stamped_history(pod))
                    self._stamped = _history_payload(stamped_history(pod))
                    merged = True
                if index < len(changes) - 1 and not gone:
                    # Earlier states still count as evidence (a decaying pull message, a first-seen time).
                    history = classify(
                        pod,
                        sub.events,
                        history,
                        now=clock.now(),
                        policy=self._policy,
                        relaunches=self.relaunches,
                    ).history
            if changes or sub.events_changed:
                quiet_since = clock.now()

            if observed:
                now = clock.now()
                verdict = (
                    classify(
                        pod, sub.events, history, now=now, policy=self._policy, relaunches=self.relaunches
                    )
                    if pod is not None
                    else None
                )
                if gone and (verdict is None or not verdict.outcome.is_final):
                    # Gone: its last state decides if it was final (a preemption, a finished run);
                    # otherwise the pod was taken away under a running task.
                    verdict = classify(
                        None,
                        sub.events,
                        verdict.history if verdict else history,
                        now=now,
                        policy=self._policy,
                        relaunches=self.relaunches,
                    )
                assert verdict is not None
                history = verdict.history
                hold = None if gone else self._relaunch_hold(verdict, pod, now)
                if not verdict.outcome.is_final:
                    await self._remember(sub, history)
                if verdict.outcome.is_final and hold is None:
                    final, fresh = await self._last_look(sub, verdict)
                    if final is not None:
                        return final
                    pod, gone = fresh, False
                    continue
                if self.execution_deadline is not None and now >= self.execution_deadline:
                    return self._timed_out(verdict, now)
                wake_at = hold if hold is not None else verdict.deadline
            elif self.execution_deadline is not None and clock.now() >= self.execution_deadline:
                return self._timed_out(None, clock.now())

            quiet_limit = max(_QUIET_LIMIT, 3 * self.poll_interval)
            timers = [t for t in (wake_at, self.execution_deadline) if t is not None]
            if not observed:
                timers.append(quiet_since + quiet_limit)
            await self._wait(sub, min(timers) if timers else None)
            if not sub.pending and clock.now() >= quiet_since + quiet_limit:
                # A timer fell due and the feed has said nothing about this pod for a long while:
                # it may be stuck (a watch a proxy broke, a label edited off the selector, RBAC),
                # so read the pod itself instead of re-judging what the feed last said.
                await self._read_directly(sub)
                quiet_since = clock.now()

    async def _wait(self, sub: PodSubscription, until: float | None) -> None:
        """Until the subscription has news or the clock reaches ``until``."""
        if sub.pending:
            return
        news = asyncio.ensure_future(sub.wait())
        waiters: set[asyncio.Future[Any]] = {news}
        if until is not None:
            waiters.add(asyncio.ensure_future(self.clock.sleep_until(until)))
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

    async def _last_look(self, sub: PodSubscription, verdict: Verdict) -> tuple[Verdict | None, Any]:
        """Read the pod once more before a failure leaves; withdraw it if the pod recovered.

        Returns ``(verdict to emit, None)``, or ``(None, fresh pod)`` when the verdict is withdrawn.
        """
        from airflow_k8s_retry.classification import classify

        if verdict.outcome not in _LOOK_AGAIN:
            return verdict, None
        try:
            fresh: dict[str, Any] | None = await sub.kube.read_pod(self.namespace, self.pod_name)
        except NotFound:
            fresh = None
        except KubeError as exc:
            self.log.warning("Pod %s: last look failed (%s); the verdict stands", self.pod_name, exc)
            return verdict, None
        if fresh is None or _uid_of(fresh) != self.pod_uid:
            return verdict, None
        stamp = stamped_verdict(fresh)
        if stamp is not None:
            return stamp, None
        again = classify(
            fresh,
            sub.events,
            verdict.history,
            now=self.clock.now(),
            policy=self._policy,
            relaunches=self.relaunches,
        )
        if again.outcome is Outcome.WAIT or self._relaunch_hold(again, fresh, self.clock.now()) is not None:
            self.log.info(
                "Pod %s: %s withdrawn, the pod is %s now (%s)",
                self.pod_name,
                verdict.reason.value,
                again.reason.value,
                again.message,
            )
            # Follow the pod again even if the feed called it gone (it may not list it any more).
            sub.revive(fresh)
            return None, fresh
        return again, None

    def _relaunch_hold(self, verdict: Verdict, pod: Mapping[str, Any] | None, now: float) -> float | None:
        """Until when a RELAUNCH waits for the disrupted pod's containers to stop; None: emit now.

        Preemption, a drain or taint-based eviction mark the pod (``DisruptionTarget``) before its
        graceful termination: the old container may run for ``terminationGracePeriodSeconds``
        more, and a replacement started now would run beside it. So RELAUNCH waits until the pod
        is gone or no container runs, bounded by the grace plus a margin: a lost node never
        reports its containers stopped.
        """
        if verdict.outcome is not Outcome.RELAUNCH or pod is None or not _containers_running(pod):
            self._relaunch_seen = None
            return None
        if self._relaunch_seen is None:
            self._relaunch_seen = now
            self.log.info(
                "Pod %s: %s; waiting for its containers to stop before the relaunch (at most %.0f s)",
                self.pod_name,
                verdict.reason.value,
                _termination_grace(pod) + _RELAUNCH_HOLD_PADDING,
            )
        until = self._relaunch_seen + _termination_grace(pod) + _RELAUNCH_HOLD_PADDING
        return until if now < until else None

    def _timed_out(self, last: Verdict | None, now: float) -> Verdict:
        assert self.execution_deadline is not None
        overdue = now - self.execution_deadline
        state = f"; the pod was {last.reason.value}" if last is not None else ""
        message = f"execution_timeout reached ({overdue:.0f} s past the deadline){state}"
        return Verdict(
            outcome=Outcome.RETRY,
            reason=Reason.EXECUTION_TIMEOUT,
            message=message,
            rule="execution_timeout",
            evidence=(
                Evidence(reason=Reason.EXECUTION_TIMEOUT, source="trigger", message=message, seen_at=now),
            ),
            history=last.history if last is not None else History.from_payload(self.history),
        )

    async def _remember(self, sub: PodSubscription, history: History) -> None:
        """Stamp the history on the pod when it changed, so a restarted trigger keeps its timers."""
        payload = _history_payload(history)
        if not self._may_annotate or payload == self._stamped or not history.first_seen:
            return
        try:
            await sub.kube.patch_pod_annotations(
                self.namespace,
                self.pod_name,
                {HISTORY_ANNOTATION: json.dumps(payload, sort_keys=True)},
                uid=self.pod_uid,
            )
        except Forbidden as exc:
            self._may_annotate = False
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
        self._stamped = payload

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
        work = asyncio.ensure_future(self._kill())
        _KILL_WORK.add(work)
        work.add_done_callback(_KILL_WORK.discard)
        await asyncio.shield(work)

    async def _kill(self) -> None:
        if not self.owned or self._identity is None:
            self.log.info("Pod %s is not owned by this task; it is left alone", self.pod_name)
            return
        lookup = type(self).task_state_lookup
        try:
            state: str | None = await asyncio.wait_for(lookup(self._identity), _STATE_LOOKUP_TIMEOUT)
        except TaskInstanceGone as exc:
            state, why = None, f"Task instance is gone ({exc})"
        except Exception as exc:
            self.log.warning(
                "Pod %s kept: could not confirm the task instance was killed (%s: %s)",
                self.pod_name,
                type(exc).__name__,
                exc,
            )
            return
        else:
            why = f"Task instance is {state or 'cleared'}"
        if state == "deferred":
            self.log.info(
                "Pod %s kept: the task instance is still deferred (the trigger is moving to another "
                "triggerer, not being killed)",
                self.pod_name,
            )
            return
        if state not in _KILLED_STATES:
            self.log.info(
                "Pod %s kept: the task instance is %s (another triggerer fired and the worker owns "
                "the pod now), not killed",
                self.pod_name,
                state,
            )
            return
        config = self._config
        if config is None:
            from airflow_k8s_retry.connection import aresolve_cluster_config

            config = await aresolve_cluster_config(self.kubernetes_conn_id)
        await self._delete_with_retries(config, why)

    async def _delete_with_retries(self, config: Any, why: str) -> None:
        """Nothing else deletes a killed task's pod: API errors (a flapping authorizer's 403 too)
        are retried with backoff, well inside Airflow's 30 s for ``on_kill``."""
        for attempt, pause in enumerate((*_KILL_BACKOFF, None)):
            try:
                await self._delete_unless_finished(config, why)
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

    async def _delete_unless_finished(self, config: Any, why: str) -> None:
        async with WatchHub.current().client(config) as kube:
            try:
                pod: dict[str, Any] | None = await kube.read_pod(self.namespace, self.pod_name)
            except NotFound:
                pod = None
            if pod is None or _uid_of(pod) != self.pod_uid:
                self.log.info("%s: pod %s was already gone", why, self.pod_name)
                return
            if stamped_verdict(pod) is not None:
                # Finished business: the worker acted on a verdict and kept (or is deleting) it.
                self.log.info("%s: pod %s carries a verdict; left to the worker", why, self.pod_name)
                return
            deleted = await kube.delete_pod(self.namespace, self.pod_name, self.pod_uid)
        self.log.info("%s: pod %s %s", why, self.pod_name, "deleted" if deleted else "was already gone")


def _load_policy(payload: Mapping[str, Any] | None) -> Any:
    if payload is None:
        return None
    from airflow_k8s_retry.classification import FailurePolicy

    return FailurePolicy.from_payload(payload)


def _history_payload(history: History | None) -> dict[str, Any] | None:
    return None if history is None else history.to_payload()


def _containers_running(pod: Mapping[str, Any]) -> bool:
    """True while any container of ``pod`` is reported running."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return False
    for group in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for container in status.get(group) or []:
            if "running" in ((container or {}).get("state") or {}):
                return True
    return False


def _termination_grace(pod: Mapping[str, Any]) -> float:
    """The seconds the kubelet gives the pod's containers to stop (30 unless the spec says)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    for value in (meta.get("deletionGracePeriodSeconds"), spec.get("terminationGracePeriodSeconds")):
        if isinstance(value, int | float) and value >= 0:
            return float(value)
    return 30.0


def _is_older(candidate: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    new, old = _rv_of(candidate), _rv_of(current)
    return bool(new and old and new.isdigit() and old.isdigit() and int(new) < int(old))
