"""``PodStateTrigger``: follow one pod through the shared watch, classify every change, emit once;
and the event it emits (:class:`PodEvent`).

The operator defers to this trigger, and the sensor's :class:`~.target.PodTargetTrigger` runs one
per pod it judges. It subscribes to its pod in the triggerer's
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

The event carries what the verdict was judged on (the pod's status and its last Events, a
:class:`~airflow_k8s_retry.report.Snapshot`), so the worker's failure report needs no API reads;
containers' termination messages are withheld from the verdict and the snapshot
(:mod:`airflow_k8s_retry.report`), here, once.

The trigger never deletes a pod while it runs; the operator does that after acting on the
verdict. A kill of the deferred task is :mod:`airflow_k8s_retry.kills`' business
(:meth:`PodStateTrigger.on_kill`), and so is ``execution_timeout``'s deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import time
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_k8s_retry import metrics
from airflow_k8s_retry.classification.model import History, Outcome, Reason, Verdict
from airflow_k8s_retry.classification.policy import FailurePolicy
from airflow_k8s_retry.connection import aresolve_cluster_config, chosen_cluster
from airflow_k8s_retry.kills.policy import airflow_task_state, keep_until_done
from airflow_k8s_retry.kills.trigger import OwnedPod, TaskStateLookup, TriggerKill
from airflow_k8s_retry.kube.clock import Clock, WallClock
from airflow_k8s_retry.kube.config import ClusterConfig
from airflow_k8s_retry.kube.errors import Conflict, Forbidden, KubeError, NotFound
from airflow_k8s_retry.kube.hub import PodChange, PodSubscription, WatchHub
from airflow_k8s_retry.kube.naming import HISTORY_ANNOTATION, MANAGED_SELECTOR, TryIdentity, encode_history
from airflow_k8s_retry.kube.rbac import rbac_message
from airflow_k8s_retry.report import Snapshot, withhold_termination_messages
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

CLASSPATH = "airflow_k8s_retry.triggers.PodStateTrigger"
#: How much longer than the try's ``execution_timeout`` (or the sensor's ``timeout``) a deferral
#: may last: the trigger itself ends the wait at the deadline; Airflow's deferral timeout is only
#: the backstop.
DEFER_TIMEOUT_PADDING = timedelta(minutes=5)


def defer_timeout(deadline: float | None, now: float) -> timedelta | None:
    """A deferral's timeout at ``now``: the time left to ``deadline``, plus
    :data:`DEFER_TIMEOUT_PADDING` (``None`` without a deadline)."""
    if deadline is None:
        return None
    return timedelta(seconds=max(0.0, deadline - now)) + DEFER_TIMEOUT_PADDING


# -- where the copy of a log stopped -------------------------------------------------------------
#
# ``logging_interval`` copies the base container's new lines into the trigger's log while the pod
# runs, and the worker then writes the rest. The API has no cursor for ``pods/log``: it takes a
# relative ``sinceSeconds`` with one-second resolution, on the server's clock. So every read asks
# for a generous window with ``timestamps=true``, and the kubelet's own timestamp of each line
# decides what is new: a :class:`LogPosition` is the timestamp of the last line read and how many
# lines carried exactly that timestamp (a burst of writes can share one). Lines at or before the
# position are dropped, whatever the window returned. This assumes the kubelet's timestamps do not
# go backwards within one container's log, which holds for one stream; stdout and stderr written
# within the same instant may interleave either way.

#: Extra seconds each read reaches back beyond the position: covers the one-second resolution
#: and a clock skew between this process and the node.
WINDOW_MARGIN = 60
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")


@dataclass(frozen=True)
class LogPosition:
    """Where a log read stopped: the last line's timestamp, and the lines read with exactly it."""

    time: str
    count: int = 1

    def __post_init__(self) -> None:
        if stamp_key(self.time) is None:
            raise ValueError(f"LogPosition.time must be an RFC 3339 timestamp, got {self.time!r}")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"LogPosition.count must be a whole number >= 1, got {self.count!r}")

    @property
    def epoch(self) -> float:
        key = stamp_key(self.time)
        assert key is not None
        return key[0] + key[1] / 1e9

    def to_payload(self) -> dict[str, Any]:
        return {"time": self.time, "count": self.count}

    @classmethod
    def from_payload(cls, data: Mapping[str, Any] | None) -> LogPosition | None:
        if not data:
            return None
        return cls(time=str(data["time"]), count=int(data.get("count", 1)))


