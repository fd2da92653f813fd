"""``PodEvent``: the payload of the one ``TriggerEvent`` a ``PodStateTrigger`` emits.

It is what the operator's (and the sensor's) ``execute_complete`` act on: the pod, the verdict,
the relaunches so far, where the trigger's log streaming stopped, and what the verdict was judged
on (:mod:`airflow_k8s_retry.kube.snapshot`) and, for a pod its task owns, the connection that
deletes it (the api-server's kill listener reads it while the task instance waits for a worker:
:mod:`airflow_k8s_retry.plugins.kills`). Plain JSON, so it passes through Airflow's
serialization of trigger events unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_k8s_retry.classification.model import Verdict
from airflow_k8s_retry.kube.logstream import LogPosition


@dataclass(frozen=True)
class PodEvent:
    """The payload of the one ``TriggerEvent`` a :class:`PodStateTrigger` emits."""

    namespace: str
    pod_name: str
    pod_uid: str
    verdict: Verdict
    relaunches: int
    #: Where the trigger's log streaming stopped (``logging_interval``); the worker writes the rest.
    log_position: LogPosition | None = None
    #: What the verdict was judged on (:func:`airflow_k8s_retry.kube.snapshot.take`): the worker's
    #: failure report reads it instead of the API. ``None``: not carried (too large, older trigger).
    seen: Mapping[str, Any] | None = None
    #: Only for a pod the task owns (deleted on a kill): ``kubernetes_conn_id`` and, when the task
    #: set any, ``cluster`` (its KPO cluster arguments), what a delete after a user's kill needs
    #: besides the pod's name, namespace and UID. ``None``: a pod kept on a kill, or an older trigger.
    connection: Mapping[str, Any] | None = None

    def to_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "namespace": self.namespace,
            "pod_name": self.pod_name,
            "pod_uid": self.pod_uid,
            "verdict": self.verdict.to_payload(),
            "relaunches": self.relaunches,
        }
        if self.log_position is not None:
            payload["log_position"] = self.log_position.to_payload()
        if self.seen is not None:
            payload["seen"] = dict(self.seen)
        if self.connection is not None:
            payload["connection"] = dict(self.connection)
        return payload

    @classmethod
    def from_payload(cls, data: Mapping[str, Any]) -> PodEvent:
        missing = [k for k in ("namespace", "pod_name", "pod_uid", "verdict") if k not in data]
        if missing:
            raise ValueError(f"not a PodStateTrigger event payload: missing {', '.join(missing)}")
        return cls(
            namespace=str(data["namespace"]),
            pod_name=str(data["pod_name"]),
            pod_uid=str(data["pod_uid"]),
            verdict=Verdict.from_payload(data["verdict"]),
            relaunches=int(data.get("relaunches", 0)),
            log_position=LogPosition.from_payload(data.get("log_position")),
            seen=data.get("seen") if isinstance(data.get("seen"), Mapping) else None,
            connection=data.get("connection") if isinstance(data.get("connection"), Mapping) else None,
        )
