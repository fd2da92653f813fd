"""The two ways a pod can fail a task: retryable (an Airflow retry) and permanent (no retry).

Both carry the verdict that caused them, so callbacks and tests can read the reason code. A
sensor's bad input (:class:`PodSelectionError`) is permanent too: no retry can fix it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_k8s_retry.compat import AirflowException, AirflowFailException

if TYPE_CHECKING:
    from airflow_k8s_retry.classification import Verdict


class PodFailure(AirflowException):
    """The pod failed for a cause that another try may not meet: Airflow retries while tries remain."""

    def __init__(self, message: str, verdict: Verdict | None = None) -> None:
        super().__init__(message)
        self.verdict = verdict


class PodFailurePermanent(AirflowFailException):
    """The pod failed for a cause that another try would meet again: the task fails without retrying."""

    def __init__(self, message: str, verdict: Verdict | None = None) -> None:
        super().__init__(message)
        self.verdict = verdict


class PodSelectionError(AirflowFailException):
    """What a sensor waits for can never be seen (invalid selector, no such namespace, RBAC)."""


def exception_for(verdict: Verdict, message: str) -> Exception:
    """The one mapping from a non-success verdict to what the task raises: ``FAIL`` is permanent,
    ``SKIP`` skips, anything else (``RETRY``) costs one try."""
    from airflow_k8s_retry.classification.model import Outcome
    from airflow_k8s_retry.compat import AirflowSkipException

    if verdict.outcome is Outcome.FAIL:
        return PodFailurePermanent(message, verdict)
    if verdict.outcome is Outcome.SKIP:
        skip: Exception = AirflowSkipException(message)
        return skip
    if verdict.outcome is not Outcome.RETRY:
        message += f" (unexpected outcome {verdict.outcome.value!r}, treated as retry)"
    return PodFailure(message, verdict)
