"""What a DAG author may change about the default rules, checked when the DAG file is parsed.

``FailurePolicy`` is a frozen value that travels in trigger kwargs, so it converts to and from a
JSON-safe payload. Every check happens in the constructor: a typo in a reason code or a negative
grace fails the DAG import with a message naming the field, not a task run hours later.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, get_args

from airflow_k8s_retry.classification.model import Outcome, Reason
from airflow_k8s_retry.classification.rules import TimeoutField, graceable_reasons, overridable_reasons


class PolicyError(ValueError):
    """A ``FailurePolicy`` value is invalid; the message names the field and how to fix it."""


#: Outcomes a DAG author may give a reason code. ``wait`` is never an outcome of its own (use a
#: grace instead) and ``succeed`` would turn a failed pod into a success (use ``skip``).
OVERRIDE_OUTCOMES = frozenset({Outcome.RETRY, Outcome.FAIL, Outcome.RELAUNCH, Outcome.SKIP})

_NUMBER_FIELDS: tuple[TimeoutField, ...] = get_args(TimeoutField)


@dataclass(frozen=True)
class FailurePolicy:
    """Per-operator changes to the default classification rules.

    :param grace: seconds to wait before acting on a reason, by reason code, e.g.
        ``{"image.not_found": 5}``. Only reasons that have a grace by default accept one.
    :param outcomes: outcome for a reason code once its grace is over: ``"retry"``, ``"fail"``,
        ``"relaunch"`` or ``"skip"``, e.g. ``{"image.unauthorized": "fail"}``.
    :param fail_on_exit_codes: container exit codes that fail the task without retrying.
    :param skip_on_exit_codes: container exit codes that mark the task skipped.
    :param relaunch_budget: fresh pods a try may start after infrastructure took its pod away
        (preemption, drain, eviction, lost node); past it a disruption costs a try.
    :param startup_timeout: seconds a pod may stay pending without another explanation.
    :param schedule_timeout: seconds a pod may stay unschedulable.
    :param running_recheck: seconds between safety re-checks of a running pod.
    :param scale_up_timeout: seconds an unschedulable pod may wait after an Event says a node is
        being provisioned for it (cluster-autoscaler's ``TriggeredScaleUp``, Karpenter's
        ``Nominated``; a node usually takes minutes to join, a GPU node ten and more), counted from
        the newest such Event, until one says provisioning failed; never more than
        ``schedule_timeout + scale_up_timeout`` in all.
    :param queue_timeout: seconds a pod may wait behind scheduling gates (an admission queue such as
        Kueue's) before the try is retried as ``schedule.queue_timeout``; ``schedule_timeout`` starts
        only once the last gate is lifted. ``None`` (the default): until the task's
        ``execution_timeout`` when it has one, else :data:`DEFAULT_QUEUE_TIMEOUT` (24 hours).

    Example:
        >>> FailurePolicy(grace={"image.not_found": 5}, outcomes={"image.unauthorized": "fail"},
        ...               fail_on_exit_codes=[3], relaunch_budget=1).outcome_for(Reason.IMAGE_UNAUTHORIZED)
        <Outcome.FAIL: 'fail'>
    """

    grace: Mapping[Reason | str, float] = field(default_factory=dict)
    outcomes: Mapping[Reason | str, Outcome | str] = field(default_factory=dict)
    fail_on_exit_codes: Collection[int] | int = ()
    skip_on_exit_codes: Collection[int] | int = ()
    relaunch_budget: int = 3
    startup_timeout: float = 900.0
    schedule_timeout: float = 600.0
    running_recheck: float = 600.0
    scale_up_timeout: float = 900.0
    queue_timeout: float | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "grace", _check_grace(self.grace, graceable_reasons()))
        set_(self, "outcomes", _check_outcomes(self.outcomes, overridable_reasons()))
        fail = exit_codes(self.fail_on_exit_codes, label="FailurePolicy.fail_on_exit_codes")
        skip = exit_codes(self.skip_on_exit_codes, label="FailurePolicy.skip_on_exit_codes", success=True)
        both = sorted(set(fail) & set(skip))
        if both:
            raise PolicyError(
                f"FailurePolicy: exit code(s) {both} are in both fail_on_exit_codes and "
                "skip_on_exit_codes; keep each code in one list only"
            )
        set_(self, "fail_on_exit_codes", fail)
        set_(self, "skip_on_exit_codes", skip)
        budget = self.relaunch_budget
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise PolicyError(
                f"FailurePolicy.relaunch_budget must be a whole number >= 0, got {budget!r}; "
                "use 0 to turn every disruption into a retry"
            )
        for name in _NUMBER_FIELDS:
            if name == "queue_timeout" and self.queue_timeout is None:
                continue  # the task's execution_timeout, else DEFAULT_QUEUE_TIMEOUT
            set_(self, name, _seconds(f"FailurePolicy.{name}", getattr(self, name), positive=True))

    def __hash__(self) -> int:
        # The mappings make the generated hash fail; the payload is the value's identity.
        return hash(json.dumps(self.to_payload(), sort_keys=True))

    def timeout(self, name: TimeoutField) -> float:
        """The seconds of one of the timeout fields, by name."""
        if name not in _NUMBER_FIELDS:
            raise KeyError(
                f"FailurePolicy has no timeout field {name!r}; fields: {', '.join(_NUMBER_FIELDS)}"
            )
        value = getattr(self, name)
        return DEFAULT_QUEUE_TIMEOUT if value is None else float(value)

    def until_execution_timeout(self) -> FailurePolicy:
        """This policy for a task with an ``execution_timeout``: a ``queue_timeout`` left unset waits
        for as long as a policy may (:data:`MAX_SECONDS`), so the task's own deadline, which the
        trigger enforces, ends a queued wait first."""
        return self if self.queue_timeout is not None else replace(self, queue_timeout=MAX_SECONDS)

    def grace_for(self, reason: Reason) -> float | None:
        """The grace the policy sets for ``reason``, or ``None`` to keep the rule's default."""
        value = self.grace.get(reason)
        return None if value is None else float(value)

    def outcome_for(self, reason: Reason) -> Outcome | None:
        """The outcome the policy sets for ``reason``, or ``None`` to keep the rule's default."""
        value = self.outcomes.get(reason)
        return None if value is None else Outcome(value)

    def to_payload(self) -> dict[str, Any]:
        return {
            "grace": {Reason(k).value: float(v) for k, v in sorted(self.grace.items())},
            "outcomes": {Reason(k).value: Outcome(v).value for k, v in sorted(self.outcomes.items())},
            "fail_on_exit_codes": list(exit_codes(self.fail_on_exit_codes)),
            "skip_on_exit_codes": list(exit_codes(self.skip_on_exit_codes, success=True)),
            "relaunch_budget": self.relaunch_budget,
            **{name: getattr(self, name) for name in _NUMBER_FIELDS},
        }

    @classmethod
    def from_payload(cls, data: Mapping[str, Any] | None) -> FailurePolicy:
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise PolicyError(f"a FailurePolicy payload must be a mapping, got {type(data).__name__}")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise PolicyError(
                f"FailurePolicy payload has unknown field(s) {unknown}; valid fields: {sorted(known)}"
            )
        return cls(**dict(data))


def _reason(field_name: str, key: object, valid: frozenset[Reason]) -> Reason:
    choices = ", ".join(sorted(r.value for r in valid))
    try:
        if not isinstance(key, str):
            raise ValueError(key)
        reason = Reason(key)
    except ValueError:
        raise PolicyError(
            f"FailurePolicy.{field_name}: unknown reason code {key!r}; valid codes: {choices}"
        ) from None
    if reason not in valid:
        raise PolicyError(
            f"FailurePolicy.{field_name}: reason code {reason.value!r} cannot be set here; "
            f"valid codes: {choices}"
        )
    return reason


#: The longest grace or timeout a policy may set (30 days): anything longer is a typo, and past
#: year 9999 it could not even be shown as a time.
MAX_SECONDS = 30 * 86400.0
#: How long a pod may wait behind scheduling gates when neither ``queue_timeout`` nor the task's
#: ``execution_timeout`` says: a day, longer than a busy Kueue queue usually holds a workload, short
#: enough that a gate nobody will ever lift (a removed queue, a controller that failed to remove it)
#: does not hold a task for good.
DEFAULT_QUEUE_TIMEOUT = 86400.0


def _seconds(name: str, value: object, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PolicyError(f"{name} must be a finite number of seconds, got {value!r}")
    if value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise PolicyError(f"{name} must be {bound} seconds, got {value!r}")
    if value > MAX_SECONDS:
        raise PolicyError(f"{name} must be at most 30 days ({MAX_SECONDS:.0f} seconds), got {value!r}")
    return float(value)


def _check_grace(value: object, valid: frozenset[Reason]) -> dict[Reason, float]:
    if not isinstance(value, Mapping):
        raise PolicyError(
            f"FailurePolicy.grace must map reason codes to seconds, e.g. {{'image.not_found': 30}}, "
            f"got {type(value).__name__}"
        )
    result: dict[Reason, float] = {}
    for key, seconds in value.items():
        reason = _reason("grace", key, valid)
        result[reason] = _seconds(f"FailurePolicy.grace[{reason.value!r}]", seconds)
    return result


def _check_outcomes(value: object, valid: frozenset[Reason]) -> dict[Reason, Outcome]:
    if not isinstance(value, Mapping):
        raise PolicyError(
            "FailurePolicy.outcomes must map reason codes to outcomes, e.g. "
            f"{{'image.unauthorized': 'fail'}}, got {type(value).__name__}"
        )
    allowed = ", ".join(sorted(o.value for o in OVERRIDE_OUTCOMES))
    result: dict[Reason, Outcome] = {}
    for key, raw in value.items():
        reason = _reason("outcomes", key, valid)
        try:
            outcome = Outcome(raw)
        except ValueError:
            raise PolicyError(
                f"FailurePolicy.outcomes[{reason.value!r}]: unknown outcome {raw!r}; use one of: {allowed}"
            ) from None
        if outcome not in OVERRIDE_OUTCOMES:
            hint = "set a grace instead" if outcome is Outcome.WAIT else "use 'skip' instead"
            raise PolicyError(
                f"FailurePolicy.outcomes[{reason.value!r}]: {outcome.value!r} is not allowed as an "
                f"override ({hint}); use one of: {allowed}"
            )
        result[reason] = outcome
    return result


def exit_codes(value: object, *, label: str = "exit codes", success: bool = False) -> tuple[int, ...]:
    """One exit code or a collection of them, as a sorted tuple without repeats.

    The one normalisation of exit-code lists (``FailurePolicy``, the operator's KPO-style
    ``skip_on_exit_code``, the classifier); raises :class:`PolicyError` naming ``label``. With
    ``success``, 0 is allowed too (``skip_on_exit_codes``: as KPO's ``skip_on_exit_code=0``, a base
    container that exits 0 skips the task).

    >>> exit_codes(3), exit_codes([4, 2, 4]), exit_codes(0, success=True)
    ((3,), (2, 4), (0,))
    """
    codes: Collection[object]
    if isinstance(value, int) and not isinstance(value, bool):
        codes = (value,)
    elif isinstance(value, Collection) and not isinstance(value, str | bytes | Mapping):
        codes = value
    else:
        raise PolicyError(f"{label} must be a list of exit codes, got {value!r}")
    lowest = 0 if success else 1
    result: set[int] = set()
    for code in codes:
        if isinstance(code, bool) or not isinstance(code, int) or not lowest <= code <= 255:
            hint = (
                "use whole numbers from 0 to 255"
                if success
                else "use whole numbers from 1 to 255 (0 means success and never reaches an exit-code rule)"
            )
            raise PolicyError(f"{label}: {code!r} is not an exit code here; {hint}")
        result.add(code)
    return tuple(sorted(result))


#: The defaults of DESIGN's table, used when no policy is given.
DEFAULT_POLICY = FailurePolicy()
