"""``PodTracker``: what the trigger decides about one pod, as a pure state machine.

The trigger's I/O (the shared watch, direct reads, annotations, log reads, sleeping) is in
:mod:`airflow_k8s_retry.triggers`; every decision is here. The trigger feeds the tracker what it
received (pod changes, the pod's Events, the time) and performs the :class:`Step` it gets back:

* :class:`Emit`: the verdict to send; the tracker is done.
* :class:`LookAgain`: read the pod once more before a failure leaves (:meth:`PodTracker.looked`),
  and the failed container's last log lines where they may say why (``exec format error``).
* :class:`Revive`: the last look withdrew the verdict; follow the pod again.
* :class:`ReadDirectly`: the feed has said nothing for a long while; read the pod itself.
* :class:`FetchLogs`: stream the base container's new log lines (``logging_interval``).
* :class:`ReadWorkload`: a gate note is due on a pod Kueue holds: read its Workload first
  (:meth:`PodTracker.workload_read`; :mod:`.queues`).
* :class:`SleepUntil`: wait for news or the time; ``wake`` lists extra wake-ups (a progress
  line, the next log read) that change nothing unless they fall due.

Any step may carry a history to ``remember`` (stamp on the pod before performing it) and
``notes`` (lines for the trigger's log). Like the classifier, this has no I/O, no clock and no
global state: the caller passes the time, so tests drive it with plain numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from airflow_k8s_retry.classification import FailurePolicy, classify
from airflow_k8s_retry.classification.classifier import trace
from airflow_k8s_retry.classification.model import Evidence, History, Outcome, Reason, Verdict
from airflow_k8s_retry.classification.policy import DEFAULT_POLICY
from airflow_k8s_retry.classification.rules import RULES
from airflow_k8s_retry.kube.naming import read_history, read_stamp
from airflow_k8s_retry.kube.ordering import event_time, is_older
from airflow_k8s_retry.triggers import queues

Json = dict[str, Any]

#: Outcomes that get a last look at the pod before they are emitted.
LOOK_AGAIN = frozenset({Outcome.RETRY, Outcome.FAIL, Outcome.RELAUNCH})
#: Without any news about the pod for this long, read it directly once (the feed may be stuck).
QUIET_LIMIT = 300.0
#: How long past its termination grace a disrupted pod may still run before RELAUNCH fires anyway
#: (a lost node never reports its containers stopped).
RELAUNCH_HOLD_PADDING = 30.0
#: While a grace runs, one line this often says what is awaited and until when.
GRACE_NOTE_EVERY = 60.0
#: How long (on the trigger's clock) a history change may wait to be stamped when it bears on no
#: running grace timer but one of :data:`SETTLING_RULES` (see :meth:`PodTracker._to_remember`).
HISTORY_SETTLE = 5.0
#: Rules whose timer is written with the next change, at most :data:`HISTORY_SETTLE` later: a pod
#: is pending for a moment before anything is known about it, and the signal that follows (a pull
#: error, a missing secret, the pod running) usually comes within that moment; the generic pull
#: back-off is usually followed by the Event that names its cause (a trigger that starts on a pod
#: already backing off lists the pods before the Events). Both timers are minutes long.
SETTLING_RULES = frozenset({"starting", "image_pull_backoff"})
#: Seconds a node-loss Event may postdate the newest time in the last state seen of a pod that
#: vanished unseen (:attr:`Change.unseen`) and still count. After an API-server outage longer than
#: the node-monitor grace period the node controller marks nodes NotReady and records the Event for
#: every pod in its stale cache, pods deleted meanwhile among them: one dated well after anything
#: the pod went through is about the outage, not the pod. The margin covers clock skew between the
#: kubelet and the control plane, and a node lost a moment after the last state.
NODE_LOSS_MARGIN = 10.0
#: The Events that say a vanished pod's node was lost (the classifier's ``gone_after_node_lost``).
NODE_LOSS_EVENTS = frozenset({"NodeNotReady"})

_GRACE_RULES = frozenset(rule.name for rule in RULES if rule.outcome is not Outcome.WAIT and rule.grace)
#: The rule of a pod held by scheduling gates: its note says more, and less often (:mod:`.queues`).
QUEUED_RULE = "scheduling_gated"
#: A failure resting on a container's exit may have its cause in its log only (``exec format error``).
LOG_TAIL_REASONS = frozenset({Reason.CONTAINER_EXIT_CODE, Reason.CONTAINER_CREATE_ERROR})
LOG_TAIL_LINES = 20


@dataclass(frozen=True, kw_only=True)
class Step:
    """One decision of the tracker, with the ``remember`` and ``notes`` every step may carry."""

    remember: History | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Emit(Step):
    verdict: Verdict


@dataclass(frozen=True)
class LogTail:
    """Which log the last look reads: a container's current run, or (``previous``) the one before."""

    container: str
    previous: bool = False

    @property
    def read(self) -> dict[str, Any]:
        """The arguments of the log read (``AsyncKube.read_log``)."""
        return {"container": self.container, "tail_lines": LOG_TAIL_LINES, "previous": self.previous}


