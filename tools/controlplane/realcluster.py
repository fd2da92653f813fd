"""A real control plane whose API server's audit log reads as the simulator's records.

:class:`RealCluster` is the benchmark's other backend (``make bench CLUSTER=real``, ``make
bench-stack``) and the soak's cluster. It has the interface of ``bench.simulator.SimulatorProcess``
(a context manager with ``kubeconfig`` and ``records()``), so every benchmark phase runs unchanged
against it. It starts the control plane of :mod:`tools.controlplane` from the same scenario, with
the API server's own audit log switched on, and turns that log into the simulator's record shape:

* ``kind: request``: one per API request a client other than the control plane's own components
  made (user ``kubernetes-admin``: the drivers, Airflow, the disruptor), counted once (a watch's
  ``ResponseStarted`` and ``ResponseComplete`` are one request), at the time the server received
  it. The disruptor's Eviction requests are left out: they are the scenario's doing, not a
  trigger's.
* ``kind: lifecycle``: what a pod became, from every write to a pod the server answered
  (``create pods``, KWOK's ``pods/status`` writes, deletes), read from the pod the server returned,
  at the time the write was received (a slight overstatement of a detection latency, never an
  understatement). An Eviction is ``disruption:EvictionByEvictionAPI`` at the time it was
  received: the API server writes the ``DisruptionTarget`` condition inside that request.

:meth:`RealCluster.component_pids` names the processes whose CPU time the footprint phase reads.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ADMIN = "kubernetes-admin"
#: What the API server writes to its audit log: pod writes with the pod it returned (to read the
#: pod's state and UID), every other request of the admin identity as metadata, nothing else.
AUDIT_POLICY: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {
            "level": "RequestResponse",
            "verbs": ["create", "update", "patch", "delete"],
            "resources": [{"group": "", "resources": ["pods", "pods/status"]}],
        },
        {"level": "Metadata", "users": [ADMIN]},
        {"level": "None"},
    ],
}


class RealClusterError(RuntimeError):
    """The control plane's binaries are missing or it did not start."""


def binaries() -> Path:
    """The cached control-plane binaries (:func:`~tools.controlplane.cluster.built_binaries`)."""
    from tools.controlplane.cluster import built_binaries

    found = built_binaries()
    if found is None:
        raise RealClusterError("the control plane is not built for these pins; run 'make controlplane' first")
    return found


class RealCluster:
    """A real control plane for one phase, as a context manager.

    :param workdir: where the cluster's folder, its audit log and the scenario are written.
    :param scenario: the scenario as a dict (the simulator's keys; the real backend refuses what it
        cannot play, naming the key).
    """

    #: Phases adapt what the backend cannot play (init containers) by this.
    real = True

    def __init__(self, workdir: Path, scenario: dict[str, Any]) -> None:
        self.workdir = workdir
        self.scenario = scenario
        self.directory = workdir / "cluster"
        self.audit = workdir / "audit.log"
        self._cp: Any = None
        #: When the control plane was ready: its own start-up checks, made as the admin, come before.
        self.ready_at = 0.0

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    def __enter__(self) -> RealCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        from airflow_k8s_retry_testing.scenario import Scenario
        from tools.controlplane.cluster import ControlPlane

        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "scenario.yaml").write_text(yaml.safe_dump(self.scenario, sort_keys=False))
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(AUDIT_POLICY, sort_keys=False))
        if self.audit.exists():
            self.audit.unlink()
        self._cp = ControlPlane(
            self.directory,
            binaries(),
            Scenario.from_dict(self.scenario),
            apiserver_extra_args=[
                f"--audit-policy-file={policy}",
                f"--audit-log-path={self.audit}",
                "--audit-log-format=json",
                "--audit-log-maxsize=0",
            ],
        )
        self._cp.start()
        self.ready_at = time.time()

    @property
    def control_plane(self) -> Any:
        """The running :class:`~tools.controlplane.cluster.ControlPlane` (to
        restart a component, or read which nodes were lost)."""
        if self._cp is None:
            raise RealClusterError("cluster not started")
        return self._cp

    def component_pids(self) -> dict[str, int]:
        """The pids of kube-apiserver and etcd (whose CPU a real cluster pays for its clients)."""
        if self._cp is None:
            raise RealClusterError("cluster not started")
        return {name: int(self._cp.pids[name]) for name in ("kube-apiserver", "etcd")}

    def stop(self) -> None:
        cp, self._cp = self._cp, None
        if cp is not None:
            cp.stop()

    def records(self) -> list[dict[str, Any]]:
        records = records_from_audit(read_audit_events(self.audit))
        return [r for r in records if r["kind"] != "request" or r["t"] >= self.ready_at]


