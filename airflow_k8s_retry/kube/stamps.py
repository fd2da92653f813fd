"""The annotations this package writes on its pods, and their one reader each.

* The **verdict stamp** (``airflow-k8s-retry.io/verdict``): the try's verdict, and whether the pod is
  kept on purpose. Written before a pod is deleted or kept (``lifecycle.finish``), so whatever
  meets the pod afterwards (a late trigger, a sweep, ``explain --pod``) reads the verdict instead
  of judging again.
* The **history stamp** (``airflow-k8s-retry.io/history``): the classifier's memory of a pod still
  being watched (first-seen times, strongest evidence), so a restarted triggerer keeps its grace
  timers.

Readers never raise: a missing, foreign or malformed annotation reads as none. Pure: JSON in and
out, no client, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_k8s_retry.classification.model import History, Verdict
from airflow_k8s_retry.kube.naming import HISTORY_ANNOTATION, VERDICT_ANNOTATION

#: What a malformed annotation can raise while being decoded.
_UNREADABLE = (ValueError, KeyError, TypeError, AttributeError)


@dataclass(frozen=True)
class Stamp:
    """What a pod's verdict annotation says: the verdict, and whether the pod is kept on purpose."""

    verdict: Verdict
    kept: bool


def encode_stamp(verdict: Verdict, *, kept: bool) -> str:
    """The annotation value: small (no history, three evidence items), enough to act on it again."""
    payload = verdict.to_payload()
    payload["history"] = None
    payload["evidence"] = payload["evidence"][:3]
    payload["kept"] = kept
    return json.dumps(payload)


def read_stamp(pod: Mapping[str, Any] | None) -> Stamp | None:
    """The stamp on ``pod``; ``None`` when there is none or it cannot be read (never raises).

    A stamp written before stamps said ``kept`` counts as kept: that is what it meant then.
    """
    raw = _annotation(pod, VERDICT_ANNOTATION)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        return Stamp(Verdict.from_payload(data), kept=bool(data.get("kept", True)))
    except _UNREADABLE:
        return None


def encode_history(history: History) -> str:
    """The history annotation's value (keys sorted: the same history is the same string)."""
    return json.dumps(history.to_payload(), sort_keys=True)


def read_history(pod: Mapping[str, Any] | None) -> History | None:
    """The history stamped on ``pod`` by an earlier trigger; ``None`` when absent or unreadable."""
    raw = _annotation(pod, HISTORY_ANNOTATION)
    if raw is None:
        return None
    try:
        return History.from_payload(json.loads(raw))
    except _UNREADABLE:
        return None


def _annotation(pod: Mapping[str, Any] | None, key: str) -> str | None:
    """The annotation's value, or None (also for metadata or annotations that are not mappings)."""
    metadata = (pod or {}).get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    raw = annotations.get(key) if isinstance(annotations, Mapping) else None
    return str(raw) if raw else None