@dataclass(frozen=True, kw_only=True)
class LookAgain(Step):
    verdict: Verdict
    #: Also read this log's last :data:`LOG_TAIL_LINES` lines, and pass them to :meth:`PodTracker.looked`.
    log_tail: LogTail | None = None


@dataclass(frozen=True, kw_only=True)
class Revive(Step):
    pod: Json


@dataclass(frozen=True, kw_only=True)
class ReadDirectly(Step):
    pass


@dataclass(frozen=True, kw_only=True)
class FetchLogs(Step):
    container: str


@dataclass(frozen=True, kw_only=True)
class ReadWorkload(Step):
    """Read the Kueue Workload of the pod (by its UID), then pass it to :meth:`PodTracker.workload_read`."""


@dataclass(frozen=True, kw_only=True)
class SleepUntil(Step):
    until: float
    wake: tuple[float, ...] = ()


class Change(Protocol):
    """A new state of the pod, as the watch hub delivers it (a
    :class:`~airflow_k8s_retry.kube.subscriptions.PodChange`, which says what its fields mean)."""

    @property
    def pod(self) -> Json | None: ...

    @property
    def deleted(self) -> bool: ...

    @property
    def unseen(self) -> bool: ...


def stamped_verdict(pod: Mapping[str, Any] | None) -> Verdict | None:
    """The verdict this package stamped on ``pod``, if any (unreadable stamps count as none)."""
    found = read_stamp(pod)
    return found.verdict if found is not None else None


def retry_verdict(
    reason: Reason,
    message: str,
    rule: str,
    *,
    source: str = "trigger",
    seen_at: float = 0.0,
    history: History | None = None,
) -> Verdict:
    """A retry the trigger decides itself (a deadline passed, a Job ended), its message its evidence."""
    evidence = (Evidence(reason=reason, source=source, message=message, seen_at=seen_at),)
    return Verdict(Outcome.RETRY, reason, message, rule, evidence=evidence, history=history or History())


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


