"""How this package names and marks its pods: deterministic names, identifying labels, and the
annotations it stamps on them (each with its one reader).

A pod's name is a function of the try it belongs to (dag, task, run, map index, try number,
relaunch), so a create that meets 409 can tell whether the existing pod is its own. Labels are the
ones ``KubernetesPodOperator`` sets (``dag_id``, ``task_id``, ``run_id``, ``map_index``,
``try_number``), made safe the same way for values that are not valid label values.

Two annotations carry what this package knows about a pod:

* the **verdict stamp** (:data:`VERDICT_ANNOTATION`): the try's verdict, and whether the pod is
  kept on purpose. Written before a pod is deleted or kept (``pods.finish``), so whatever
  meets the pod afterwards (a late trigger, a sweep, ``explain --pod``) reads the verdict instead
  of judging again;
* the **history stamp** (:data:`HISTORY_ANNOTATION`): the classifier's memory of a pod still being
  watched (first-seen times, strongest evidence), so a restarted triggerer keeps its grace timers.

Their readers never raise: a missing, foreign or malformed annotation reads as none. Pure: JSON in
and out, no client, no I/O.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

from airflow_k8s_retry.classification.model import History, Verdict

GROUP = "airflow-k8s-retry.io"
MANAGED_LABEL = f"{GROUP}/managed"
RELAUNCH_LABEL = f"{GROUP}/relaunch"
VERDICT_ANNOTATION = f"{GROUP}/verdict"
#: The classifier history (first-seen times, strongest evidence) of a pod being watched, as JSON,
#: so grace timers survive a triggerer restart.
HISTORY_ANNOTATION = f"{GROUP}/history"
MANAGED_SELECTOR = f"{MANAGED_LABEL}=true"
#: The Airflow deployment a pod belongs to (set when ``[kubernetes_retry] deployment_id`` is).
DEPLOYMENT_LABEL = f"{GROUP}/deployment"
#: The task instance id of the try (Airflow 3 gives each try its own): adoption requires a match.
TI_ANNOTATION = f"{GROUP}/ti-id"
#: ``keep`` on the pod of a task with ``on_kill_action="keep_pod"``: a kill from outside the worker
#: (the api-server's listener) keeps it too.
ON_KILL_ANNOTATION = f"{GROUP}/on-kill"

_NOT_DNS = re.compile(r"[^a-z0-9-]+")
T = TypeVar("T")


def _digest(*parts: object, length: int = 8) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:length]


def safe_label_value(value: str) -> str:
    """``value`` made a valid label value by the cncf provider's rule (``make_safe_label_value``),
    so these pods carry exactly the label values ``KubernetesPodOperator``'s pods carry: strip
    non-alphanumeric ends and characters a label value cannot hold; if anything changed or it is
    longer than 63, keep 53 characters and append ``-`` and 9 hex digits of the value's MD5."""
    start = next((i for i, c in enumerate(value) if c.isascii() and c.isalnum()), len(value))
    end = next((i for i in range(len(value), 0, -1) if value[i - 1].isascii() and value[i - 1].isalnum()), 0)
    middle = value[start:end] if start < end else ""
    safe = "".join(c for c in middle if c.isascii() and (c.isalnum() or c in "-_."))
    if len(safe) > 63 or safe != value:
        digest = hashlib.md5(value.encode(), usedforsecurity=False).hexdigest()[:9]
        safe = f"{safe[:53]}-{digest}"
    return safe


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
    #: Airflow 3's task instance id, unique per try: a re-created DAG run with the same run_id,
    #: or another deployment, has other ids, so it never adopts this try's pod.
    ti_id: str = ""
    #: The deployment's id (a label value), when several Airflow deployments share a namespace.
    deployment: str = ""

    @classmethod
    def of(cls, ti: Any, deployment: str = "") -> TryIdentity:
        """The try a task instance runs: the task runner's, or the metadata database's row (its
        ``id`` is the try's; ``map_index`` None reads as unmapped)."""
        return cls(
            dag_id=ti.dag_id,
            task_id=ti.task_id,
            run_id=ti.run_id,
            map_index=ti.map_index if ti.map_index is not None else -1,
            try_number=ti.try_number,
            ti_id=str(getattr(ti, "id", None) or ""),
            deployment=deployment,
        )

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
        if self.deployment:
            labels[DEPLOYMENT_LABEL] = safe_label_value(self.deployment)
        if self.map_index < 0:
            del labels["map_index"]
        return labels

    def selector(self, scope: Literal["instance", "try"]) -> str:
        """The label selector of this package's pods of this task instance: of any of its tries
        (``"instance"``: one DAG run, one map index) or of this try, any relaunch (``"try"``).

        The one spelling of both: the API server lists only pods :meth:`owns` can accept (a mapped
        task's failure callback does not list every map index's pod of its try; an unmapped
        task's asks for pods without a ``map_index``).
        """
        labels = self.labels()
        keys = ["dag_id", "task_id", "run_id", "map_index", DEPLOYMENT_LABEL]
        if scope == "try":
            keys.append("try_number")
        terms = [MANAGED_SELECTOR]
        for key in keys:
            if key in labels:
                terms.append(f"{key}={labels[key]}")
            elif key == "map_index":
                terms.append("!map_index")  # an unmapped task's pods carry no map_index label
        return ",".join(terms)

    def pod_name(self, relaunch: int = 0, prefix: str | None = None) -> str:
        """A DNS-1123 name of at most 63 characters, unique per try and relaunch.

        ``prefix`` (the operator's ``name``) replaces the ``<dag>-<task>`` start of the name.
        """
        parts: list[object] = [self.dag_id, self.task_id, self.run_id, self.map_index]
        if self.ti_id:
            parts.append(self.ti_id)
        suffix = f"-{_digest(*parts)}-t{self.try_number}"
        if relaunch:
            suffix += f"-r{relaunch}"
        room = 63 - len(suffix)
        if prefix:
            return f"{_dns_slug(prefix, room)}{suffix}"
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

    def owns_pod(self, pod: Mapping[str, Any]) -> bool:
        """True when ``pod`` belongs to exactly this task-instance try (labels and, when known, the
        task instance id annotation)."""
        meta = pod.get("metadata") or {}
        if not self.owns(meta.get("labels")):
            return False
        if self.ti_id:
            return bool((meta.get("annotations") or {}).get(TI_ANNOTATION) == self.ti_id)
        return True

    def earlier(self, try_number: int) -> TryIdentity:
        """The identity of an earlier try of the same task instance (its own ti id is unknown)."""
        return replace(self, try_number=try_number, ti_id="")

    def to_payload(self) -> dict[str, Any]:
        return (
            {
                "dag_id": self.dag_id,
                "task_id": self.task_id,
                "run_id": self.run_id,
                "map_index": self.map_index,
                "try_number": self.try_number,
            }
            | ({"ti_id": self.ti_id} if self.ti_id else {})
            | ({"deployment": self.deployment} if self.deployment else {})
        )

    @classmethod
    def from_payload(cls, data: Mapping[str, Any]) -> TryIdentity:
        return cls(
            dag_id=str(data["dag_id"]),
            task_id=str(data["task_id"]),
            run_id=str(data["run_id"]),
            map_index=int(data.get("map_index", -1)),
            try_number=int(data.get("try_number", 1)),
            ti_id=str(data.get("ti_id") or ""),
            deployment=str(data.get("deployment") or ""),
        )


# -- the annotations ---------------------------------------------------------------------------


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
    """The stamp on ``pod``; ``None`` when there is none or it cannot be read (never raises). A
    stamp that does not say ``kept`` counts as kept: what is not known to be disposable stays."""
    return _read(
        pod,
        VERDICT_ANNOTATION,
        lambda data: Stamp(Verdict.from_payload(data), kept=bool(data.get("kept", True))),
    )


def encode_history(history: History) -> str:
    """The history annotation's value (keys sorted: the same history is the same string)."""
    return json.dumps(history.to_payload(), sort_keys=True)


def read_history(pod: Mapping[str, Any] | None) -> History | None:
    """The history stamped on ``pod`` by an earlier trigger; ``None`` when absent or unreadable."""
    return _read(pod, HISTORY_ANNOTATION, History.from_payload)


def _read(pod: Mapping[str, Any] | None, key: str, decode: Callable[[Any], T]) -> T | None:
    """The annotation's JSON value decoded, or None when it is absent or malformed (also when the
    metadata or the annotations are not mappings)."""
    metadata = (pod or {}).get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    raw = annotations.get(key) if isinstance(annotations, Mapping) else None
    if not raw:
        return None
    try:
        return decode(json.loads(str(raw)))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
