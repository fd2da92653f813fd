"""The operator: ``RetryingPodOperator`` (``pod.py``), with the parts of its try in modules of their
own: the try's pod (``try_pod.py``), how a try ends (``endings.py``), a try lost with its worker
(``lost_try.py``) and the KPO arguments it accepts or refuses (``arguments.py``)."""

from airflow_k8s_retry.operators.pod import RetryingPodOperator

__all__ = ["RetryingPodOperator"]
