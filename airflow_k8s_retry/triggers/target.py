"""``PodTargetTrigger``: what ``PodCompletionSensor`` waits for, followed until there is a verdict.

A sensor usually starts before the thing it waits for: the pod is created later by another system,
a label selector matches one pod today and a newer one tomorrow, and a Job replaces a failed pod
with a fresh one. A :class:`PodTargetTrigger` therefore follows a :class:`Target` rather than one
pod:

* the target's pods arrive through the triggerer's shared watch (a label selector gets its own
  feed, a pod name or a Job shares the namespace's), so waiting costs no polling requests;
* the newest matching pod is the one judged, by a plain ``PodStateTrigger`` of its own (same
  classifier, same last look); a newer pod replaces it as soon as it appears;
* a pod a Job controls is judged as part of its Job: a failed pod the Job will replace is not the
  end, the Job's terminal condition is (``Complete``, or ``Failed`` with the cause of its last pod);
* the sensor's ``timeout`` and the task's ``execution_timeout`` are deadlines on the trigger's
  clock, and what it waits for goes to the task log once a minute.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_k8s_retry.classification.model import Outcome, Reason, Verdict
from airflow_k8s_retry.connection import aresolve_cluster_config, chosen_cluster
from airflow_k8s_retry.kube.config import ClusterConfig
from airflow_k8s_retry.kube.errors import KubeError
from airflow_k8s_retry.kube.hub import CollectionSubscription, WatchHub
from airflow_k8s_retry.kube.jobs import JobState, JobStatus, owning_job
from airflow_k8s_retry.triggers.pod import PodEvent, PodStateTrigger, positive_seconds, until_first
from airflow_k8s_retry.triggers.tracker import retry_verdict

TARGET_CLASSPATH = "airflow_k8s_retry.triggers.PodTargetTrigger"


#: How often the trigger says in the task log what it is waiting for.
PROGRESS_EVERY = 60.0
#: After a Job failed, how long to wait for the verdict on its last pod (the cause) before
#: reporting the Job's failure without it.
LAST_POD_GRACE = 30.0


@dataclass(frozen=True)
class Target:
    """A pod by name, the newest pod of a label selector, or a Job, in one namespace.

    :param deadline: the sensor's ``timeout`` as epoch seconds; past it the trigger reports a
        timeout (the sensor raises ``AirflowSensorTimeout``).
    :param since: when the sensor started waiting (epoch seconds), for the log and the timeout's
        message; default: when the trigger started.
    """

    namespace: str
    pod_name: str | None = None
    label_selector: str | None = None
    job_name: str | None = None
    deadline: float | None = None
    since: float | None = None

    def __post_init__(self) -> None:
        given = [k for k in ("pod_name", "label_selector", "job_name") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of pod_name, label_selector and job_name"
                f" (got {', '.join(given) if given else 'none'})"
            )
        if not self.namespace:
            raise ValueError("a target needs a namespace")

    def describe(self) -> str:
        if self.pod_name:
            return f"pod {self.namespace}/{self.pod_name}"
        if self.job_name:
            return f"job {self.namespace}/{self.job_name}"
        return f"the newest pod matching {self.label_selector!r} in namespace {self.namespace}"

    def wants(self, pod: Mapping[str, Any]) -> bool:
        """Whether a pod from the target's feed belongs to the target."""
        meta = pod.get("metadata") or {}
        if self.pod_name:
            return meta.get("name") == self.pod_name
        if self.job_name:
            owner = owning_job(pod)
            return owner is not None and owner[0] == self.job_name
        return True  # the feed is the label selector's: the API server did the matching

    def to_payload(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_payload(cls, data: Mapping[str, Any]) -> Target:
        deadline, since = data.get("deadline"), data.get("since")
        return cls(
            namespace=str(data["namespace"]),
            pod_name=data.get("pod_name") or None,
            label_selector=data.get("label_selector") or None,
            job_name=data.get("job_name") or None,
            deadline=None if deadline is None else float(deadline),
            since=None if since is None else float(since),
        )


@dataclass(frozen=True)
class TargetEvent:
    """What a following trigger emits: the final verdict (as a pod event), or a timeout."""

    target: Target
    message: str
    event: PodEvent | None = None
    timed_out: bool = False
    job: str | None = None

    def to_payload(self) -> dict[str, Any]:
        return {
            "target": self.target.to_payload(),
            "message": self.message,
            "event": self.event.to_payload() if self.event is not None else None,
            "timed_out": self.timed_out,
            "job": self.job,
        }

    @classmethod
    def from_payload(cls, data: Mapping[str, Any]) -> TargetEvent:
        if "target" not in data or "message" not in data:
            raise ValueError("not a sensor target event payload: missing target or message")
        event = data.get("event")
        return cls(
            target=Target.from_payload(data["target"]),
            message=str(data["message"]),
            event=PodEvent.from_payload(event) if event else None,
            timed_out=bool(data.get("timed_out")),
            job=data.get("job") or None,
        )


def _uid(pod: Mapping[str, Any] | None) -> str:
    return str(((pod or {}).get("metadata") or {}).get("uid") or "")


def _name_uid(pod: Mapping[str, Any]) -> tuple[str, str]:
    return str((pod.get("metadata") or {}).get("name")), _uid(pod)


def _going(pod: Mapping[str, Any] | None, verdict: Verdict) -> bool:
    """Gone, finished, being deleted, or being taken away by the cluster (an eviction, a
    preemption, a lost node: a relaunch verdict, given before the phase turns Failed): a pod the
    Job controller counts as failed, and may replace."""
    if pod is None or verdict.outcome is Outcome.RELAUNCH:
        return True
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return True
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def job_complete_verdict(namespace: str, job: JobStatus) -> Verdict:
    why = f" ({job.reason}: {job.message})" if job.message else ""
    message = f"job {namespace}/{job.name} is complete{why}; {job.succeeded} pod(s) succeeded"
    return Verdict(outcome=Outcome.SUCCEED, reason=Reason.SUCCEEDED, message=message, rule="job.complete")


def job_failed_verdict(namespace: str, job: JobStatus, last: Verdict | None, last_pod: str | None) -> Verdict:
    """The Job's failure, with the classified cause of its last pod when there is one."""
    why = f"{job.reason}: {job.message}" if job.message else job.reason or "Failed"
    text = f"job {namespace}/{job.name} failed ({why}) after {job.failed} failed pod(s)"
    if last is not None and last.outcome is not Outcome.SUCCEED:
        outcome = Outcome.RETRY if last.outcome in (Outcome.RELAUNCH, Outcome.WAIT) else last.outcome
        return replace(
            last, outcome=outcome, deadline=None, message=f"{text}; its last pod {last_pod}: {last.message}"
        )
    reason = Reason.DEADLINE_EXCEEDED if job.reason == "DeadlineExceeded" else Reason.POD_FAILED
    return retry_verdict(reason, text, "job.failed", source="api")


class Follower:
    """One following trigger's state: the feeds, the pod being judged, the verdicts so far."""

    def __init__(
        self,
        trigger: PodTargetTrigger,
        config: ClusterConfig,
        target: Target,
        judge: Callable[[str, str], PodStateTrigger],
    ) -> None:
        self.trigger = trigger
        self.config = config
        self.target = target
        self.make_judge = judge
        self.clock = PodStateTrigger.clock  # the judging triggers' clock: one clock for the whole wait
        self.log = trigger.log
        self.pods: CollectionSubscription | None = None
        self.jobs: CollectionSubscription | None = None
        self.judged: dict[str, Verdict] = {}  # pod uid -> verdict
        self.judging: tuple[str, str] | None = None  # (name, uid) of the pod being judged
        self.judge: asyncio.Task[PodEvent] | None = None
        self.job_seen = False
        self.arrivals: dict[str, int] = {}  # pod uid -> order of first sight (ties within a second)
        self.job_failed_at: float | None = None
        #: Once the Job has failed: its pods from a fresh LIST, by uid (see :meth:`_read_job_pods`).
        self.listed: dict[str, Mapping[str, Any]] | None = None

    async def run(self) -> TargetEvent:
        self.pods = await self._feed(label_selector=self.target.label_selector)
        try:
            return await self._loop()  # a Job's feed opens with the first look that names the Job
        finally:
            await self._stop_judging()
            for sub in (self.pods, self.jobs):
                if sub is not None:
                    await sub.close()

    # -- the loop -------------------------------------------------------------------------------

    async def _loop(self) -> TargetEvent:
        started = self.target.since if self.target.since is not None else self.clock.now()
        self._progress(started, None, None)
        next_progress = self.clock.now() + PROGRESS_EVERY
        while True:
            newest, job_name = await self._look()
            job = self._job(job_name)
            if job is not None and job.state is JobState.FAILED and self.listed is None:
                await self._read_job_pods(job)
                continue
            ended = self._job_ending(job, newest)
            if ended is not None:
                return ended
            if newest is not None and _uid(newest) not in self.judged:
                await self._judge(newest)
            if self.judge is not None and self.judge.done():
                ended = self._judged(job_name, newest)
                if ended is not None:
                    return ended
                continue
            now = self.clock.now()
            ended = self._past_a_deadline(now, started, newest, job, job_name)
            if ended is not None:
                return ended
            if now >= next_progress:
                self._progress(started, newest, job)
                next_progress = now + PROGRESS_EVERY
            await self._wait(next_progress)

    async def _look(self) -> tuple[Mapping[str, Any] | None, str | None]:
        """Take the feeds' news: the target's newest pod, and the Job it belongs to (whose feed is
        opened the first time a Job shows up)."""
        assert self.pods is not None
        self.pods.drain()
        if self.jobs is not None:
            self.jobs.drain()
        mine: list[Mapping[str, Any]] = [p for p in self.pods.objects.values() if self.target.wants(p)]
        if self.listed:
            fed = {_uid(p) for p in mine}
            mine += [p for uid, p in self.listed.items() if uid not in fed]
        for p in mine:
            self.arrivals.setdefault(_uid(p), len(self.arrivals))
        newest = max(mine, key=self._created) if mine else None
        owner = owning_job(newest) if newest is not None else None
        job_name = self.target.job_name or (owner[0] if owner else None)
        if job_name and self.jobs is None:
            self.jobs = await self._feed(jobs=True)
        return newest, job_name

    async def _feed(self, **kind: Any) -> CollectionSubscription:
        return await WatchHub.current().follow(
            self.config, self.target.namespace, poll_interval=self.trigger.poll_interval, **kind
        )

    async def _read_job_pods(self, job: JobStatus) -> None:
        """Read the failed Job's pods afresh, once. The pods' and the Jobs' watches deliver
        independently (and LIST at once when the sensor starts), so the Job's Failed condition can
        arrive before its last pod does; the cause of the failure is that pod's, and a LIST made
        after the Job failed holds it. A failed read leaves the pods the watch delivered."""
        self.listed = {}
        raw = self.jobs.objects.get(job.name) if self.jobs is not None else None
        labels = (((raw or {}).get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or None
        try:
            async with WatchHub.current().client(self.config) as kube:
                listing = await kube.list_pods(self.target.namespace, label_selector=selector)
        except KubeError as exc:
            self.log.info("Could not list the pods of job %s (%s): judging the pods watched", job.name, exc)
            return
        ours = [p for p in listing.items if owning_job(p) == (job.name, job.uid)]
        self.listed = {_uid(p): p for p in ours}

    def _past_a_deadline(
        self,
        now: float,
        started: float,
        newest: Mapping[str, Any] | None,
        job: JobStatus | None,
        job_name: str | None,
    ) -> TargetEvent | None:
        """The ending when the Job went away, the sensor's timeout passed, or execution_timeout did."""
        if job_name and job is None and self.job_seen:
            deleted = f"job {self.target.namespace}/{job_name} was deleted"
            return self._done(self._failure(Reason.DELETED_EXTERNALLY, deleted), newest, job_name)
        if self.target.deadline is not None and now >= self.target.deadline:
            waited = f"timed out after {now - started:.0f} s waiting for {self.target.describe()}"
            message = f"{waited}: {self._state(newest, job)}"
            return TargetEvent(self.target, message, timed_out=True, job=job.name if job else None)
        deadline = self.trigger.execution_deadline
        if deadline is not None and now >= deadline:
            message = f"execution_timeout reached while waiting for {self.target.describe()}"
            verdict = self._failure(Reason.EXECUTION_TIMEOUT, message, rule="execution_timeout")
            return self._done(verdict, newest, job_name)
        return None

    def _created(self, pod: Mapping[str, Any]) -> tuple[str, int]:
        """Creation order: creationTimestamp has one-second resolution, so ties go to the pod seen
        later in the watch (the API server's order)."""
        stamp = str((pod.get("metadata") or {}).get("creationTimestamp") or "")
        return stamp, self.arrivals.get(_uid(pod), -1)

    def _job(self, job_name: str | None) -> JobStatus | None:
        raw = self.jobs.objects.get(job_name) if job_name and self.jobs is not None else None
        if raw is None:
            return None
        self.job_seen = True
        return JobStatus.of(raw)

    def _job_ending(self, job: JobStatus | None, newest: Mapping[str, Any] | None) -> TargetEvent | None:
        """The Job's terminal condition decides, once its last pod has a verdict (or took too long)."""
        if job is None or job.state is JobState.ACTIVE:
            return None
        ns = self.target.namespace
        if job.state is JobState.COMPLETE:
            return self._done(job_complete_verdict(ns, job), newest, job.name)
        last = self.judged.get(_uid(newest)) if newest is not None else None
        now = self.clock.now()
        if self.job_failed_at is None:
            self.job_failed_at = now
        if last is None and newest is not None and now < self.job_failed_at + LAST_POD_GRACE:
            if self.judge is None or not self.judge.done() or self.judging != _name_uid(newest):
                return None  # the last pod's verdict (the cause) is on its way
            self._collect()
            last = self.judged.get(_uid(newest))
        name = (newest or {}).get("metadata", {}).get("name") if newest else None
        return self._done(job_failed_verdict(ns, job, last, name), newest, job.name)

    async def _judge(self, pod: Mapping[str, Any]) -> None:
        """Judge ``pod`` (the newest) with a PodStateTrigger of its own, instead of an older one."""
        wanted = _name_uid(pod)
        if self.judging == wanted:
            return
        if self.judging is not None:
            self.log.info("Pod %s is newer than %s: following it instead", wanted[0], self.judging[0])
        await self._stop_judging()
        self.log.info("Watching pod %s/%s (uid %s)", self.target.namespace, wanted[0], wanted[1])
        self.judging = wanted
        self.judge = asyncio.ensure_future(_first_event(self.make_judge(*wanted), wanted[0]))

    def _collect(self) -> PodEvent | None:
        judge, self.judge, self.judging = self.judge, None, None
        if judge is None or not judge.done() or judge.cancelled():
            return None
        event = judge.result()  # a crash in the judging trigger is the trigger's crash
        self.judged[event.pod_uid] = event.verdict
        return event

    def _judged(self, job_name: str | None, newest: Mapping[str, Any] | None) -> TargetEvent | None:
        event = self._collect()
        if event is None:
            return None
        verdict = event.verdict
        if job_name is None:
            return self._done(verdict, newest, None, event=event)
        current = self.pods.objects.get(event.pod_name) if self.pods is not None else None
        if verdict.outcome is Outcome.SUCCEED or _going(current, verdict):
            self.log.info(
                "Pod %s of job %s: %s (%s); the Job decides what comes next",
                event.pod_name,
                job_name,
                verdict.reason.value,
                verdict.message,
            )
            return None
        # A pod that never got to run (an image that does not exist, a missing secret) is not
        # replaced by the Job controller: the Job would wait forever, so the pod's verdict stands.
        message = f"pod {event.pod_name} of job {self.target.namespace}/{job_name}: {verdict.message}"
        return self._done(replace(verdict, message=message), newest, job_name, event=event)

    async def _stop_judging(self) -> None:
        judge, self.judge, self.judging = self.judge, None, None
        if judge is not None and not judge.done():
            judge.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await judge

    async def _wait(self, next_progress: float) -> None:
        """Until a feed or the judging trigger has news, or the next timer falls due."""
        assert self.pods is not None
        if self.pods.pending or (self.jobs is not None and self.jobs.pending):
            return
        grace = None if self.job_failed_at is None else self.job_failed_at + LAST_POD_GRACE
        timers = (next_progress, self.target.deadline, self.trigger.execution_deadline, grace)
        until = min(t for t in timers if t is not None)
        jobs = [self.jobs.wait()] if self.jobs is not None else []
        judging = [self.judge] if self.judge is not None else []
        await until_first(self.pods.wait(), self.clock.sleep_until(until), *jobs, also=judging)

    # -- endings and progress -------------------------------------------------------------------

    def _failure(self, reason: Reason, message: str, *, rule: str | None = None) -> Verdict:
        return retry_verdict(reason, message, rule or reason.value, seen_at=self.clock.now())

    def _done(
        self,
        verdict: Verdict,
        newest: Mapping[str, Any] | None,
        job_name: str | None,
        *,
        event: PodEvent | None = None,
    ) -> TargetEvent:
        if event is None:
            meta = (newest or {}).get("metadata") or {}
            event = PodEvent(
                namespace=self.target.namespace,
                pod_name=str(meta.get("name") or ""),
                pod_uid=str(meta.get("uid") or ""),
                verdict=verdict,
                relaunches=0,  # a sensor never relaunches
            )
        else:
            event = replace(event, verdict=verdict)
        return TargetEvent(target=self.target, message=verdict.message, event=event, job=job_name)

    def _state(self, newest: Mapping[str, Any] | None, job: JobStatus | None) -> str:
        parts = []
        if job is not None:
            parts.append(f"job {job.name}: {job.describe()}")
        elif self.target.job_name:
            parts.append("no such job yet")
        if newest is None:
            parts.append("no matching pod yet" if not self.target.pod_name else "no such pod yet")
        else:
            meta = newest.get("metadata") or {}
            phase = (newest.get("status") or {}).get("phase") or "Pending"
            parts.append(f"following pod {meta.get('name')} ({phase})")
        return "; ".join(parts)

    def _progress(self, started: float, newest: Mapping[str, Any] | None, job: JobStatus | None) -> None:
        waited = self.clock.now() - started
        left = ""
        if self.target.deadline is not None:
            left = f", timeout in {max(0.0, self.target.deadline - self.clock.now()):.0f} s"
        self.log.info(
            "Waiting for %s (%.0f s so far%s): %s",
            self.target.describe(),
            waited,
            left,
            self._state(newest, job),
        )


async def _first_event(judge: PodStateTrigger, pod_name: str) -> PodEvent:
    async with contextlib.aclosing(judge.run()) as events:  # type: ignore[type-var]
        async for event in events:
            # What the verdict was judged on stays out: the sensor's report reads the pod itself.
            return replace(PodEvent.from_payload(event.payload), seen=None)
    raise RuntimeError(f"the trigger for pod {pod_name} ended without an event")


class PodTargetTrigger(BaseTrigger):  # type: ignore[misc]
    """Follow a :class:`Target` (a pod by name, the newest pod of a label selector, or a Job) and
    fire once: with the verdict on the pod that decides, or a timeout.

    :param kubernetes_conn_id: Airflow ``kubernetes`` connection; ``None`` for default kubeconfig.
    :param target: ``Target.to_payload()``: what to wait for, where, and until when.
    :param policy: ``FailurePolicy.to_payload()`` the pods are judged with, or ``None`` for the
        default rules.
    :param execution_deadline: epoch seconds; past it the trigger fires ``execution.timeout``.
    :param poll_interval: seconds between polls, used only when RBAC forbids watching.
    :param cluster: the task's KPO cluster arguments laid over the connection's, or ``None``.
    """

    def __init__(
        self,
        *,
        kubernetes_conn_id: str | None,
        target: Mapping[str, Any],
        policy: Mapping[str, Any] | None,
        execution_deadline: float | None = None,
        poll_interval: float = 10.0,
        cluster: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self._target = Target.from_payload(target)  # a bad payload fails when the task defers
        self.poll_interval = positive_seconds("PodTargetTrigger poll_interval", poll_interval)
        self.kubernetes_conn_id = kubernetes_conn_id
        self.target = self._target.to_payload()
        self.policy = dict(policy) if policy is not None else None
        self.execution_deadline = None if execution_deadline is None else float(execution_deadline)
        self.cluster = chosen_cluster(**dict(cluster)) if cluster else None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return TARGET_CLASSPATH, {
            "kubernetes_conn_id": self.kubernetes_conn_id,
            "target": self.target,
            "policy": self.policy,
            "execution_deadline": self.execution_deadline,
            "poll_interval": self.poll_interval,
            "cluster": self.cluster,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        config = await aresolve_cluster_config(self.kubernetes_conn_id, self.cluster)
        followed = await Follower(self, config, self._target, self._judge).run()
        yield TriggerEvent(followed.to_payload())

    def _judge(self, pod_name: str, pod_uid: str) -> PodStateTrigger:
        """The trigger that judges one pod of the target."""
        return PodStateTrigger(
            kubernetes_conn_id=self.kubernetes_conn_id,
            namespace=self._target.namespace,
            pod_name=pod_name,
            pod_uid=pod_uid,
            identity=None,
            policy=self.policy,
            execution_deadline=self.execution_deadline,
            poll_interval=self.poll_interval,
            owned=False,
            cluster=self.cluster,
        )