@dataclass
class PodTracker:
    """The decisions about one pod: feed it with :meth:`apply` (and :meth:`looked` after a
    :class:`LookAgain`), perform the step it returns, and repeat until it returns :class:`Emit`.

    :param pod_uid: the pod's UID; a pod of the same name with another UID is not this pod.
    :param history: the history known when the task deferred.
    :param policy: the DAG author's changes to the default rules.
    :param relaunches: fresh pods already started in this try.
    :param execution_deadline: epoch seconds; past it the verdict is ``execution.timeout``.
    :param poll_interval: the feed's safety poll; the quiet limit is at least three of them.
    :param logging_interval: seconds between log reads while ``log_container`` runs; None: none.
    :param log_container: the container whose log is streamed (KPO's ``base_container_name``).
    :param started: the time the trigger started (the quiet limit counts from it).
    :param history_settle: :data:`HISTORY_SETTLE` (0: every change is stamped at once).
    """

    pod_uid: str
    history: History = field(default_factory=History)
    policy: FailurePolicy | None = None
    relaunches: int = 0
    execution_deadline: float | None = None
    poll_interval: float = 10.0
    logging_interval: float | None = None
    log_container: str = "base"
    started: float = 0.0
    history_settle: float = HISTORY_SETTLE
    #: Whether annotating the pod is allowed (set False after a 403) and what it carries now.
    may_annotate: bool = True
    stamped: Json | None = None

    def __post_init__(self) -> None:
        # A queue with no deadline of its own waits until the task's: the trigger enforces that one.
        policy = self.policy or DEFAULT_POLICY
        self.judging = policy.until_execution_timeout() if self.execution_deadline is not None else policy
        self.initial_history = self.history
        self.pod: Json | None = None
        self.gone = False
        self.unseen = False  # gone while the feed could not see it (Change.unseen)
        self.observed = False
        self.merged = False
        self.quiet_since = self.started
        self.quiet_limit = max(QUIET_LIMIT, 3 * self.poll_interval)
        self.events: list[Json] = []
        self.due = float("inf")  # the soonest decision timer asked for in the last SleepUntil
        self.relaunch_seen: float | None = None
        self.looking: Verdict | None = None
        self.waiting: Verdict | None = None  # the verdict the current sleep waits on
        self.note_at: float | None = None
        self.logs_at: float | None = None
        #: Since when the history differs from what is stamped on the pod (None: it does not).
        self.unsaved_since: float | None = None
        #: The last lines of failed containers' logs, read with a last look (container -> text).
        self.log_tails: dict[str, str] = {}
        self.tail_asked: LogTail | None = None
        #: Whether Kueue's Workloads may be read (a 403 or 404 ends it), and the last one's summary
        #: with the gate note it was read for.
        self.may_read_workloads = True
        self.workload: str | None = None
        self.workload_for: float | None = None

    # -- the decisions --------------------------------------------------------------------------

    def apply(self, changes: Sequence[Change], events: Sequence[Json], now: float) -> Step:
        """Take what arrived since the last call (oldest first) and decide what to do next."""
        news = bool(changes) or list(events) != self.events
        self.events = list(events)
        if not changes and now >= self.due and now >= self.quiet_since + self.quiet_limit:
            # A timer fell due and the pods feed has said nothing about this pod for a long while:
            # it may be stuck (a watch a proxy broke, a label edited off the selector, RBAC), so
            # read the pod itself instead of re-judging what the feed last said. Events that
            # arrived meanwhile come from another feed and say nothing of the pod's state.
            self.quiet_since = now
            return ReadDirectly()
        stamp = self._take(changes, now)
        if stamp is not None:
            return Emit(verdict=stamp, notes=("already carries a verdict; emitting it",))
        if changes:
            self.quiet_since = now
        if self.logs_at is not None and now >= self.logs_at and self._log_container_runs():
            self.logs_at = now + float(self.logging_interval or 0)
            return FetchLogs(container=self.log_container)
        if not self.observed:
            if self._overdue(now):
                return Emit(verdict=self._timed_out(None, now))
            return self._sleep([self.execution_deadline, self.quiet_since + self.quiet_limit], now)
        if not news and now < self.due and self.waiting is not None:
            # An extra wake-up (a progress line, a log read), not a timer of the verdict: judging
            # again would move a running pod's re-check deadline with every log read.
            if self._workload_due(self.waiting, now):
                return ReadWorkload()
            note = self._grace_note(self.waiting, now)
            remember = self._to_remember(self.waiting, now)
            return self._sleep([self.due], now, remember=remember, notes=[note] if note else [])
        return self._judge(now)

    def looked(
        self, fresh: Json | None, events: Sequence[Json], now: float, log_tail: str | None = None
    ) -> Step:
        """The result of the last look (``None``: gone, or the read failed): emit or withdraw;
        ``log_tail``: the last lines of the log the :class:`LookAgain` asked for, if read."""
        verdict, self.looking = self.looking, None
        self.events = list(events)
        assert verdict is not None, "looked() answers a LookAgain step"
        if log_tail is not None and self.tail_asked is not None:
            self.log_tails[self.tail_asked.container] = log_tail
        if fresh is None or _uid_of(fresh) != self.pod_uid:
            return Emit(verdict=verdict)
        self.pod = fresh  # what the verdict that follows is judged on
        stamp = stamped_verdict(fresh)
        if stamp is not None:
            return Emit(verdict=stamp)
        again = self._classify(fresh, verdict.history, now)
        notes: list[str] = []
        if again.outcome is Outcome.WAIT or self._relaunch_hold(again, fresh, now, notes) is not None:
            notes.append(
                f"{verdict.reason.value} withdrawn, the pod is {again.reason.value} now ({again.message})"
            )
            self.gone = self.unseen = False
            return Revive(pod=fresh, notes=tuple(notes))
        return Emit(verdict=again, notes=tuple(notes))

    def workload_read(self, workload: Json | None, readable: bool = True) -> None:
        """The answer to a :class:`ReadWorkload`: the pod's Kueue Workload (``None``: none yet, or the
        read failed for now); ``readable`` False (a 403, or no Workload API: no Kueue) ends the reads."""
        self.may_read_workloads = readable
        self.workload = queues.workload_summary(workload) if workload is not None else None
        self.workload_for = self.note_at

    def stamped_on_pod(self, history: History) -> None:
        """The trigger stamped ``history`` on the pod (a :class:`Step`'s ``remember``)."""
        self.stamped = history.to_payload()
        self.unsaved_since = None

    # -- the parts ------------------------------------------------------------------------------

    def _take(self, changes: Sequence[Change], now: float) -> Verdict | None:
        """Fold the changes into the tracked state; a verdict stamp found on the pod ends it."""
        for index, change in enumerate(changes):
            if change.deleted:
                self.gone = True
                self.unseen = change.unseen
                if change.pod is not None and _uid_of(change.pod) in (None, self.pod_uid):
                    self.pod = change.pod
            elif change.pod is not None:
                if self.pod is not None and is_older(change.pod, self.pod):
                    continue  # the watch catching up with a state the last look already saw
                self.pod = change.pod
            self.observed = True
            stamp = stamped_verdict(self.pod)
            if stamp is not None:
                return stamp
            if not self.merged and self.pod is not None and not self.gone:
                earlier = read_history(self.pod)
                self.history = merge_histories(self.history, earlier)
                self.stamped = None if earlier is None else earlier.to_payload()
                self.merged = True
            if index < len(changes) - 1 and not self.gone:
                # Earlier states still count as evidence (a decaying pull message, a first-seen time).
                self.history = self._classify(self.pod, self.history, now).history
        return None

    def _judge(self, now: float) -> Step:
        verdict = self._classify(self.pod, self.history, now) if self.pod is not None else None
        if self.gone and (verdict is None or not verdict.outcome.is_final):
            # Gone: its last state decides if it was final (a preemption, a finished run);
            # otherwise the pod was taken away under a running task.
            verdict = self._classify(None, verdict.history if verdict else self.history, now)
        assert verdict is not None  # observed: a pod, or gone
        self.history = verdict.history
        notes: list[str] = []
        hold = None if self.gone else self._relaunch_hold(verdict, self.pod, now, notes)
        if verdict.outcome.is_final and hold is None:
            if verdict.outcome in LOOK_AGAIN:
                self.looking, self.tail_asked = verdict, self._log_tail_for(verdict)
                return LookAgain(verdict=verdict, notes=tuple(notes), log_tail=self.tail_asked)
            return Emit(verdict=verdict, notes=tuple(notes))
        if self._overdue(now):
            remember = None if verdict.outcome.is_final else self._to_remember(None, now)
            return Emit(verdict=self._timed_out(verdict, now), remember=remember, notes=tuple(notes))
        if self._workload_due(verdict, now):
            return ReadWorkload()  # then judged again, with the Workload's word for the note
        remember = None if verdict.outcome.is_final else self._to_remember(verdict, now)
        note = self._grace_note(verdict, now)
        if note:
            notes.append(note)
        self.waiting = verdict
        wake_at = hold if hold is not None else verdict.deadline
        return self._sleep([wake_at, self.execution_deadline], now, remember=remember, notes=notes)

    def _sleep(
        self,
        timers: Sequence[float | None],
        now: float,
        *,
        remember: History | None = None,
        notes: Sequence[str] = (),
    ) -> SleepUntil:
        self.due = min(t for t in timers if t is not None)
        if not self._log_container_runs():
            self.logs_at = None
        elif self.logs_at is None:
            self.logs_at = now + float(self.logging_interval or 0)
        save_at = None
        if remember is None and self.unsaved_since is not None and self.may_annotate:
            save_at = self.unsaved_since + self.history_settle  # the history waits no longer
        wake = tuple(
            sorted({t for t in (self.note_at, self.logs_at, save_at) if t is not None and now < t < self.due})
        )
        return SleepUntil(until=self.due, wake=wake, remember=remember, notes=tuple(notes))

    def _classify(self, pod: Mapping[str, Any] | None, history: History, now: float) -> Verdict:
        events = self.events
        if pod is None and self.unseen and self.pod is not None:
            events = without_later_node_loss(events, self.pod)
        policy, logs = self.judging, self.log_tails
        return classify(pod, events, history, now=now, policy=policy, relaunches=self.relaunches, logs=logs)

    def _overdue(self, now: float) -> bool:
        return self.execution_deadline is not None and now >= self.execution_deadline

    def _to_remember(self, verdict: Verdict | None, now: float) -> History | None:
        """The history, when it should be stamped: changed, non-empty, annotating allowed, and due.

        A change that bears on a running grace timer (the timer of ``verdict``, a grace rule) or a
        stronger image-pull cause is due at once: a restarted trigger keeps that timer and cause.
        Any other change (under :data:`SETTLING_RULES`: a starting pod, a generic pull back-off; a
        signal no timer runs on) is due :data:`HISTORY_SETTLE` after the history first differed
        from the stamp, so the changes of a pod's first seconds are written together, once its
        first grace timer runs (``verdict`` ``None``: due now). A restart in that window starts
        those timers again, at most that much later.
        """
        if not self.may_annotate or not self.history.first_seen:
            return None
        payload = self.history.to_payload()
        if payload == self.stamped:
            self.unsaved_since = None
            return None
        if self.unsaved_since is None:
            self.unsaved_since = now
        if verdict is None or now >= self.unsaved_since + self.history_settle:
            return self.history
        if verdict.rule in SETTLING_RULES:
            # A pull cause seen under these rules came from an Event (a status that names one makes
            # a pull rule match), and a restarted trigger reads it again there.
            return None
        stronger = payload["strongest"] != (self.stamped or {}).get("strongest")
        return self.history if stronger or verdict.rule in _GRACE_RULES else None

    def _relaunch_hold(
        self, verdict: Verdict, pod: Mapping[str, Any] | None, now: float, notes: list[str]
    ) -> float | None:
        """Until when a RELAUNCH waits for the disrupted pod's containers to stop; None: emit now.

        Preemption, a drain or taint-based eviction mark the pod (``DisruptionTarget``) before its
        graceful termination: the old container may run for ``terminationGracePeriodSeconds``
        more, and a replacement started now would run beside it. So RELAUNCH waits until the pod
        is gone or no container runs, bounded by the grace plus a margin: a lost node never
        reports its containers stopped.
        """
        if verdict.outcome is not Outcome.RELAUNCH or pod is None or not containers_running(pod):
            self.relaunch_seen = None
            return None
        bound = termination_grace(pod) + RELAUNCH_HOLD_PADDING
        if self.relaunch_seen is None:
            self.relaunch_seen = now
            notes.append(
                f"{verdict.reason.value}; waiting for its containers to stop before the relaunch "
                f"(at most {bound:.0f} s)"
            )
        until = self.relaunch_seen + bound
        return until if now < until else None

    def _grace_note(self, verdict: Verdict, now: float) -> str | None:
        """Once a minute while a grace runs: what is awaited, since when, and until when; for a pod
        held by scheduling gates, once every few minutes, which gates and what its queue says."""
        if verdict.outcome is not Outcome.WAIT or verdict.rule not in _GRACE_RULES or self.gone:
            self.note_at = None
            return None
        queued = verdict.rule == QUEUED_RULE
        if self.note_at is None:
            # The first line after a minute of waiting (a pod starting normally is pending for a
            # while), then one a minute, also when the cause changes (a pull error becoming clearer).
            self.note_at = now + (queues.QUEUE_FIRST_NOTE if queued else GRACE_NOTE_EVERY)
        if now < self.note_at:
            return None
        self.note_at = now + (queues.QUEUE_NOTE_EVERY if queued else GRACE_NOTE_EVERY)
        since = self._grace_since(verdict, now) or now
        assert verdict.deadline is not None
        if not queued:
            awaited = verdict.reason.value
            return f"{awaited}: waiting since {_clock(since)}, giving up at {_clock(verdict.deadline)}"
        until, what = verdict.deadline, "queue_timeout"
        if self.execution_deadline is not None and self.execution_deadline <= until:
            until, what = self.execution_deadline, "execution_timeout"
        return queues.queue_note(queues.gates_of(self.pod), since, until, what, self.workload)

    def _workload_due(self, verdict: Verdict, now: float) -> bool:
        """Whether the gate note that falls due now wants Kueue's Workload read first."""
        return (
            verdict.rule == QUEUED_RULE
            and self.may_read_workloads
            and self.note_at is not None
            and now >= self.note_at
            and self.workload_for != self.note_at
            and queues.KUEUE_GATE in queues.gates_of(self.pod)
        )

    def _log_tail_for(self, verdict: Verdict) -> LogTail | None:
        """The log the last look reads with a failure that rests on a container's exit: the
        container's current run when it terminated, else (crash-looping) the run before."""
        if verdict.reason not in LOG_TAIL_REASONS or self.pod is None:
            return None
        name = next((e.container for e in verdict.evidence if e.container), None)
        status = self.pod.get("status") or {}
        statuses = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
        entry = next((c for c in statuses if (c or {}).get("name") == name), None) or {}
        if "terminated" in (entry.get("state") or {}):
            return LogTail(container=str(name))
        if "terminated" in (entry.get("lastState") or {}):
            return LogTail(container=str(name), previous=True)
        return None  # the container never ran: it has no log

    def _grace_since(self, verdict: Verdict, now: float) -> float | None:
        """When the signal whose grace runs was first seen (the classifier's history has it)."""
        checks = trace(self.pod, self.events, verdict.history, now=now)
        fact = checks[-1].fact if checks else None
        return verdict.history.since(fact.key) if fact is not None else None

    def _log_container_runs(self) -> bool:
        if self.logging_interval is None or self.pod is None or self.gone:
            return False
        statuses = (self.pod.get("status") or {}).get("containerStatuses") or []
        return any(
            (s or {}).get("name") == self.log_container and "running" in ((s or {}).get("state") or {})
            for s in statuses
        )

    def _timed_out(self, last: Verdict | None, now: float) -> Verdict:
        assert self.execution_deadline is not None
        overdue = now - self.execution_deadline
        state = f"; the pod was {last.reason.value}" if last is not None else ""
        message = f"execution_timeout reached ({overdue:.0f} s past the deadline){state}"
        history = last.history if last is not None else self.initial_history
        return retry_verdict(
            Reason.EXECUTION_TIMEOUT, message, "execution_timeout", seen_at=now, history=history
        )


