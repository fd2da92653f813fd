"""The sensor: ``PodCompletionSensor`` (``pod.py``) waits for a pod or Job the task did not create."""

from airflow_k8s_retry.sensors.pod import PodCompletionSensor

__all__ = ["PodCompletionSensor"]
