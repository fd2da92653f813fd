"""Deterministic pod names, identifying labels and the annotations this package stamps on pods.

A pod's name is a function of the try it belongs to (dag, task, run, map index, try number,
relaunch), so a create that meets 409 can tell whether the existing pod is its own. Labels are the
ones ``KubernetesPodOperator`` sets (``dag_id``, ``task_id``, ``run_id``, ``map_index``,
``try_number``), made safe the same way for values that are not valid label values.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GROUP = "airflow-k8s-retry.io"
MANAGED_LABEL = f"{GROUP}/managed"
RELAUNCH_LABEL = f"{GROUP}/relaunch"
VERDICT_ANNOTATION = f"{GROUP}/verdict"
#: The classifier history (first-seen times, strongest evidence) of a pod being watched, as JSON,
#: so grace timers survive a triggerer restart.
HISTORY_ANNOTATION = f"{GROUP}/history"
MANAGED_SELECTOR = f"{MANAGED_LABEL}=true"

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NOT_DNS = re.compile(r"[^a-z0-9-]+")


def _digest(*parts: object, length: int = 8) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:length]


def safe_label_value(value: str) -> str:
    """Return ``value`` if it is a valid label value, else a valid one that still identifies it."""
    if len(value) <= 63 and _LABEL_VALUE.match(value):
        return value
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", value)[:54].strip("-_.")
    return f"{cleaned}-{_digest(value)}".strip("-_.")


def _dns_slug(value: str, limit: int) -> str:
    return _NOT_DNS.sub("-", value.lower()).strip("-")[:limit].strip("-") or "x"


@dataclass(frozen=True)
class TryIdentity:
    """The Airflow try a pod belongs to."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1
    try_number: int = 1

    def labels(self, relaunch: int = 0) -> dict[str, str]:
        """The pod's identifying labels. ``map_index`` is set only for mapped tasks, as
        ``KubernetesPodOperator`` does: ``-1`` is not a valid label value (it must start with an
        alphanumeric character), so the API server rejects it."""
        labels = {
            "dag_id": safe_label_value(self.dag_id),
            "task_id": safe_label_value(self.task_id),
            "run_id": safe_label_value(self.run_id),
            "map_index": str(self.map_index),
            "try_number": str(self.try_number),
            MANAGED_LABEL: "true",
            RELAUNCH_LABEL: str(relaunch),
        }
        if self.map_index < 0:
            del labels["map_index"]
        return labels

    def pod_name(self, relaunch: int = 0) -> str:
        """A DNS-1123 name of at most 63 characters, unique per try and relaunch."""
        suffix = f"-{_digest(self.dag_id, self.task_id, self.run_id, self.map_index)}-t{self.try_number}"
        if relaunch:
            suffix += f"-r{relaunch}"
        room = 63 - len(suffix)
        dag = _dns_slug(self.dag_id, room // 2)
        task = _dns_slug(self.task_id, room - len(dag) - 1)
        return f"{dag}-{task}{suffix}"

    def owns(self, pod_labels: Mapping[str, str] | None) -> bool:
        """True when a pod's labels name exactly this try (any relaunch)."""
        labels = dict(pod_labels or {})
        expected = self.labels()
        if self.map_index < 0 and "map_index" in labels:
            return False  # a mapped task's pod is never an unmapped try's
        return all(labels.get(k) == v for k, v in expected.items() if k != RELAUNCH_LABEL)

    def to_payload(self) -> dict[str, Any]:
        return {
            "dag_id": self.dag_id,
            "task_id": self.task_id,
            "run_id": self.run_id,
            "map_index": self.map_index,
            "try_number": self.try_number,
        }

    @classmethod
    def from_payload(cls, data: Mapping[str, Any]) -> TryIdentity:
        return cls(
            dag_id=str(data["dag_id"]),
            task_id=str(data["task_id"]),
            run_id=str(data["run_id"]),
            map_index=int(data.get("map_index", -1)),
            try_number=int(data.get("try_number", 1)),
        )
