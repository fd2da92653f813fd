"""``batch/v1`` Jobs for the simulator: a small Job controller (the Job strategy is ``apiserver/jobs.py``).

Enough of Kubernetes' Job controller (``pkg/controller/job``) for a sensor that follows a Job's
pods: non-indexed Jobs with ``completions``, ``parallelism``, ``backoffLimit`` and
``activeDeadlineSeconds``. It creates pods from the template (named ``<job>-<5 random>``, with the
Job's labels and a controller ``ownerReference``), counts pods that ended ``Succeeded`` or
``Failed`` (a pod deleted before it finished counts as failed, as with the controller's tracking
finalizers), re-creates failed pods after the controller's back-off (10 s, doubling, at most
6 minutes), and finishes the Job with the conditions and texts Kubernetes 1.31+ writes:

* failure: ``FailureTarget`` then, once no pod is terminating, ``Failed``, both with reason
  ``BackoffLimitExceeded`` ("Job has reached the specified backoff limit") or ``DeadlineExceeded``
  ("Job was active longer than specified deadline"); remaining active pods are deleted;
* success: ``SuccessCriteriaMet`` then ``Complete``, reason ``CompletionsReached`` ("Reached
  expected number of succeeded pods"), and ``status.completionTime``;
* Events on the Job: ``SuccessfulCreate`` ("Created pod: NAME"), ``SuccessfulDelete``, the failure
  reason (Warning) or ``Completed`` ("Job completed").

Not simulated: indexed Jobs, ``podFailurePolicy``, ``backoffLimitPerIndex``, ``successPolicy``,
``suspend``, ``ttlSecondsAfterFinished``, the tracking finalizer itself, and cascading deletion
(the API's default for a Job is to orphan its pods, as here).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import random
import string
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_k8s_retry_testing.apiserver import pods as pod_strategy
from airflow_k8s_retry_testing.apiserver.jobs import CONTROLLER_UID_LABELS
from airflow_k8s_retry_testing.store import Obj, Store, WatchEvent, now_iso

if TYPE_CHECKING:
    from airflow_k8s_retry_testing.timers import Handle, TimerHeap

API_VERSION = "batch/v1"
#: The controller's pod re-creation back-off: 10 s, doubling per failure, capped at 6 minutes.
BACKOFF_BASE = 10.0
BACKOFF_CAP = 360.0

BACKOFF_LIMIT_EXCEEDED = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
DEADLINE_EXCEEDED = ("DeadlineExceeded", "Job was active longer than specified deadline")
COMPLETIONS_REACHED = ("CompletionsReached", "Reached expected number of succeeded pods")


def _owner_uid(pod: Mapping[str, Any]) -> str | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "Job" and ref.get("controller"):
            return str(ref.get("uid"))
    return None


@dataclass
class _Tracking:
    """What the controller has counted for one Job (its pods may be gone since)."""

    #: When the controller first counted the Job: ``since`` on the cluster's timebase (loop or
    #: manual time, as ``last_failure``), ``started`` on the wall clock (``startTime``).
    since: float
    succeeded: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    last_failure: float = 0.0
    started: float = field(default_factory=time.time)
    timer: Handle | None = None


class JobController:
    """Reconciles every Job on each change of a Job or of one of its pods."""

    def __init__(self, store: Store, clock: TimerHeap) -> None:
        self.store = store
        self.clock = clock
        self.tracking: dict[str, _Tracking] = {}  # job uid -> counts
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.store.listeners.append(self._changed)

    async def stop(self) -> None:
        with contextlib.suppress(ValueError):
            self.store.listeners.remove(self._changed)
        for state in self.tracking.values():
            if state.timer is not None:
                state.timer.cancel()
        self._loop = None

    def _changed(self, event: WatchEvent) -> None:
        """Called inside the store's write: act once it is done (a write must not nest in another)."""
        if self._loop is None or event.resource not in ("jobs", "pods"):
            return
        # On the cluster's timebase: on a manual clock, a change made by a step of an advance is
        # acted on within that advance, at the step's time (back-offs count from it).
        soon = self.clock.loop.call_soon
        if event.resource == "jobs":
            soon(self.sync, event.namespace, event.name)
        elif any(key in event.labels for key in CONTROLLER_UID_LABELS):  # cheap: no decoding
            soon(self._pod_changed, event.type, event.obj())

    def _pod_changed(self, type_: str, pod: Obj) -> None:
        owner = _owner_uid(pod)
        if owner is None:
            return
        meta = pod["metadata"]
        if type_ == "DELETED":  # gone from the store: only its event tells; sync counts the rest
            self._count(self._tracking(owner), pod, deleted=True)
        for job in self.store.items("jobs", meta.get("namespace", "")):
            if job["metadata"]["uid"] == owner:
                self.sync(job["metadata"]["namespace"], job["metadata"]["name"])

    # -- reconcile --------------------------------------------------------------------------------

    def sync(self, namespace: str, name: str) -> None:
        job = self.store.get("jobs", namespace, name)
        if job is None or _finished(job):
            return
        state = self._tracking(job["metadata"]["uid"])
        pods = self._pods(job)
        # The pods as stored now, not only as their change callbacks (still queued, on a busy loop)
        # have told so far: a pod that ended unseen would otherwise be neither active nor counted.
        for pod in pods:
            self._count(state, pod)
        active = _active(pods)
        terminating = [p for p in pods if p["metadata"].get("deletionTimestamp")]
        status = copy.deepcopy(job.get("status") or {})
        status.setdefault("startTime", now_iso(state.started))
        conditions: list[Obj] = status.setdefault("conditions", [])
        target = next((c for c in conditions if c["type"] in ("FailureTarget", "SuccessCriteriaMet")), None)
        if target is None:
            target, active = self._reconcile(job, state, conditions, active)
        status["active"] = len(active)
        status["succeeded"] = len(state.succeeded)
        status["failed"] = len(state.failed)
        status["terminating"] = len(terminating)
        status["ready"] = sum(1 for p in active if _ready(p))
        status["uncountedTerminatedPods"] = {}
        if target is not None and not terminating:
            self._finish(job, status, conditions, target)
        if status != (job.get("status") or {}):
            updated = copy.deepcopy(job)
            updated["status"] = status
            self.store.put("jobs", updated, "MODIFIED")

    def _count(self, state: _Tracking, pod: Obj, *, deleted: bool = False) -> None:
        """Count a pod that ended (``deleted``: gone before it finished counts as failed), once."""
        uid = str(pod["metadata"].get("uid"))
        phase = (pod.get("status") or {}).get("phase")
        if phase == "Succeeded" and uid not in state.failed:
            state.succeeded.add(uid)
        elif (phase == "Failed" or deleted) and uid not in state.succeeded and uid not in state.failed:
            state.failed.add(uid)
            state.last_failure = self.clock.loop.time()

    def _tracking(self, job_uid: str) -> _Tracking:
        state = self.tracking.get(job_uid)
        if state is None:
            state = self.tracking[job_uid] = _Tracking(since=self.clock.loop.time())
        return state

    def _pods(self, job: Obj) -> list[Obj]:
        uid = job["metadata"]["uid"]
        return [p for p in self.store.items("pods", job["metadata"]["namespace"]) if _owner_uid(p) == uid]

    def _target(self, spec: Obj, state: _Tracking) -> tuple[str, str, str] | None:
        """The condition the Job has just reached (FailureTarget or SuccessCriteriaMet), if any."""
        if len(state.failed) > int(spec.get("backoffLimit", 6)):
            return ("FailureTarget", *BACKOFF_LIMIT_EXCEEDED)
        deadline = spec.get("activeDeadlineSeconds")
        active_for = self.clock.loop.time() - state.since
        if deadline is not None and active_for >= self.clock.scale * float(deadline):
            return ("FailureTarget", *DEADLINE_EXCEEDED)
        if len(state.succeeded) >= int(spec.get("completions") or 1):
            return ("SuccessCriteriaMet", *COMPLETIONS_REACHED)
        return None

    def _reconcile(
        self, job: Obj, state: _Tracking, conditions: list[Obj], active: list[Obj]
    ) -> tuple[Obj | None, list[Obj]]:
        """Reach a target condition (deleting the active pods) or scale; returns it and the active pods."""
        reached = self._target(job["spec"], state)
        if reached is not None:
            target = _condition(*reached)
            conditions.append(target)
            for pod in active:
                self._delete_pod(job, pod)
            return target, []
        self._scale(job, state, active)
        active = _active(self._pods(job))
        self._deadline_timer(job, state)
        return None, active

    def _finish(self, job: Obj, status: Obj, conditions: list[Obj], target: Obj) -> None:
        """No pod is terminating any more: the final condition, and its Event."""
        final = "Failed" if target["type"] == "FailureTarget" else "Complete"
        conditions.append(_condition(final, target["reason"], target["message"]))
        if final == "Complete":
            status["completionTime"] = now_iso()
            self.store.record_event(job, "Completed", "Job completed", component="job-controller", kind="Job")
        else:
            self.store.record_event(
                job,
                target["reason"],
                target["message"],
                type_="Warning",
                component="job-controller",
                kind="Job",
            )

    def _scale(self, job: Obj, state: _Tracking, active: list[Obj]) -> None:
        spec = job["spec"]
        remaining = int(spec.get("completions") or 1) - len(state.succeeded)
        want = min(int(spec.get("parallelism", 1)), remaining) - len(active)
        if want <= 0:
            return
        if state.failed:
            delay = min(BACKOFF_CAP, BACKOFF_BASE * 2 ** (len(state.failed) - 1)) * self.clock.scale
            wait = state.last_failure + delay - self.clock.loop.time()
            if wait > 0:
                self._later(job, state, wait)
                return
        for _ in range(want):
            self._create_pod(job)

    def _later(self, job: Obj, state: _Tracking, seconds: float) -> None:
        """Sync the Job again after ``seconds`` of the cluster's timebase (real seconds, or
        simulated ones on a manual clock)."""
        if state.timer is not None:
            state.timer.cancel()
        meta = job["metadata"]

        def due() -> None:
            state.timer = None
            self.sync(meta["namespace"], meta["name"])

        state.timer = self.clock.loop.call_later(seconds, due)

    def _deadline_timer(self, job: Obj, state: _Tracking) -> None:
        seconds = job["spec"].get("activeDeadlineSeconds")
        if seconds is None or state.timer is not None:
            return
        left = state.since + float(seconds) * self.clock.scale - self.clock.loop.time()
        self._later(job, state, max(0.0, left) + 0.001)

    def _create_pod(self, job: Obj) -> None:
        meta = job["metadata"]
        template = copy.deepcopy(job["spec"]["template"])
        suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
        pod_meta = template.get("metadata") or {}
        pod: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{meta['name']}-{suffix}",
                "generateName": f"{meta['name']}-",
                "namespace": meta["namespace"],
                "labels": dict(pod_meta.get("labels") or {}),
                "annotations": dict(pod_meta.get("annotations") or {}),
                "ownerReferences": [
                    {
                        "apiVersion": API_VERSION,
                        "kind": "Job",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
                "uid": str(uuid.uuid4()),
                "creationTimestamp": now_iso(),
            },
            "spec": template.get("spec") or {},
        }
        pod_strategy.default_pod(pod)
        pod_strategy.store_new(self.store, pod)
        self.store.record_event(
            job,
            "SuccessfulCreate",
            f"Created pod: {pod['metadata']['name']}",
            component="job-controller",
            kind="Job",
        )

    def _delete_pod(self, job: Obj, pod: Obj) -> None:
        pod_strategy.delete_pod(self.store, pod, None)
        self.store.record_event(
            job,
            "SuccessfulDelete",
            f"Deleted pod: {pod['metadata']['name']}",
            component="job-controller",
            kind="Job",
        )


def _condition(type_: str, reason: str, message: str) -> Obj:
    now = now_iso()
    return {
        "type": type_,
        "status": "True",
        "lastProbeTime": now,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    }


def _finished(job: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def _active(pods: list[Obj]) -> list[Obj]:
    """The pods neither finished nor being deleted."""
    return [
        p
        for p in pods
        if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        and not p["metadata"].get("deletionTimestamp")
    ]


def _ready(pod: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )
