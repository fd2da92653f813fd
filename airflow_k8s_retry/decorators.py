"""``@task.retrying_kubernetes``: the counterpart of ``@task.kubernetes`` for ``RetryingPodOperator``.

The cncf provider's decorated operator (it ships the function's source and pickled arguments to
the pod through two environment variables and runs it with ``python``) is reused as it is, on top
of ``RetryingPodOperator`` instead of ``KubernetesPodOperator``. One thing needs care: after a
relaunch, ``execute_complete`` runs in a fresh process where the script's environment variables
and command were never set, so the decorated operator prepares them again before the relaunch's
pod is built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from airflow.providers.cncf.kubernetes.decorators.kubernetes import _KubernetesDecoratedOperator
from airflow.providers.common.compat.sdk import task_decorator_factory

from airflow_k8s_retry.operators.pod import RetryingPodOperator

if TYPE_CHECKING:
    from airflow.sdk import Context


class _ResumeThroughExecute(RetryingPodOperator):
    """Sits between the provider's decorated operator and ``RetryingPodOperator`` in the MRO: when
    a verdict is being acted on, ``execute`` (reached after the decorator set up the script) hands
    over to ``execute_complete`` instead of creating a pod."""

    _resume: tuple[Mapping[str, Any] | None, float | None] | None = None

    def execute(self, context: Context) -> Any:
        if self._resume is not None:
            event, deadline = self._resume
            return RetryingPodOperator.execute_complete(self, context, event, deadline)
        return super().execute(context)


class _RetryingKubernetesDecoratedOperator(_KubernetesDecoratedOperator, _ResumeThroughExecute):  # type: ignore[misc]
    custom_operator_name = "@task.retrying_kubernetes"

    def execute_complete(
        self,
        context: Context,
        event: Mapping[str, Any] | None = None,
        execution_deadline: float | None = None,
    ) -> Any:
        self._resume = (event, execution_deadline)
        try:
            return self.execute(context)
        finally:
            self._resume = None


def retrying_kubernetes_task(
    python_callable: Callable[..., Any] | None = None,
    multiple_outputs: bool | None = None,
    **kwargs: Any,
) -> Any:
    """Run the decorated function in a pod with ``RetryingPodOperator``'s lifecycle.

    Takes every ``RetryingPodOperator`` argument; ``image`` must have Python (and ``dill`` with
    ``use_dill=True``).

    Example::

        @task.retrying_kubernetes(image="python:3.11-slim", retries=2)
        def transform(rows: int) -> int:
            return rows * 2
    """
    return task_decorator_factory(
        python_callable=python_callable,
        multiple_outputs=multiple_outputs,
        decorated_operator_class=_RetryingKubernetesDecoratedOperator,
        **kwargs,
    )