def containers_running(pod: Mapping[str, Any]) -> bool:
    """True while any container of ``pod`` is reported running."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return False
    for group in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for container in status.get(group) or []:
            if "running" in ((container or {}).get("state") or {}):
                return True
    return False


def without_later_node_loss(events: Sequence[Json], last: Mapping[str, Any]) -> list[Json]:
    """``events`` less the node-loss Events dated more than :data:`NODE_LOSS_MARGIN` after the
    newest time in ``last`` (why: see there); an Event without a time, or a pod without any, stays."""
    newest = max(_state_times(last), default=None)
    if newest is None:
        return list(events)
    return [e for e in events if e.get("reason") not in NODE_LOSS_EVENTS or not _later(e, newest)]


def _later(event: Mapping[str, Any], newest: float) -> bool:
    at = _epoch(event_time(event))
    return at is not None and at > newest + NODE_LOSS_MARGIN


def _state_times(pod: Mapping[str, Any]) -> list[float]:
    """Every time ``pod`` records: its writes, its creation, its conditions and container states."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    stamps = [entry.get("time") for entry in meta.get("managedFields") or [] if isinstance(entry, Mapping)]
    stamps.append(meta.get("creationTimestamp"))
    stamps += [c.get("lastTransitionTime") for c in status.get("conditions") or [] if isinstance(c, Mapping)]
    for group in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for container in status.get(group) or []:
            state = (container or {}).get("state") or {}
            running, done = state.get("running") or {}, state.get("terminated") or {}
            stamps += [running.get("startedAt"), done.get("startedAt"), done.get("finishedAt")]
    return [at for at in map(_epoch, stamps) if at is not None]


def _epoch(stamp: object) -> float | None:
    """Epoch seconds of an RFC 3339 time (``fromisoformat`` reads the API's forms since 3.11)."""
    try:
        at = datetime.fromisoformat(stamp) if isinstance(stamp, str) else None
    except ValueError:
        return None
    return None if at is None else (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


def termination_grace(pod: Mapping[str, Any]) -> float:
    """The seconds the kubelet gives the pod's containers to stop (30 unless the spec says)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    for value in (meta.get("deletionGracePeriodSeconds"), spec.get("terminationGracePeriodSeconds")):
        if isinstance(value, int | float) and value >= 0:
            return float(value)
    return 30.0


def _uid_of(pod: Mapping[str, Any] | None) -> str | None:
    uid = ((pod or {}).get("metadata") or {}).get("uid")
    return str(uid) if uid else None


def _clock(at: float) -> str:
    return queues.clock(at, "%H:%M:%S UTC")
