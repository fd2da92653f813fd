"""The Airflow names that moved between the supported Airflow releases (3.1 to 3.3), in one place.

The package and its tests import these from here, never from Airflow, so this is the only module
that knows where a name lives in which release.

- The task-control exceptions (fail without retrying, skip, the deferral errors, ``TaskDeferred``,
  the sensor timeout, the worker's ``execution_timeout`` alarm) and ``AirflowNotFoundException``
  are the Task SDK's (``airflow.sdk.exceptions``) from Airflow 3.2; Airflow 3.1 has them only in
  ``airflow.exceptions``. On 3.2 and 3.3 ``airflow.exceptions`` re-exports the Task SDK's classes
  (with a deprecation warning), so each name is one class on every supported release and the Task
  SDK's spelling is tried first. ``AirflowException``, ``AirflowRuntimeError`` and ``ErrorType``
  are in ``airflow.sdk.exceptions`` on every release.
- A trigger's ``on_kill`` (the triggerer calls it when a user kills a deferred task) exists from
  Airflow 3.3; on 3.1 and 3.2 a cancelled trigger gets none (:func:`triggers_get_on_kill`).
- Retry policies (``RetryPolicy``, ``RetryDecision``) exist from Airflow 3.3
  (``airflow.sdk.definitions.retry_policy``); ``ChainRetryPolicy`` is the SDK's from 3.4 and the
  common-compat provider's on 3.3. On 3.1 and 3.2 :data:`HAS_RETRY_POLICIES` is false and
  ``RetryPolicyBase`` is a plain ``object``, so the package's policy class still imports there.
- ``DagBag`` (the DAG processor's file parser; tests parse DAG files with it as Airflow does) is
  ``airflow.dag_processing.dagbag.DagBag`` from 3.2 and ``airflow.models.dagbag.DagBag`` in 3.1.
  It loads much of Airflow, so :func:`dagbag_class` imports it only when called.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk.exceptions import AirflowException, AirflowRuntimeError, ErrorType

try:
    from airflow.sdk.exceptions import (
        AirflowFailException,
        AirflowNotFoundException,
        AirflowSensorTimeout,
        AirflowSkipException,
        AirflowTaskTimeout,
        TaskDeferralError,
        TaskDeferralTimeout,
        TaskDeferred,
    )
except ImportError:  # Airflow 3.1
    from airflow.exceptions import (  # type: ignore[no-redef, attr-defined]
        AirflowFailException,
        AirflowNotFoundException,
        AirflowSensorTimeout,
        AirflowSkipException,
        AirflowTaskTimeout,
        TaskDeferralError,
        TaskDeferralTimeout,
        TaskDeferred,
    )

try:
    from airflow.sdk.definitions.retry_policy import RetryDecision, RetryPolicy

    HAS_RETRY_POLICIES = True
    RetryPolicyBase: type = RetryPolicy
except ImportError:  # Airflow 3.1, 3.2
    HAS_RETRY_POLICIES = False
    RetryPolicyBase = object
    RetryDecision = RetryPolicy = None  # type: ignore[assignment,misc]


def __getattr__(name: str) -> Any:
    """``ChainRetryPolicy``, imported on first use (Airflow 3.4's SDK, else the common-compat provider's)."""
    if name == "ChainRetryPolicy":
        try:
            from airflow.sdk.definitions.retry_policy import ChainRetryPolicy  # type: ignore[attr-defined]
        except ImportError:
            from airflow.providers.common.compat.sdk import ChainRetryPolicy
        return ChainRetryPolicy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def dagbag_class() -> Any:
    """Airflow's ``DagBag`` class, imported on call (it loads much of Airflow)."""
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow 3.1
        from airflow.models.dagbag import DagBag  # type: ignore[no-redef]
    return DagBag


def triggers_get_on_kill() -> bool:
    """Whether this Airflow's triggerer calls a trigger's ``on_kill`` on a user's kill (3.3 on)."""
    from airflow.triggers.base import BaseTrigger

    return hasattr(BaseTrigger, "on_kill")


__all__ = [
    "HAS_RETRY_POLICIES",
    "AirflowException",
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowRuntimeError",
    "AirflowSensorTimeout",
    "AirflowSkipException",
    "AirflowTaskTimeout",
    "ErrorType",
    "RetryDecision",
    "RetryPolicy",
    "RetryPolicyBase",
    "TaskDeferralError",
    "TaskDeferralTimeout",
    "TaskDeferred",
    "dagbag_class",
    "triggers_get_on_kill",
]
