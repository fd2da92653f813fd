"""The vocabulary of the classifier: outcomes, reason codes, evidence, per-pod history and verdicts.

Everything here is a frozen value with a named conversion to and from JSON-safe payloads, because
verdicts and histories cross process boundaries (trigger kwargs, trigger events, pod annotations).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from airflow_k8s_retry.classification.codes import FAILURE_OUTCOMES, Outcome, Reason

# The codes live in ``codes`` (``reasons`` documents them); they are named here too, where the
# rest of the vocabulary is.
__all__ = ["FAILURE_OUTCOMES", "Evidence", "History", "Outcome", "Reason", "Verdict"]


@dataclass(frozen=True)
class Evidence:
    """One thing seen about a pod that supports a verdict (a status field or an Event)."""

    reason: Reason
    source: str  # "status", "event", "api" or "trigger"
    message: str
    container: str | None = None
    seen_at: float = 0.0  # epoch seconds on our clock

    def to_payload(self) -> dict[str, Any]:
        return {
            "reason": self.reason.value,
            "source": self.source,
            "message": self.message,
            "container": self.container,
            "seen_at": self.seen_at,
        }

    @classmethod
    def from_payload(cls, data: Mapping[str, Any]) -> Evidence:
        return cls(
            reason=Reason(data["reason"]),
            source=str(data["source"]),
            message=str(data["message"]),
            container=data.get("container"),
            seen_at=float(data.get("seen_at", 0.0)),
        )


@dataclass(frozen=True)
class History:
    """What the classifier remembers about one pod between observations.

    ``first_seen`` maps a signal key (usually a reason code, optionally with a container name) to
    the epoch second it was first observed, so grace timers survive restarts. ``strongest`` is the
    most specific image-pull cause seen so far (statuses and events), so that a message that decays
    to the generic back-off text keeps its meaning.
    """

    first_seen: Mapping[str, float] = field(default_factory=dict)
    strongest: Evidence | None = None

    def seen(self, key: str, now: float) -> History:
        """Return a history where ``key`` is first seen at ``now`` unless it was seen earlier."""
        if key in self.first_seen:
            return self
        return replace(self, first_seen={**self.first_seen, key: now})

    def since(self, key: str) -> float | None:
        return self.first_seen.get(key)

    def to_payload(self) -> dict[str, Any]:
        return {
            "first_seen": dict(sorted(self.first_seen.items())),
            "strongest": self.strongest.to_payload() if self.strongest else None,
        }

    @classmethod
    def from_payload(cls, data: Mapping[str, Any] | None) -> History:
        if not data:
            return cls()
        strongest = data.get("strongest")
        return cls(
            first_seen={str(k): float(v) for k, v in dict(data.get("first_seen") or {}).items()},
            strongest=Evidence.from_payload(strongest) if strongest else None,
        )


@dataclass(frozen=True)
class Verdict:
    """One decision about one pod.

    ``deadline`` (epoch seconds) is set for every ``WAIT``: the moment the verdict changes if
    nothing else happens. ``history`` is the updated memory to pass to the next ``classify`` call.
    """

    outcome: Outcome
    reason: Reason
    message: str
    rule: str
    deadline: float | None = None
    evidence: tuple[Evidence, ...] = ()
    history: History = field(default_factory=History)

    def __post_init__(self) -> None:
        if self.outcome is Outcome.WAIT and (self.deadline is None or not math.isfinite(self.deadline)):
            raise ValueError(f"a wait verdict needs a finite deadline (rule {self.rule})")

    def summary(self) -> dict[str, str]:
        """Outcome, reason code and message: what a task publishes (XCom) about its failure."""
        return {"outcome": self.outcome.value, "reason": self.reason.value, "message": self.message}

    def to_payload(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "reason": self.reason.value,
            "message": self.message,
            "rule": self.rule,
            "deadline": self.deadline,
            "evidence": [e.to_payload() for e in self.evidence],
            "history": self.history.to_payload(),
        }

    @classmethod
    def from_payload(cls, data: Mapping[str, Any]) -> Verdict:
        return cls(
            outcome=Outcome(data["outcome"]),
            reason=Reason(data["reason"]),
            message=str(data["message"]),
            rule=str(data["rule"]),
            deadline=None if data.get("deadline") is None else float(data["deadline"]),
            evidence=tuple(Evidence.from_payload(e) for e in data.get("evidence") or ()),
            history=History.from_payload(data.get("history")),
        )
