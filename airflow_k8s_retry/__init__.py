"""Kubernetes pods for Apache Airflow 3 that are classified once, cleaned up, and retried by Airflow.

Importing this package is cheap and has no side effects: the operator, sensor and trigger live in
their own modules and load the Kubernetes clients only when a task runs.
"""

from __future__ import annotations

__version__ = "0.1.0"
