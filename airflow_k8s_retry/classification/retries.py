"""What happens between two tries, by cause: the pure table behind ``PodFailureRetryPolicy``.

A failed try's reason code picks a :class:`RetryStep`: retry after a :class:`Delay` (fixed,
exponential with a cap, or counted from when the cause was first seen), retry after the task's own
``retry_delay``, fail now, or no opinion. :data:`DEFAULT_STEPS` are the defaults by reason code or
family; :class:`RetrySteps` merges a DAG author's rules over them. Airflow's side (the
``RetryPolicy`` that Airflow 3.3 calls with the task's exception) is
:mod:`airflow_k8s_retry.retry_policy`; this module has no Airflow import, so ``explain`` and the docs
read the same table.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from airflow_k8s_retry.classification.model import Reason, Verdict

#: Airflow stores at most this many characters of a try's ``retry_reason``.
REASON_LIMIT = 500

DelayKind = Literal["fixed", "exponential", "after_grace"]
Action = Literal["retry", "fail", "default"]


def _as_seconds(value: float | timedelta) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else value


def _duration(seconds: float) -> str:
    if seconds and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


class RetryPolicyError(ValueError):
    """A ``PodFailureRetryPolicy`` value is invalid; the message names the rule and how to fix it."""


@dataclass(frozen=True)
class Delay:
    """How long to wait before the next try.

    - ``Delay.fixed(seconds)``: always the same;
    - ``Delay.exponential(seconds, factor=2, cap=...)``: ``seconds * factor ** (try_number - 1)``,
      at most ``cap``;
    - ``Delay.after_grace(seconds)``: ``seconds`` counted from when the cause was first seen, so a
      grace already spent waiting inside the try (a rate limit's 15 minutes) is not waited again.

    Example:
        >>> Delay.exponential(60, cap=300).seconds_for(try_number=4)
        300.0
    """

    kind: DelayKind
    seconds: float
    factor: float = 2.0
    cap: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("fixed", "exponential", "after_grace"):
            raise RetryPolicyError(
                f"Delay kind must be 'fixed', 'exponential' or 'after_grace', got {self.kind!r}"
            )
        for name, value in (("seconds", self.seconds), ("factor", self.factor), ("cap", self.cap)):
            if value is None and name == "cap":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise RetryPolicyError(f"Delay.{name} must be a finite number, got {value!r}")
            if value < 0 or (name == "factor" and value < 1):
                bound = ">= 1" if name == "factor" else ">= 0 seconds"
                raise RetryPolicyError(f"Delay.{name} must be {bound}, got {value!r}")

    @classmethod
    def fixed(cls, seconds: float | timedelta) -> Delay:
        return cls("fixed", _as_seconds(seconds))

    @classmethod
    def exponential(
        cls, seconds: float | timedelta, *, factor: float = 2.0, cap: float | timedelta | None = None
    ) -> Delay:
        return cls("exponential", _as_seconds(seconds), factor, None if cap is None else _as_seconds(cap))

    @classmethod
    def after_grace(cls, seconds: float | timedelta) -> Delay:
        return cls("after_grace", _as_seconds(seconds))

    def seconds_for(
        self, *, try_number: int, verdict: Verdict | None = None, now: float | None = None
    ) -> float:
        """The delay after try ``try_number`` (1-based) failed with ``verdict``."""
        if self.kind == "exponential":
            try:
                value = self.seconds * self.factor ** max(0, try_number - 1)
            except OverflowError:
                value = math.inf
            return float(min(value, self.cap if self.cap is not None else value, 365 * 86400.0))
        if self.kind == "after_grace" and verdict is not None:
            first = first_seen(verdict)
            if first is not None:
                spent = (time.time() if now is None else now) - first
                return max(0.0, self.seconds - max(0.0, spent))
        return self.seconds

    def describe(self) -> str:
        if self.kind == "exponential":
            cap = f", at most {_duration(self.cap)}" if self.cap is not None else ""
            return f"{_duration(self.seconds)} x{self.factor:g} per try{cap}"
        if self.kind == "after_grace":
            return f"{_duration(self.seconds)} from when the cause was first seen"
        return _duration(self.seconds)

    def to_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"kind": self.kind, "seconds": self.seconds}
        if self.kind == "exponential":
            payload["factor"] = self.factor
            if self.cap is not None:
                payload["cap"] = self.cap
        return payload

    @classmethod
    def from_payload(cls, data: Mapping[str, Any]) -> Delay:
        return cls(
            kind=data["kind"],
            seconds=float(data["seconds"]),
            factor=float(data.get("factor", 2.0)),
            cap=None if data.get("cap") is None else float(data["cap"]),
        )


@dataclass(frozen=True)
class RetryStep:
    """What the policy does after a try failed with one cause.

    ``action``: ``"retry"`` (while tries remain; the delay decides when, ``None`` is the task's
    ``retry_delay``), ``"fail"`` (fail now, the remaining tries unspent) or ``"default"`` (no opinion:
    the next policy, or Airflow's standard retry, decides).
    """

    action: Action = "retry"
    delay: Delay | None = None

    def __post_init__(self) -> None:
        if self.action not in ("retry", "fail", "default"):
            raise RetryPolicyError(
                f"RetryStep action must be 'retry', 'fail' or 'default', got {self.action!r}"
            )
        if self.delay is not None and self.action != "retry":
            raise RetryPolicyError(f"RetryStep: a delay goes only with action 'retry', not {self.action!r}")

    def describe(self) -> str:
        if self.action != "retry":
            return self.action
        return f"retry after {self.delay.describe()}" if self.delay else "retry after the task's retry_delay"

    def to_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"action": self.action}
        if self.delay is not None:
            payload["delay"] = self.delay.to_payload()
        return payload

    @classmethod
    def from_payload(cls, data: Mapping[str, Any]) -> RetryStep:
        delay = data.get("delay")
        return cls(action=data["action"], delay=Delay.from_payload(delay) if delay else None)


RETRY_AFTER_TASK_DELAY = RetryStep("retry")

#: The defaults, by reason code or family; any other cause retries after the task's ``retry_delay``.
#: Causes that pass by themselves but not at once wait longer; causes that a fresh pod avoids
#: (the cluster took the pod away) do not wait at all.
DEFAULT_STEPS: dict[str, RetryStep] = {
    # A registry's pull limit is counted per hours; the try already waited out its grace.
    Reason.IMAGE_RATE_LIMITED.value: RetryStep("retry", Delay.exponential(600, cap=3600)),
    Reason.IMAGE_REGISTRY_UNAVAILABLE.value: RetryStep("retry", Delay.exponential(120, cap=1800)),
    # Capacity and quota come back as other work finishes or the autoscaler adds nodes.
    Reason.SCHEDULE_TIMEOUT.value: RetryStep("retry", Delay.exponential(300, cap=1800)),
    Reason.API_QUOTA_EXCEEDED.value: RetryStep("retry", Delay.exponential(60, cap=900)),
    Reason.API_UNAVAILABLE.value: RetryStep("retry", Delay.exponential(30, cap=600)),
    Reason.API_UNAUTHORIZED.value: RetryStep("retry", Delay.fixed(30)),
    # The cluster took the pod away past the relaunch budget: a fresh pod, now, lands elsewhere.
    "node": RetryStep("retry", Delay.fixed(0)),
}


def _families() -> set[str]:
    return {r.value.partition(".")[0] for r in Reason}


def _key(key: object) -> str:
    if isinstance(key, Reason):
        return key.value
    if isinstance(key, str) and (key in {r.value for r in Reason} or key in _families()):
        return key
    codes = ", ".join(sorted(_families()))
    raise RetryPolicyError(
        f"PodFailureRetryPolicy: unknown reason code or family {key!r}; use a reason code such as "
        f"'container.oom' (docs/classification.md lists them) or a family: {codes}"
    )


def _step(key: str, value: object) -> RetryStep:
    if isinstance(value, RetryStep):
        return value
    if isinstance(value, Delay):
        return RetryStep("retry", value)
    if isinstance(value, timedelta) or (isinstance(value, int | float) and not isinstance(value, bool)):
        return RetryStep("retry", Delay.fixed(value))
    if value in ("retry", "fail", "default"):
        return RetryStep(value)
    raise RetryPolicyError(
        f"PodFailureRetryPolicy rule {key!r}: {value!r} is not a step; use 'fail', 'default', 'retry', "
        "a timedelta or seconds (a fixed delay), a Delay or a RetryStep"
    )


@dataclass(frozen=True)
class RetrySteps:
    """A DAG author's rules (by reason code or family) over the defaults: the author's rules beat
    the defaults, a code's rule beats its family's, and any other cause retries after ``retry_delay``.

    Example:
        >>> RetrySteps.of({"container.oom": "fail"}).step_for("container.oom").action
        'fail'
    """

    rules: Mapping[str, RetryStep] = field(default_factory=dict)
    defaults: bool = True

    @classmethod
    def of(cls, rules: Mapping[Any, Any] | None = None, *, defaults: bool = True) -> RetrySteps:
        if rules is not None and not isinstance(rules, Mapping):
            raise RetryPolicyError(
                "PodFailureRetryPolicy(rules=...) maps reason codes or families to steps, e.g. "
                f"{{'container.oom': 'fail'}}, got {type(rules).__name__}"
            )
        return cls({_key(k): _step(str(k), v) for k, v in (rules or {}).items()}, bool(defaults))

    @property
    def steps(self) -> dict[str, RetryStep]:
        return {**(DEFAULT_STEPS if self.defaults else {}), **self.rules}

    def step_for(self, reason: str) -> RetryStep:
        """The author's rule for the code, else for its family, else the defaults' (likewise),
        else retry after the task's ``retry_delay``."""
        family = reason.partition(".")[0]
        for table in (self.rules, DEFAULT_STEPS if self.defaults else {}):
            step = table.get(reason) or table.get(family)
            if step is not None:
                return step
        return RETRY_AFTER_TASK_DELAY

    def describe(self) -> list[tuple[str, str]]:
        """Each reason code or family with what follows it, the catch-all last."""
        rows = [(k, v.describe()) for k, v in sorted(self.steps.items())]
        return [*rows, ("any other cause", RETRY_AFTER_TASK_DELAY.describe())]

    def to_payload(self) -> dict[str, Any]:
        rules = {k: v.to_payload() for k, v in sorted(self.rules.items())}
        return {"rules": rules, "defaults": self.defaults}

    @classmethod
    def from_payload(cls, data: Mapping[str, Any]) -> RetrySteps:
        rules = {k: RetryStep.from_payload(v) for k, v in dict(data.get("rules") or {}).items()}
        return cls.of(rules, defaults=bool(data.get("defaults", True)))


def first_seen(verdict: Verdict) -> float | None:
    """When the verdict's cause was first seen (its evidence, or the history's signal), if known."""
    times = [e.seen_at for e in verdict.evidence if e.reason is verdict.reason and e.seen_at > 0]
    code = verdict.reason.value
    times += [t for k, t in verdict.history.first_seen.items() if k.startswith(code) and t > 0]
    return min(times) if times else None