def stamp_key(text: str) -> tuple[int, int] | None:
    """``(epoch seconds, nanoseconds)`` of a kubelet timestamp, or None when ``text`` is not one."""
    match = _STAMP.match(text)
    if match is None:
        return None
    base, fraction, zone = match.groups()
    try:
        at = datetime.fromisoformat(base + ("+00:00" if zone == "Z" else zone))
    except ValueError:
        return None
    return int(at.timestamp()), int((fraction or "").ljust(9, "0"))


def new_lines(raw: str, position: LogPosition | None) -> tuple[list[str], LogPosition | None]:
    """The lines of a timestamped log read that come after ``position``, and the new position.

    Empty writes move the position but are not returned; a line without a timestamp continues the
    line before it.
    """
    after = stamp_key(position.time) if position is not None else None
    seen_at_after = position.count if position is not None else 0
    out: list[str] = []
    last: tuple[str, tuple[int, int]] | None = None
    count, fresh = 0, False
    for line in raw.split("\n"):
        stamp, _, message = line.partition(" ")
        key = stamp_key(stamp)
        if key is None:
            if fresh and line:
                out.append(line)
            continue
        if after is not None and key < after:
            fresh = False
            continue
        count = count + 1 if last is not None and last[1] == key else 1
        last = (stamp, key)
        fresh = after is None or key > after or count > seen_at_after
        if fresh and message.strip():
            out.append(message.rstrip("\r"))
    if last is None:
        return out, position
    return out, LogPosition(last[0], count)


def since_seconds(position: LogPosition | None, now: float) -> int | None:
    """The ``sinceSeconds`` that reaches back to ``position`` (None: read from the start)."""
    if position is None:
        return None
    return max(1, math.ceil(now - position.epoch) + WINDOW_MARGIN)


@dataclass(frozen=True)
class PodEvent:
    """The payload of the one ``TriggerEvent`` a :class:`PodStateTrigger` emits: what the operator's
    (and the sensor's) ``execute_complete`` act on. Plain JSON, so it passes through Airflow's
    serialization of trigger events unchanged."""

    namespace: str
    pod_name: str
    pod_uid: str
    verdict: Verdict
    relaunches: int
    #: Where the trigger's log streaming stopped (``logging_interval``); the worker writes the rest.
    log_position: LogPosition | None = None
    #: What the verdict was judged on; ``None``: not carried (a success, or too large).
    seen: Snapshot | None = None
    #: Only for a pod the task owns (deleted on a kill): ``kubernetes_conn_id`` and, when the task
    #: set any, ``cluster`` (its KPO cluster arguments), what a delete after a user's kill needs
    #: besides the pod's name, namespace and UID (the api-server's kill listener reads it while
    #: the task instance waits for a worker). ``None``: a pod kept on a kill, or not owned.
    connection: Mapping[str, Any] | None = None

    def to_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "namespace": self.namespace,
            "pod_name": self.pod_name,
            "pod_uid": self.pod_uid,
            "verdict": self.verdict.to_payload(),
            "relaunches": self.relaunches,
        }
        if self.log_position is not None:
            payload["log_position"] = self.log_position.to_payload()
        if self.seen is not None:
            payload["seen"] = self.seen.to_payload()
        if self.connection is not None:
            payload["connection"] = dict(self.connection)
        return payload

    @classmethod
    def from_payload(cls, data: Mapping[str, Any]) -> PodEvent:
        missing = [k for k in ("namespace", "pod_name", "pod_uid", "verdict") if k not in data]
        if missing:
            raise ValueError(f"not a PodStateTrigger event payload: missing {', '.join(missing)}")
        uid = str(data["pod_uid"])
        connection = data.get("connection")
        return cls(
            namespace=str(data["namespace"]),
            pod_name=str(data["pod_name"]),
            pod_uid=uid,
            verdict=Verdict.from_payload(data["verdict"]),
            relaunches=int(data.get("relaunches", 0)),
            log_position=LogPosition.from_payload(data.get("log_position")),
            seen=Snapshot.from_payload(data.get("seen"), uid),
            connection=connection if isinstance(connection, Mapping) else None,
        )


