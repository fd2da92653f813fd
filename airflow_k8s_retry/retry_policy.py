"""``PodFailureRetryPolicy``: what happens between two tries, decided by the cause of the first.

Airflow 3.3 asks a task's ``retry_policy`` what to do with the exception a failed try raised
(``RetryPolicy.evaluate`` returns a ``RetryDecision``: retry, fail, or Airflow's default, with an
optional delay and a reason). The operator and the sensor raise one exception class per cause
family (:mod:`airflow_k8s_retry.exceptions`), each carrying its ``Verdict``; this policy reads the
verdict's reason code and answers with a delay that suits it (a registry's rate limit waits longer,
a lost node not at all) and the reason ``"<reason code>: <message>"``, which Airflow stores as the
try's ``retry_reason`` in ``task_instance`` and ``task_instance_history``, so the try history says
why each try failed.

The two policies have one precedence. The operator's ``FailurePolicy`` decides *inside* a try: how
long a cause may last (its grace) and whether it is permanent (``fail``, an ``AirflowFailException``
that Airflow never shows a retry policy). The retry policy decides *between* tries, and only for
retryable causes: how long to wait, or to fail after all. So a retry policy can make a retryable
cause fail at once, never make a permanent one retry; a rule that asks for that is refused when the
DAG is parsed (:func:`check_against`).

``RetryingPodOperator`` and ``PodCompletionSensor`` use ``PodFailureRetryPolicy()`` on Airflow 3.3+
when the DAG author sets no ``retry_policy``; an author's own policy is consulted first and this one
after it (:func:`effective_retry_policy`). On Airflow 3.1 and 3.2, which have no retry policies,
``retries`` and ``retry_delay`` apply as written.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from functools import cache
from typing import TYPE_CHECKING, Any

from airflow_k8s_retry import compat
from airflow_k8s_retry.classification.model import Outcome, Reason
from airflow_k8s_retry.classification.policy import DEFAULT_POLICY
from airflow_k8s_retry.classification.retries import (
    DEFAULT_STEPS,
    REASON_LIMIT,
    RETRY_AFTER_TASK_DELAY,
    Delay,
    RetryPolicyError,
    RetryStep,
    RetrySteps,
)
from airflow_k8s_retry.classification.rules import RULES
from airflow_k8s_retry.compat import (
    HAS_RETRY_POLICIES,
    RetryDecision,
    RetryPolicy,
    RetryPolicyBase,
)
from airflow_k8s_retry.exceptions import PodFailure

if TYPE_CHECKING:
    from airflow_k8s_retry.classification.policy import FailurePolicy

__all__ = [
    "DEFAULT_STEPS",
    "Delay",
    "PodFailureRetryPolicy",
    "RetryPolicyError",
    "RetryStep",
    "effective_retry_policy",
    "ignore_retry_policy_before_3_3",
    "install_retry_policy",
    "reason_text",
]


class PodFailureRetryPolicy(RetryPolicyBase):  # type: ignore[misc]
    """A retry policy that waits per cause and records each try's reason code (Airflow 3.3+).

    :param rules: by reason code (``"image.rate_limited"``) or family (``"image"``), what to do after
        a try that failed with that cause: a ``timedelta`` or seconds (a fixed delay), a
        :class:`Delay` (fixed, exponential with a cap, or counted from when the cause was first
        seen), ``"fail"`` (fail now), ``"retry"`` (after the task's ``retry_delay``), ``"default"``
        (no opinion) or a :class:`RetryStep`. A code's rule beats its family's; the author's rules
        beat the defaults (:data:`DEFAULT_STEPS`).
    :param defaults: start from :data:`DEFAULT_STEPS` (``False``: every cause not in ``rules``
        retries after the task's ``retry_delay``).

    Every decision on a pod's failure carries the reason ``"<reason code>: <message>"``. Exceptions
    that are not a pod's failure get no opinion (``RetryDecision.default()``).

    Example:
        >>> from datetime import timedelta
        >>> policy = PodFailureRetryPolicy(rules={
        ...     "container.oom": "fail",                      # the same memory would be killed again
        ...     "image.rate_limited": timedelta(minutes=10),  # a fixed delay
        ...     "node": Delay.fixed(0),                       # a family: node.disruption, node.lost
        ... })
        >>> policy.table.step_for("container.oom").action
        'fail'
        >>> [policy.table.step_for(code).delay.seconds for code in ("node.lost", "image.rate_limited")]
        [0, 600.0]
    """

    def __init__(self, rules: Mapping[Any, Any] | None = None, *, defaults: bool = True) -> None:
        self.table = RetrySteps.of(rules, defaults=defaults)

    @property
    def rules(self) -> Mapping[str, RetryStep]:
        """The author's own rules, by reason code or family."""
        return self.table.rules

    def __repr__(self) -> str:
        return f"PodFailureRetryPolicy(rules={dict(self.rules)!r}, defaults={self.table.defaults})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PodFailureRetryPolicy) and self.table == other.table

    def __hash__(self) -> int:
        return hash(repr(self.serialize()))

    def step_for(self, reason: str) -> RetryStep:
        """The step for a reason code: its own rule, else its family's, else retry after ``retry_delay``."""
        return self.table.step_for(reason)

    def evaluate(self, exception: BaseException, try_number: int, max_tries: int, context: Any = None) -> Any:
        if not isinstance(exception, PodFailure):
            return RetryDecision.default()
        reason = reason_text(exception)
        verdict = exception.verdict
        step = self.step_for(verdict.reason.value) if verdict is not None else RETRY_AFTER_TASK_DELAY
        if step.action == "fail":
            return RetryDecision.fail(reason=reason)
        if step.action == "default":
            return RetryDecision.default()
        delay = None
        if step.delay is not None:
            delay = timedelta(seconds=step.delay.seconds_for(try_number=try_number, verdict=verdict))
        return RetryDecision.retry(delay=delay, reason=reason)

    def serialize(self) -> dict[str, Any]:
        return {"__type": "PodFailureRetryPolicy", **self.table.to_payload()}

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> PodFailureRetryPolicy:
        policy = cls()
        policy.table = RetrySteps.from_payload(data)
        return policy

    def describe(self) -> list[tuple[str, str]]:
        """Each reason code or family with what the policy does after it, the catch-all last."""
        return self.table.describe()


def reason_text(exception: BaseException) -> str:
    """``"<reason code>: <message>"`` of a pod's failure, cut to Airflow's 500 characters."""
    verdict = getattr(exception, "verdict", None)
    if verdict is None:
        return f"pod.failed: {exception}"[:REASON_LIMIT]
    return f"{verdict.reason.value}: {verdict.message}"[:REASON_LIMIT]


@cache
def _recording_chain() -> type:
    """Built on first use: a ``ChainRetryPolicy`` whose decision on a pod's failure always names the
    cause first (``"<reason code>: <message> (decided by ...)"``), whichever policy decided."""

    # compat resolves ChainRetryPolicy on first use: Airflow 3.1 and 3.2 have none
    class PodReasonChain(compat.ChainRetryPolicy):  # type: ignore[misc]
        """The DAG author's retry policy first, then ``PodFailureRetryPolicy``'s defaults."""

        def evaluate(
            self, exception: BaseException, try_number: int, max_tries: int, context: Any = None
        ) -> Any:
            decision = super().evaluate(
                exception=exception, try_number=try_number, max_tries=max_tries, context=context
            )
            if not isinstance(exception, PodFailure) or decision.reason is None:
                return decision
            head = reason_text(exception)
            if decision.reason.startswith(f"{PodFailureRetryPolicy.__name__}: "):
                return replace(decision, reason=head)  # the package's defaults decided
            tail = f" (decided by {decision.reason})"[: REASON_LIMIT // 2]
            return replace(decision, reason=head[: REASON_LIMIT - len(tail)] + tail)

    PodReasonChain.__module__, PodReasonChain.__qualname__ = __name__, "PodReasonChain"
    return PodReasonChain


def __getattr__(name: str) -> Any:
    """``PodReasonChain`` (built on first use: its base class is Airflow's), so pickles find it."""
    if name == "PodReasonChain" and HAS_RETRY_POLICIES:
        return _recording_chain()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def effective_retry_policy(task_id: str, policy: object, failure_policy: FailurePolicy | None = None) -> Any:
    """The ``retry_policy`` a pod task runs with on Airflow 3.3+: the package's defaults when the
    author set none, the author's ``PodFailureRetryPolicy`` (or a chain holding one) as given, and any
    other policy chained before the defaults. ``None`` on Airflow 3.1 and 3.2.

    Raises a one-line ``RetryPolicyError`` for a value that is not a retry policy, or a rule that
    contradicts the failure policy (:func:`check_against`).
    """
    if not HAS_RETRY_POLICIES:
        return None
    if policy is None:
        return PodFailureRetryPolicy()
    if not isinstance(policy, RetryPolicy):
        raise RetryPolicyError(
            f"{task_id}: retry_policy must be an Airflow RetryPolicy (for example "
            f"PodFailureRetryPolicy(...) or ExceptionRetryPolicy(...)), got {type(policy).__name__}"
        )
    ours = _pod_policies(policy)
    for found in ours:
        check_against(task_id, found, failure_policy)
    if ours:
        return policy
    return _recording_chain()([policy, PodFailureRetryPolicy()])


def install_retry_policy(task: Any, failure_policy: FailurePolicy | None) -> None:
    """Set ``task.retry_policy`` to :func:`effective_retry_policy` of what the author gave; on
    Airflow 3.1 and 3.2 leave the task as it is."""
    policy = effective_retry_policy(task.task_id, getattr(task, "retry_policy", None), failure_policy)
    if policy is not None:  # Airflow 3.3+: the cause of each try decides what follows it
        task.retry_policy = policy


def ignore_retry_policy_before_3_3(task_id: str, kwargs: dict[str, Any]) -> None:
    """On Airflow 3.1 and 3.2, which have no retry policies, take ``retry_policy`` out of the
    operator's arguments with one warning, so a DAG written for 3.3 still imports there."""
    if HAS_RETRY_POLICIES or "retry_policy" not in kwargs:
        return
    policy = kwargs.pop("retry_policy")
    if policy is not None:
        warnings.warn(
            f"{task_id}: retry_policy needs Airflow 3.3 or later and is ignored here; "
            "retries and retry_delay apply as written",
            UserWarning,
            stacklevel=3,
        )


def _pod_policies(policy: object) -> list[PodFailureRetryPolicy]:
    if isinstance(policy, PodFailureRetryPolicy):
        return [policy]
    inner = getattr(policy, "policies", None)
    if isinstance(inner, list | tuple):
        return [p for sub in inner for p in _pod_policies(sub)]
    return []


def check_against(task_id: str, policy: PodFailureRetryPolicy, failure_policy: FailurePolicy | None) -> None:
    """Refuse a retry rule the failure policy makes unreachable: a ``"retry"`` for a cause that is
    permanent or a skip (the task never raises a retryable exception for it)."""
    failure_policy = failure_policy or DEFAULT_POLICY
    for key, step in sorted(policy.rules.items()):
        if step.action != "retry":
            continue
        outcomes = {o for reason in _reasons_under(key) for o in _outcomes_of(reason, failure_policy)}
        if outcomes and not outcomes & {Outcome.RETRY, Outcome.RELAUNCH}:
            said = "/".join(sorted(o.value for o in outcomes))
            raise RetryPolicyError(
                f"{task_id}: retry_policy rule {key!r} retries a cause the failure policy ends with "
                f"{said!r}, which Airflow never retries; remove the rule, or set "
                f"failure_policy=FailurePolicy(outcomes={{{key!r}: 'retry'}})"
            )


def _reasons_under(key: str) -> list[Reason]:
    return [r for r in Reason if r.value == key or r.value.partition(".")[0] == key]


def _outcomes_of(reason: Reason, failure_policy: FailurePolicy) -> set[Outcome]:
    """What a try with this cause can end in (the rules' outcomes, after the failure policy's
    overrides); an exit code also fails or skips by the exit-code lists, and retries otherwise."""
    overridden = failure_policy.outcome_for(reason)
    found = {
        overridden or rule.outcome
        for rule in RULES
        if rule.reason is reason and rule.outcome not in (Outcome.WAIT, Outcome.SUCCEED)
    }
    if reason in (Reason.API_REJECTED, Reason.API_TLS_ERROR):  # judged at create, not by the table
        found.add(Outcome.FAIL)
    elif reason.value.startswith("api."):
        found.add(Outcome.RETRY)
    return found
