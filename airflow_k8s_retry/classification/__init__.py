"""The pure failure classifier: a pod's JSON, its Events and a per-pod history in, one verdict out.

Imports nothing from Airflow, the Kubernetes clients or the other layers of this package.
"""

from __future__ import annotations

from airflow_k8s_retry.classification.model import (
    FAILURE_OUTCOMES,
    Evidence,
    History,
    Outcome,
    Reason,
    Verdict,
)

__all__ = ["FAILURE_OUTCOMES", "Evidence", "History", "Outcome", "Reason", "Verdict"]
