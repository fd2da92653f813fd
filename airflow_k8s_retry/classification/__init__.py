"""The pure failure classifier: a pod's JSON, its Events and a per-pod history in, one verdict out.

Imports nothing from Airflow, the Kubernetes clients or the other layers of this package, so DAG
files, the trigger, the CLI and tests can all use it cheaply.

Example:
    >>> from airflow_k8s_retry.classification import classify, FailurePolicy
    >>> pod = {"metadata": {"name": "p"}, "status": {"phase": "Pending", "containerStatuses": [
    ...     {"name": "base", "state": {"waiting": {"reason": "InvalidImageName"}}}]}}
    >>> classify(pod, now=0.0).outcome.value
    'fail'
"""

from __future__ import annotations

from airflow_k8s_retry.classification import keys
from airflow_k8s_retry.classification.classifier import (
    RuleCheck,
    classify,
    classify_seen_for,
    rule_grace,
    trace,
)
from airflow_k8s_retry.classification.model import (
    FAILURE_OUTCOMES,
    REASONS,
    Evidence,
    History,
    Outcome,
    Reason,
    Verdict,
    hint_for,
    meaning_of,
)
from airflow_k8s_retry.classification.policy import DEFAULT_POLICY, FailurePolicy, PolicyError
from airflow_k8s_retry.classification.registry_messages import pull_cause
from airflow_k8s_retry.classification.rules import RULES, PolicyField, Rule, Seconds, rule_named

__all__ = [
    "DEFAULT_POLICY",
    "FAILURE_OUTCOMES",
    "REASONS",
    "RULES",
    "Evidence",
    "FailurePolicy",
    "History",
    "Outcome",
    "PolicyError",
    "PolicyField",
    "Reason",
    "Rule",
    "RuleCheck",
    "Seconds",
    "Verdict",
    "classify",
    "classify_seen_for",
    "hint_for",
    "keys",
    "meaning_of",
    "pull_cause",
    "rule_grace",
    "rule_named",
    "trace",
]