def read_audit_events(path: Path) -> Iterator[dict[str, Any]]:
    """The audit log's events (a half-written last line, if any, is skipped)."""
    if not path.exists():
        return
    with path.open() as lines:
        for line in lines:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def _time(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp).timestamp()


def records_from_audit(events: Iterator[dict[str, Any]]) -> list[dict[str, Any]]:
    """The audit log as the simulator's records (see the module's docstring), in time order."""
    seen: set[str] = set()
    uids: dict[tuple[str | None, str | None], str] = {}
    out: list[dict[str, Any]] = []
    for event in events:
        audit_id = str(event.get("auditID"))
        if audit_id in seen:
            continue
        seen.add(audit_id)
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", "")
        if ref.get("subresource"):
            resource = f"{resource}/{ref['subresource']}"
        t = _time(event["requestReceivedTimestamp"])
        namespace, name = ref.get("namespace"), ref.get("name")
        code = int((event.get("responseStatus") or {}).get("code") or 0)
        pod = (
            event.get("responseObject") if (event.get("responseObject") or {}).get("kind") == "Pod" else None
        )
        if pod is not None:
            key = (pod["metadata"].get("namespace"), pod["metadata"]["name"])
            uids[key] = pod["metadata"]["uid"]
            out += lifecycle_records(pod, event["verb"], resource, t)
        if resource == "pods/eviction" and event["verb"] == "create":
            if code < 300 and (namespace, name) in uids:
                out.append(
                    _lifecycle(
                        namespace, name, uids[(namespace, name)], "disruption:EvictionByEvictionAPI", t
                    )
                )
            continue
        if (event.get("user") or {}).get("username") != ADMIN:
            continue
        out.append(
            {
                "t": t,
                "kind": "request",
                "verb": event["verb"],
                "resource": resource,
                "namespace": namespace,
                "name": name,
                "status": code,
                "user_agent": event.get("userAgent", ""),
                "watch": event["verb"] == "watch",
            }
        )
    out.sort(key=lambda r: r["t"])
    return out


def _lifecycle(namespace: str | None, name: str | None, uid: str, change: str, t: float) -> dict[str, Any]:
    return {"t": t, "kind": "lifecycle", "namespace": namespace, "name": name, "uid": uid, "change": change}


def lifecycle_records(pod: dict[str, Any], verb: str, resource: str, t: float) -> list[dict[str, Any]]:
    """What the pod the server returned for a write shows (the simulator's ``change`` values)."""
    meta = pod["metadata"]
    ns, name, uid = meta.get("namespace"), meta["name"], meta["uid"]
    changes: list[str] = []
    if verb == "create" and resource == "pods":
        changes.append("created")
    if verb == "delete" or meta.get("deletionTimestamp"):
        changes.append("deleting")
    status = pod.get("status") or {}
    if status.get("phase"):
        changes.append(f"phase:{status['phase']}")
    for container in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        state = container.get("state") or {}
        if "waiting" in state:
            changes.append(f"waiting:{state['waiting'].get('reason', '')}")
        if "terminated" in state:
            changes.append(f"terminated:{state['terminated'].get('reason', '')}")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            changes.append(f"disruption:{condition.get('reason', '')}")
    return [_lifecycle(ns, name, uid, change, t) for change in changes]
