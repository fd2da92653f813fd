"""What a pod's failure raises in the task: one retryable family per cause, and one permanent class.

The retryable exceptions are :class:`PodFailure` and one subclass per cause family, so that a DAG
author's retry policy (Airflow 3.3's ``ExceptionRetryPolicy`` with ``RetryRule``s) and callbacks can
match a cause by class or dotted name, e.g. ``"airflow_k8s_retry.exceptions.PodOOMKilled"``. These
class names and the reason codes each family covers (:data:`FAMILY_OF`) are a stable public contract.

Permanent causes raise :class:`PodFailurePermanent`, an ``AirflowFailException``: Airflow fails the
task without retrying and never consults a retry policy for it. Every exception carries the
``Verdict`` that caused it (``exc.verdict``; ``exc.reason`` is its reason code), where there is one.
A sensor's bad input (:class:`PodSelectionError`) is permanent too: no retry can fix it.

==============================  =========================================================
class                           reason codes
==============================  =========================================================
``ImagePullFailure``            ``image.*`` (not found, unauthorized, rate limited, ...)
``PodConfigFailure``            ``config.*`` (missing Secret, ConfigMap or key)
``VolumeMountFailure``          ``volume.mount_failed``
``PodSchedulingFailure``        ``schedule.*`` (unschedulable past the schedule timeout)
``NodeDisruptionFailure``       ``node.disruption``, ``node.lost`` (past the relaunch budget)
``PodOOMKilled``                ``container.oom``
``ContainerStorageExceeded``    ``container.storage_limit``
``ContainerStartFailure``       ``container.create_error``
``ContainerExitFailure``        ``container.exit_code``, ``pod.failed``
``PodDeletedExternally``        ``pod.deleted_externally``
``PodTimeout``                  ``startup.timeout``, ``pod.deadline_exceeded``,
                                ``execution.timeout``, ``pod.unknown``
``PodCreateFailure``            ``api.*`` (the API refused or never answered the create)
``PodFailure``                  anything else (a watch that ended without a verdict)
==============================  =========================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_k8s_retry.classification.model import Outcome
from airflow_k8s_retry.compat import AirflowException, AirflowFailException, AirflowSkipException

if TYPE_CHECKING:
    from airflow_k8s_retry.classification import Verdict


class _CarriesVerdict(Exception):
    """An exception with the ``Verdict`` that caused it, where there is one."""

    def __init__(self, message: str, verdict: Verdict | None = None) -> None:
        super().__init__(message)
        self.verdict = verdict

    @property
    def reason(self) -> str | None:
        """The verdict's reason code (``"container.oom"``), or ``None`` without a verdict."""
        return None if self.verdict is None else self.verdict.reason.value


class PodFailure(_CarriesVerdict, AirflowException):
    """The pod failed for a cause that another try may not meet: Airflow retries while tries remain."""


class ImagePullFailure(PodFailure):
    """An image could not be pulled (``image.*``) within its grace."""


class PodConfigFailure(PodFailure):
    """A container's configuration could not be created (``config.*``: a Secret, ConfigMap or key)."""


class VolumeMountFailure(PodFailure):
    """A volume could not be attached or mounted (``volume.mount_failed``)."""


class PodSchedulingFailure(PodFailure):
    """The pod found no node within the schedule timeout (``schedule.*``)."""


class NodeDisruptionFailure(PodFailure):
    """The cluster took the pod away (``node.disruption``, ``node.lost``) more often than the
    relaunch budget allows."""


class PodOOMKilled(PodFailure):
    """A container was killed for exceeding its memory limit (``container.oom``, reason ``OOMKilled``)."""


class ContainerStorageExceeded(PodFailure):
    """The pod was evicted for its own ephemeral-storage limit (``container.storage_limit``)."""


class ContainerStartFailure(PodFailure):
    """The runtime could not create or start a container (``container.create_error``)."""


class ContainerExitFailure(PodFailure):
    """A container exited non-zero, or the pod failed otherwise (``container.exit_code``, ``pod.failed``)."""


class PodDeletedExternally(PodFailure):
    """Someone else deleted the pod before it finished (``pod.deleted_externally``)."""


class PodTimeout(PodFailure):
    """A deadline ended the try (``startup.timeout``, ``pod.deadline_exceeded``,
    ``execution.timeout``, ``pod.unknown``)."""


class PodCreateFailure(PodFailure):
    """The API refused, or never answered, the pod's create (``api.*``)."""


class PodFailurePermanent(_CarriesVerdict, AirflowFailException):
    """The pod failed for a cause that another try would meet again: the task fails without retrying."""


class PodSelectionError(AirflowFailException):
    """What a sensor waits for can never be seen (invalid selector, no such namespace, RBAC)."""


#: Each reason code's family, by the code's prefix or the whole code (the whole code wins).
FAMILY_OF: dict[str, type[PodFailure]] = {
    "image": ImagePullFailure,
    "config": PodConfigFailure,
    "volume": VolumeMountFailure,
    "schedule": PodSchedulingFailure,
    "node": NodeDisruptionFailure,
    "api": PodCreateFailure,
    "startup": PodTimeout,
    "execution": PodTimeout,
    "container.oom": PodOOMKilled,
    "container.storage_limit": ContainerStorageExceeded,
    "container.create_error": ContainerStartFailure,
    "container.exit_code": ContainerExitFailure,
    "pod.failed": ContainerExitFailure,
    "pod.deleted_externally": PodDeletedExternally,
    "pod.deadline_exceeded": PodTimeout,
    "pod.unknown": PodTimeout,
}


def failure_class(reason: str) -> type[PodFailure]:
    """The retryable exception class for a reason code (``PodFailure`` for a code of no family).

    >>> failure_class("container.oom").__name__, failure_class("image.rate_limited").__name__
    ('PodOOMKilled', 'ImagePullFailure')
    """
    return FAMILY_OF.get(reason) or FAMILY_OF.get(reason.partition(".")[0]) or PodFailure


def exception_for(verdict: Verdict, message: str) -> Exception:
    """The one mapping from a non-success verdict to what the task raises: ``FAIL`` is permanent,
    ``SKIP`` skips, anything else (``RETRY``) costs one try and raises its family's class."""
    if verdict.outcome is Outcome.FAIL:
        return PodFailurePermanent(message, verdict)
    if verdict.outcome is Outcome.SKIP:
        return AirflowSkipException(message)
    if verdict.outcome is not Outcome.RETRY:
        message += f" (unexpected outcome {verdict.outcome.value!r}, treated as retry)"
    return failure_class(verdict.reason.value)(message, verdict)