def positive_seconds(what: str, value: object, *, optional: bool = False) -> float:
    """``value`` as a positive number of seconds, or one line saying what is wrong with ``what``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        tail = " or None" if optional else ""
        raise ValueError(f"{what} must be a positive number of seconds{tail}, got {value!r}")
    return float(value)


async def until_first(*waits: Awaitable[Any], also: Iterable[asyncio.Future[Any]] = ()) -> None:
    """Until one of ``waits`` or ``also`` is done; the rest of ``waits`` is cancelled, not ``also``."""
    waiters = {asyncio.ensure_future(wait) for wait in waits}
    try:
        await asyncio.wait(waiters.union(also), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)


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
    :param logging_interval: KPO's argument: every this many seconds while ``base_container_name``
        runs, its new log lines go to the trigger's log; the event says where the copy stopped.
        ``None``: no copy while the pod runs.
    :param base_container_name: the container whose log is copied.
    :param cluster: the task's KPO cluster arguments (``in_cluster``, ``config_file``,
        ``cluster_context``) laid over the connection's, or ``None``.
    """

    #: Where "now" comes from; replace with a ``ManualClock`` in tests.
    clock: ClassVar[Clock] = WallClock()
    #: How ``on_kill`` reads the task instance's state; replace in tests.
    task_state_lookup: ClassVar[TaskStateLookup] = staticmethod(airflow_task_state)
    #: Seconds of :attr:`clock` ``on_kill`` waits for that state before it keeps the pod: a loaded
    #: triggerer's supervisor answered after over 10 s; inside Airflow's 30 s ``on_kill_timeout``.
    state_lookup_timeout: ClassVar[float] = 25.0

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
        logging_interval: float | None = None,
        base_container_name: str = "base",
        cluster: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        for label, value in (("namespace", namespace), ("pod_name", pod_name), ("pod_uid", pod_uid)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"PodStateTrigger needs a non-empty {label}, got {value!r}")
        self.kubernetes_conn_id = kubernetes_conn_id
        self.namespace = namespace
        self.pod_name = pod_name
        self.pod_uid = pod_uid
        self.identity = dict(identity) if identity is not None else None
        self.policy = dict(policy) if policy is not None else None
        self.history = dict(history) if history is not None else None
        self.relaunches = int(relaunches)
        self.execution_deadline = None if execution_deadline is None else float(execution_deadline)
        self.poll_interval = positive_seconds("PodStateTrigger poll_interval", poll_interval)
        self.owned = bool(owned)
        self.logging_interval = (
            None
            if logging_interval is None
            else positive_seconds("PodStateTrigger logging_interval", logging_interval, optional=True)
        )
        self.base_container_name = str(base_container_name)
        self.cluster = chosen_cluster(**dict(cluster)) if cluster else None
        # Parse early, so a bad payload fails at defer time with a clear message, not in the triggerer.
        self._identity = TryIdentity.from_payload(self.identity) if self.identity is not None else None
        self._policy = FailurePolicy.from_payload(self.policy) if self.policy is not None else None
        self._config: ClusterConfig | None = None
        self._subscription: PodSubscription | None = None
        self._log_position: LogPosition | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return CLASSPATH, {
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
            "logging_interval": self.logging_interval,
            "base_container_name": self.base_container_name,
            "cluster": self.cluster,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        config = await self._cluster()
        hub = WatchHub.current()
        sub = await hub.subscribe(
            config,
            self.namespace,
            self.pod_name,
            self.pod_uid,
            label_selector=MANAGED_SELECTOR if self.owned else None,
            poll_interval=self.poll_interval,
        )
        self._subscription = sub
        metrics.follow_feeds(hub)
        kill = self._kill()
        try:
            verdict, seen = await self._follow(sub)
            metrics.time_trigger_verdict(
                verdict, self.clock.now(), self._policy, self.identity, self.namespace
            )
            what = f"{verdict.outcome.value} ({verdict.reason.value}) {verdict.message}"
            self.log.info("Pod %s/%s: %s", self.namespace, self.pod_name, what)
            if kill is not None and verdict.reason is Reason.EXECUTION_TIMEOUT:
                # Delete the pod now (by UID, its own grace, API errors retried as a kill's delete
                # is), not when a worker is free to resume the task: minutes later in a busy deployment.
                await kill.delete("execution_timeout reached")
            event = PodEvent(
                namespace=self.namespace,
                pod_name=self.pod_name,
                pod_uid=self.pod_uid,
                verdict=verdict,
                relaunches=self.relaunches,
                log_position=self._log_position,
                seen=seen,
                connection=None if kill is None else self._connection_for_a_kill(),
            )
        finally:
            self._subscription = None
            await sub.close()
            metrics.send_feed_gauges(hub)
        yield TriggerEvent(event.to_payload())

    async def _cluster(self) -> ClusterConfig:
        if self._config is None:
            self._config = await aresolve_cluster_config(self.kubernetes_conn_id, self.cluster)
        return self._config

    def _kill(self) -> TriggerKill | None:
        """What a kill of the task does to the pod: nothing unless the task owns it."""
        if not self.owned or self._identity is None:
            return None
        return TriggerKill(
            OwnedPod(self.namespace, self.pod_name, self.pod_uid, self._identity),
            config=self._cluster,
            clock=self.clock,
            lookup=type(self).task_state_lookup,
            lookup_timeout=type(self).state_lookup_timeout,
            log=self.log,
        )

    def _connection_for_a_kill(self) -> dict[str, Any]:
        """What deleting the pod after a user's kill needs besides its name, namespace and UID, for
        a pod this trigger owns: the event carries it to the api-server's listener, which has no
        trigger row to read once Airflow accepted the event."""
        connection: dict[str, Any] = {"kubernetes_conn_id": self.kubernetes_conn_id}
        if self.cluster is not None:
            connection["cluster"] = dict(self.cluster)
        return connection

    async def _follow(self, sub: PodSubscription) -> tuple[Verdict, Snapshot | None]:
        """Perform the tracker's steps until it emits a verdict; the verdict (its termination
        messages withheld) and, for a failure, what it was judged on."""
        tracker = PodTracker(
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
        step = tracker.apply(sub.drain(), sub.events, self.clock.now())
        while True:
            await self._perform(sub, tracker, step)
            if isinstance(step, Emit):
                seen = None
                if step.verdict.outcome is not Outcome.SUCCEED:
                    behind = sub.events_pending
                    events = await sub.listed_events(self.clock)  # None: not listed in time
                    if behind and events is not None and tracker.gone:
                        # The pod vanished while the Events feed was behind: only its Events say
                        # why (a preemption costs no try, a deletion does). Judge with them.
                        again = tracker.apply([], events, self.clock.now())
                        if not isinstance(again, Emit) or again.verdict.reason is not step.verdict.reason:
                            step = again
                            continue
                    seen = None if events is None else Snapshot.take(tracker.pod, events, self.pod_uid)
                # A container's termination message may hold anything (a Secret's value): it stays
                # out of this log line and of the event, which Airflow stores as it is.
                return withhold_termination_messages(step.verdict, tracker.pod), seen
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
        if not sub.pending:
            await until_first(sub.wait(), *(self.clock.sleep_until(at) for at in (until, *wake)))

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
        window = since_seconds(self._log_position, time.time())
        try:
            raw = await sub.kube.read_log(
                self.namespace, self.pod_name, container=container, timestamps=True, since_seconds=window
            )
        except KubeError as exc:
            self.log.warning("Pod %s: could not read the log of %s (%s)", self.pod_name, container, exc)
            return
        lines, self._log_position = new_lines(raw, self._log_position)
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
        except (NotFound, Conflict):
            pass  # gone or replaced: the watch reports it
        except KubeError as exc:
            self.log.warning(
                "Pod %s: could not save the classifier history (%s); will retry", self.pod_name, exc
            )
        else:
            tracker.stamped_on_pod(history)

    # -- endings --------------------------------------------------------------------------------

    async def cleanup(self) -> None:
        """Release the subscription (local resources only; the pod is never touched here)."""
        sub, self._subscription = self._subscription, None
        if sub is not None:
            await sub.close()

    async def on_kill(self) -> None:
        """Delete the pod by UID, but only once the task instance is confirmed killed
        (:class:`~airflow_k8s_retry.kills.trigger.TriggerKill`).

        Airflow 3.3 re-sends the cancellation to a cancelled trigger on every state sync (about once
        a second) until the trigger has ended, and each one lands inside ``on_kill``. The state
        lookup and the delete therefore run in their own task, shielded: a repeated cancellation
        ends the wait here, not the work, which finishes on the triggerer's event loop.
        """
        kill = self._kill()
        if kill is None:
            self.log.info("Pod %s is not owned by this task; it is left alone", self.pod_name)
            return
        await asyncio.shield(keep_until_done(kill.on_kill()))
