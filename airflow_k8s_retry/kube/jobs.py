"""What a ``batch/v1`` Job says about itself, read from its JSON: finished or not, and why.

A pod a Job owns is not judged alone: when it fails, the Job controller may replace it
(``backoffLimit``), so the end of the story is the Job's terminal condition. The controller writes
``FailureTarget`` or ``SuccessCriteriaMet`` first and ``Failed`` or ``Complete`` once the Job's pods
have stopped (Kubernetes 1.31 and later); older controllers write only the last two. Either of a
pair counts. Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

_FAILED = ("Failed", "FailureTarget")
_COMPLETE = ("Complete", "SuccessCriteriaMet")


class JobState(StrEnum):
    ACTIVE = "active"
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass(frozen=True)
class JobStatus:
    """The part of a Job's status a sensor acts on."""

    name: str
    uid: str
    state: JobState
    reason: str = ""
    message: str = ""
    active: int = 0
    succeeded: int = 0
    failed: int = 0
    backoff_limit: int = 6

    @classmethod
    def of(cls, job: Mapping[str, Any]) -> JobStatus:
        meta = job.get("metadata") or {}
        status = job.get("status") or {}
        spec = job.get("spec") or {}
        state, reason, message = JobState.ACTIVE, "", ""
        conditions = [c for c in status.get("conditions") or [] if str(c.get("status")) == "True"]
        for wanted, terminal in ((_FAILED, JobState.FAILED), (_COMPLETE, JobState.COMPLETE)):
            found = [c for c in conditions if c.get("type") in wanted]
            if found:
                state = terminal
                reason = str(found[0].get("reason") or found[0].get("type") or "")
                message = str(found[0].get("message") or "")
                break
        limit = spec.get("backoffLimit")
        return cls(
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            state=state,
            reason=reason,
            message=message,
            active=int(status.get("active") or 0),
            succeeded=int(status.get("succeeded") or 0),
            failed=int(status.get("failed") or 0),
            backoff_limit=6 if limit is None else int(limit),
        )

    def describe(self) -> str:
        counts = f"{self.active} active, {self.succeeded} succeeded, {self.failed} failed"
        if self.state is JobState.ACTIVE:
            return f"{counts} (backoffLimit {self.backoff_limit})"
        why = f"{self.reason}: {self.message}" if self.message else self.reason
        return f"{self.state.value} ({why}); {counts}"


def owning_job(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(name, uid)`` of the Job that controls ``pod``, from its ownerReferences; None if none."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if (
            ref.get("kind") == "Job"
            and str(ref.get("apiVersion", "")).startswith("batch/")
            and ref.get("controller")
        ):
            return str(ref.get("name") or ""), str(ref.get("uid") or "")
    return None
