"""The triggers: ``PodStateTrigger`` (``pod.py``) follows one try's pod, or, for the sensor, a target
(``target.py``); ``tracker.py`` decides what a followed pod means and when to look again, with no I/O.

``PodStateTrigger`` and the trigger's other public names are importable from here because that is
the classpath stored with every deferred task (``airflow_k8s_retry.triggers.PodStateTrigger``):
triggers already in the database deserialize after an upgrade. They are loaded on first use, so
importing ``triggers.tracker`` alone loads no Airflow and no client library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_k8s_retry.triggers.pod import (
        CLASSPATH,
        KILLED_STATES,
        PodEvent,
        PodStateTrigger,
        TaskInstanceGone,
        airflow_task_state,
    )

__all__ = [
    "CLASSPATH",
    "KILLED_STATES",
    "PodEvent",
    "PodStateTrigger",
    "TaskInstanceGone",
    "airflow_task_state",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from airflow_k8s_retry.triggers import pod

        return getattr(pod, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
