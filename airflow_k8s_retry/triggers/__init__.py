"""The triggers: ``PodStateTrigger`` (``pod.py``) follows one try's pod, ``PodTargetTrigger``
(``target.py``) what a sensor waits for; ``tracker.py`` decides what a followed pod means and when
to look again, with no I/O.

The two triggers are importable from here because that is the classpath stored with every deferred
task (``airflow_k8s_retry.triggers.PodStateTrigger``). They are loaded on first use, so importing
``triggers.tracker`` alone loads no Airflow and no client library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_k8s_retry.triggers.pod import PodStateTrigger
    from airflow_k8s_retry.triggers.target import PodTargetTrigger

__all__ = ["PodStateTrigger", "PodTargetTrigger"]


def __getattr__(name: str) -> Any:
    if name == "PodStateTrigger":
        from airflow_k8s_retry.triggers.pod import PodStateTrigger

        return PodStateTrigger
    if name == "PodTargetTrigger":
        from airflow_k8s_retry.triggers.target import PodTargetTrigger

        return PodTargetTrigger
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
