"""The operator: ``RetryingPodOperator`` (``pod.py``), a try's whole life in the worker, and the
KPO arguments it accepts or refuses (``arguments.py``)."""

from airflow_k8s_retry.operators.pod import RetryingPodOperator

__all__ = ["RetryingPodOperator"]
